"""The UOp IR: dtypes, ops, the UOp itself, pattern rewriting with traces, the simplifier,
the Tensor front end, ``@function`` and gradients.  Imports nothing else of uopviz."""

from uopviz.core.dtype import AddrSpace, DType, DTypeKind, PtrDType, dtypes
from uopviz.core.errors import UopvizError
from uopviz.core.ops import AxisType, GroupOp, OpFamily, Ops
from uopviz.core.rewrite import (
    PassTrace,
    PatternMatcher,
    RewriteError,
    RewriteStep,
    Rule,
    Trace,
    UPat,
    graph_rewrite,
    traced_pass,
    tracing,
)
from uopviz.core.uop import BufferArg, ParamArg, UOp, UOpError, UOpTypeError, format_graph, toposort
from uopviz.core.uop_text import UOpTextError, parse_graph, print_graph

__all__ = [
    "AddrSpace",
    "AxisType",
    "BufferArg",
    "DType",
    "DTypeKind",
    "GroupOp",
    "OpFamily",
    "Ops",
    "ParamArg",
    "PassTrace",
    "PatternMatcher",
    "PtrDType",
    "RewriteError",
    "RewriteStep",
    "Rule",
    "Trace",
    "UOp",
    "UOpError",
    "UOpTextError",
    "UOpTypeError",
    "UopvizError",
    "UPat",
    "dtypes",
    "format_graph",
    "graph_rewrite",
    "parse_graph",
    "print_graph",
    "toposort",
    "traced_pass",
    "tracing",
]
