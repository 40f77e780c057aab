"""The C-family dialects are data (a CDialect each) read by one renderer."""

from __future__ import annotations

import dataclasses

from uopviz.backends.c import C_DIALECT, CRenderer
from uopviz.backends.cfamily import CStyleRenderer
from uopviz.backends.cfamily_dialect import CDialect
from uopviz.backends.cuda import CUDA_DIALECT, CUDARenderer
from uopviz.backends.opencl import OpenCLRenderer, opencl_dialect

from . import linear_programs as lp

#: the hooks each dialect's renderer still overrides: only where its output has another structure
#: (a new override here should be a new structure, not a spelling a CDialect attribute can hold)
STRUCTURAL_HOOKS = {
    CRenderer: {
        "vector_from_runs", "two_vector_shuffle", "two_vector_shuffle_fallback", "constant_vector",
        "register_pin", "register_tile_lanes", "directives", "_mask_type", "_pick",
        "selects_lanes", "prefix_vector_load", "range_header",
        "select_lanes", "vector_expression", "helper_vector_trunc", "helper_vector_shift", "vector_cast",
        "helper_vector_float_to_int",
    },
    OpenCLRenderer: {
        "__init__", "round_to", "load_element", "store_element", "vector_expression", "selects_lanes",
        "select_lanes", "_mask_element", "local_declaration", "vector_load", "vector_store", "held_bits",
        "held_value",
    },
    CUDARenderer: {"render_wmma"},
}


def test_each_dialect_is_data_on_the_one_renderer() -> None:
    assert isinstance(C_DIALECT, CDialect) and isinstance(CUDA_DIALECT, CDialect)
    assert isinstance(OpenCLRenderer().dialect, CDialect)
    for renderer, hooks in STRUCTURAL_HOOKS.items():
        assert renderer.__bases__ == (CStyleRenderer,)
        overridden = {name for name, value in vars(renderer).items() if callable(value) or
                      isinstance(value, staticmethod)}
        assert overridden == hooks, renderer.__name__


def test_opencl_dialect_follows_the_device_extensions() -> None:
    with_half, without_half = opencl_dialect(True, True), opencl_dialect(False, False)
    assert with_half.scalar_types["float16"] == "half" and "float16" not in with_half.held_as_float
    assert without_half.scalar_types["float16"] == "float" and "float16" in without_half.held_as_float
    assert without_half.includes == ()
    case = lp.half_arithmetic(16)
    assert "cl_khr_fp16" in OpenCLRenderer(has_fp16=True).render(case.linear)
    assert "vload_half" in OpenCLRenderer(has_fp16=False, has_fp64=False).render(case.linear)


def test_a_changed_spelling_changes_only_that_spelling() -> None:
    """The renderer reads the dialect: a C dialect with other qualifiers and prefetches writes them."""

    class Renamed(CRenderer):
        dialect = dataclasses.replace(C_DIALECT, restrict="__restrict", kernel_prefix="static void")

    case = lp.gemm(8, 8, 8)
    plain, renamed = CRenderer().render(case.linear), Renamed().render(case.linear)
    assert "static void " in renamed and "__restrict " in renamed
    assert renamed.replace("static void ", "void ").replace("__restrict ", "restrict ") == plain


def test_gpu_indices_come_from_the_dialect() -> None:
    case = lp.group_reduce(5, 8, 100)
    assert "blockIdx.x" in CUDARenderer().render(case.linear)
    assert "get_group_id(0)" in OpenCLRenderer().render(case.linear)
    source = CUDARenderer().render(lp.gpu_elementwise(4, 8).linear)
    assert "__syncthreads" not in source and "blockIdx.x" in source
