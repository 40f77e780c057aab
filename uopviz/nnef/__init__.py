"""NNEF 2.0 / SkriptND support: parsing, printing and tensor data files.

- :func:`parse_module` turns SkriptND text into the syntax tree of :mod:`uopviz.nnef.syntax.ast`;
  :func:`print_module` turns a tree back into canonical text.
- :func:`read_tensor` / :func:`write_tensor` read and write NNEF ``.dat`` tensor files.
- Every problem in an input raises :class:`NNEFError` (``.file``, ``.line``, ``.column``).
- :func:`load` / :func:`loads` compose a model (SkriptND file or folder, NNEF 1.0 folder, .tgz)
  into a :class:`Graph` that lowers to UOp kernels, compiles and runs (``g.compile()``, ``g.run()``).
- :mod:`uopviz.nnef.examples` ships example models (``examples.path("alexnet")``).
"""

from uopviz.nnef import examples
from uopviz.nnef.data import read_header, read_tensor, tensor_bytes, write_tensor
from uopviz.nnef.errors import NNEFError, NNEFWarning
from uopviz.nnef.graph import Graph, Operation, TensorInfo
from uopviz.nnef.loader import load, loads
from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.parser import parse_expression, parse_module
from uopviz.nnef.syntax.printer import print_expression, print_module

__all__ = [
    "Graph",
    "NNEFError",
    "NNEFWarning",
    "Operation",
    "TensorInfo",
    "ast",
    "examples",
    "load",
    "loads",
    "parse_expression",
    "parse_module",
    "print_expression",
    "print_module",
    "read_header",
    "read_tensor",
    "tensor_bytes",
    "write_tensor",
]
