"""The OptOps: what an optimization is and how each one reshapes a kernel, one module per thing.

* ``opts.py``: :class:`Opt`, :class:`OptOp`, :class:`OptError` (arguments checked when an Opt is
  made), and opts as JSON data;
* ``axes.py``: kernel order and the range helpers; SPLIT, PADTO, SWAP and NOLOCALS;
* ``tensor_cores.py``: TC and the fragment layouts of the backends' tensor cores;
* ``kernel.py``: :class:`Kernel` and the table from each OptOp to the function applying it;
* ``heuristic.py``: the hand-coded choice of opts for a kernel's backend (``opts="heuristic"``);
* ``staging.py``: CPU: strips of far-apart rows copied into contiguous buffers;
* ``local_buffers.py``: GPU: GROUP_REDUCE reductions through LOCAL buffers.

Imports point one way inside: ``opts`` <- ``axes`` <- ``tensor_cores`` <- ``kernel`` <-
``heuristic``.  The package sees the IR, ``passes/indexing.py`` and the backends' declarations,
never the engine: BEAM search times kernels, so it is the engine's, and the Optimize stage
(``passes/optimize.py``) reaches it through the ``search`` entry point.
"""

from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.optops.opts import Opt, OptError, OptOp

__all__ = ["Kernel", "Opt", "OptError", "OptOp"]
