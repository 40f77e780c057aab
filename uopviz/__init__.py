"""uopviz: a visual compiler explorer for the UOp dialect, made for Jupyter.

``import uopviz as uv`` gives the IR (``uv.UOp``, ``uv.Ops``, ``uv.dtypes``...), rewriting with
traces, the Tensor front end, ``uv.compile`` and the widgets (``uv.explore``).  Heavier parts
(backends, widgets, NNEF) are imported on first use so ``import uopviz`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from uopviz.core import *  # noqa: F403 - the IR is the package's face
from uopviz.core import __all__ as _core_names
from uopviz.core.entry_points import provide

__version__ = "0.1.0"

# name -> "module:attribute" (attribute empty: the module itself), imported on first use
_LAZY: dict[str, str] = {
    "Tensor": "uopviz.core.tensor:Tensor",
    "function": "uopviz.core.function:function",
    "gradient": "uopviz.core.gradient:gradient",
    "simplify": "uopviz.core.symbolic:simplify",
    "compile": "uopviz.engine.program:compile",
    "Program": "uopviz.engine.program:Program",
    "Kernel": "uopviz.passes.optops.kernel:Kernel",
    "Opt": "uopviz.passes.optops.opts:Opt",
    "OptOp": "uopviz.passes.optops.opts:OptOp",
    "OptError": "uopviz.passes.optops.opts:OptError",
    "Timing": "uopviz.backends.timing:Timing",
    "cpu_target": "uopviz.backends.target:cpu_target",
    "set_target": "uopviz.backends.target:set_target",
    "using_target": "uopviz.backends.target:using_target",
    "explore": "uopviz.widgets:explore",
    "backends": "uopviz.backends:",
    "passes": "uopviz.passes:",
    "widgets": "uopviz.widgets:",
    "nnef": "uopviz.nnef:",
}

__all__ = [*_core_names, *_LAZY]

# The composition root: the layers below call the engine through these entry points (imported on
# first use), so no module imports a layer above its own (docs/design/architecture.md).
provide("compile", "uopviz.engine.program:compile")
provide("gradient", "uopviz.core.gradient:gradient")
provide("lower_kernel", "uopviz.engine.kernel:lower_kernel")
provide("time_kernel", "uopviz.engine.kernel:time_kernel_on_random_inputs")
provide("search", "uopviz.engine.search:beam_search")


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'uopviz' has no attribute {name!r}")
    module_name, _, attribute = target.partition(":")
    module = importlib.import_module(module_name)
    value = getattr(module, attribute) if attribute else module
    globals()[name] = value
    return value
