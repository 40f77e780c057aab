"""The lowering pipeline of the spec: Callify → Rangeify → Optimize → Expand → Instruction
Selection → Linearize → Register/Memory Plan → Render, one module per stage, listed in order by
:func:`uopviz.passes.pipeline.lower`.  ``compile`` and ``Program`` are the entry points; ``Kernel``,
``Opt``, ``OptOp`` and ``OptError`` shape single kernels."""

from uopviz.passes.kernel import Kernel, Opt, OptError, OptOp
from uopviz.passes.pipeline import STAGES, Program, compile

__all__ = ["STAGES", "Kernel", "Opt", "OptError", "OptOp", "Program", "compile"]
