"""The one walk over LINEAR (backends/linear_walk.py): every renderer dispatches through the named
methods of RENDER_METHODS and gets its scopes checked by the walk, so a malformed program is
refused with the same words on the C family, LLVM and the Python interpreter."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from uopviz.backends import get
from uopviz.backends.base import RenderError
from uopviz.backends.cfamily_state import CFamilyRenderState
from uopviz.backends.linear_walk import RENDER_METHODS, LinearWalk
from uopviz.backends.llvm_renderer import LLVMRenderState
from uopviz.backends.python import PythonWalk
from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp

from . import linear_programs as lp

WALKS = (CFamilyRenderState, LLVMRenderState, PythonWalk)
RENDERERS = ("c", "opencl", "cuda", "llvm", "python")

#: the ops of RENDER_METHODS each walk has no method for: refused by the walk, with one message
REFUSED = {
    CFamilyRenderState: {Ops.STACK},
    LLVMRenderState: {Ops.STACK},
    PythonWalk: {Ops.CUSTOM},
}


@pytest.mark.parametrize("walk", WALKS, ids=lambda walk: walk.__name__)
def test_each_walk_renders_through_the_named_methods(walk: type[LinearWalk]) -> None:
    assert issubclass(walk, LinearWalk)
    missing = {op for op, name in RENDER_METHODS.items() if not callable(getattr(walk, name, None))}
    assert missing == REFUSED[walk]
    assert callable(walk.render_alu)
    # no walk keeps a dispatch of its own beside the shared one
    assert "render_uop" not in vars(walk) and not hasattr(walk, "_HANDLERS")


def _interleaved_loops() -> UOp:
    b = lp.Builder()
    out = b.param(0, 4)
    outer, inner = b.loop(2), b.loop(2)
    b.store(out, outer * lp.idx(2) + inner, lp.const(dtypes.float32, 1.0))
    b.end(outer)
    b.end(inner)
    return b.linear("bad_nesting")


def _open_if() -> UOp:
    b = lp.Builder()
    out = b.param(0, 4)
    i = b.loop(4)
    b.emit(UOp(Ops.IF, (b.emit(i < lp.idx(2)),)))
    b.store(out, i, lp.const(dtypes.float32, 1.0))
    b.end(i)
    return b.linear("open_if")


@pytest.mark.parametrize("backend", RENDERERS)
def test_scopes_are_checked_by_the_walk_on_every_backend(backend: str) -> None:
    with pytest.raises(RenderError, match=r"uop \d+ \(END.*END closes range \d+ but the innermost open block "
                                          r"is RANGE"):
        get(backend).render(_interleaved_loops())
    # the END closes the IF's loop while the IF is open: the walk names the IF, not the loop
    with pytest.raises(RenderError, match="innermost open block is IF"):
        get(backend).render(_open_if())


@pytest.mark.parametrize("backend", RENDERERS)
def test_a_program_that_ends_inside_a_loop_is_refused_on_every_backend(backend: str) -> None:
    b = lp.Builder()
    out = b.param(0, 4)
    i = b.loop(4)
    b.store(out, i, lp.const(dtypes.float32, 0.0))
    with pytest.raises(RenderError, match=r"kernel 'open_loop' ends with an open range \(RANGE\); an END or "
                                          r"ENDIF is missing"):
        get(backend).render(b.linear("open_loop"))


@pytest.mark.parametrize("walk", [CFamilyRenderState, LLVMRenderState])
def test_an_op_without_a_method_is_refused_by_the_walk(walk: type[LinearWalk]) -> None:
    backend = "c" if walk is CFamilyRenderState else "llvm"
    rendering = walk(get(backend).renderer, lp.elementwise(4).linear)
    stacked = UOp(Ops.STACK, (lp.const(dtypes.float32, 1.0),), None, dtypes.float32)
    with pytest.raises(RenderError, match="STACK cannot appear in a linear program for this backend"):
        rendering.render_uop(stacked)


def test_the_python_walk_refuses_custom_with_the_same_words() -> None:
    b = lp.Builder()
    out = b.param(0, 1)
    b.store(out, 0, b.emit(UOp(Ops.CUSTOM, (), ("1.0f", dtypes.float32))))
    with pytest.raises(RenderError, match=r"python: uop \d+ \(CUSTOM, float32\) of kernel 'E_custom': CUSTOM "
                                          r"cannot appear in a linear program for this backend"):
        get("python").render(b.linear("E_custom"))


STORE_TEXT = {"c": "data0[", "llvm": "store float", "python": "store_global("}


def test_the_walk_attributes_every_line_to_its_uop_in_each_language() -> None:
    case = lp.if_block(8)
    for backend in ("c", "llvm", "python"):
        source, source_map = get(backend).render_mapped(case.linear)
        lines = source.split("\n")
        stores = [line for line, position in source_map.lines.items()
                  if case.linear.src[position].op is Ops.STORE]
        assert stores, backend
        # the store's lines are the language's store
        assert all(STORE_TEXT[backend] in lines[line - 1] for line in stores), backend


def test_the_renderer_modules_import_one_way() -> None:
    """No import cycle among the backends' modules, imports under ``if TYPE_CHECKING:`` counted (the
    layer contract leaves them out), and no private name imported from one module into another."""
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the dev extra)")
    graph = grimp.build_graph("uopviz", exclude_type_checking_imports=False, cache_dir=None)
    modules = sorted(m for m in graph.modules if m.startswith("uopviz.backends."))
    for module in modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.startswith("uopviz.backends.") and imported != module:
                assert not graph.chain_exists(imported, module), f"{module} <-> {imported}"
    for path in sorted((Path(__file__).resolve().parents[2] / "uopviz" / "backends").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("uopviz"):
                private = [alias.name for alias in node.names if alias.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"
