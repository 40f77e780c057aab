"""The lowering pipeline of the spec: Callify → Rangeify → Optimize → Expand → Instruction
Selection → Linearize → Register/Memory Plan → Render, one module per stage, listed in order in one
table, :data:`uopviz.passes.pipeline.PIPELINE`.  ``Kernel``, ``Opt``, ``OptOp`` and ``OptError``
shape single kernels (:mod:`uopviz.passes.optops`: the OptOps, one module per thing).  Compiling
and running programs (``uv.compile``, ``Program``), BEAM search and tuning records are the engine's
(:mod:`uopviz.engine`).
"""

from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.optops.opts import Opt, OptError, OptOp
from uopviz.passes.pipeline import PIPELINE, STAGES

__all__ = ["PIPELINE", "STAGES", "Kernel", "Opt", "OptError", "OptOp"]
