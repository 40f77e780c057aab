"""CUDA C++ as the shared C-family renderer writes it (the source the CUDA backend,
:mod:`uopviz.backends.cuda`, compiles and runs): :data:`CUDA_DIALECT` and :class:`CUDARenderer`.

``gidxN``/``lidxN``/``idxN`` SPECIALs are ``blockIdx``/``threadIdx``/global indices, LOCAL buffers are
``__shared__`` arrays, BARRIER is ``__syncthreads()``.  CUDA has no vector arithmetic, so the
backend asks for devectorized programs (``vector_widths = ()``); the vectors that remain (WMMA
operands, or any vector a hand-made program holds) are small structs (``float32x4 {float v[4];}``)
handled lane by lane.

WMMA is real tensor-core code: the ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` PTX
instruction, one warp (32 lanes) per 16×8×16 tile, each lane holding the fragment elements the
PTX ISA assigns it (``TensorCore.layout_*`` records that assignment).  It needs sm_80 or newer.
"""

from __future__ import annotations

from uopviz.backends.base import TensorCore
from uopviz.backends.cfamily import CStyleRenderer
from uopviz.backends.cfamily_dialect import MATH_LIBRARY, CDialect
from uopviz.backends.cfamily_spelling import CRendering
from uopviz.core.dtype import dtypes
from uopviz.core.uop import UOp

# ---------------------------------------------------------------------------------------------
# the tensor core: PTX mma.m16n8k16 with f16 inputs and f32 accumulators


def _mma_m16n8k16_layouts() -> tuple[tuple, tuple, tuple]:
    """Fragment layouts of mma.m16n8k16 (.f16 A/B, .f32 C/D) as the PTX ISA defines them:
    ``group = lane >> 2``, ``thread = lane % 4``."""
    a, b, c = [], [], []
    for lane in range(32):
        group, thread = lane >> 2, lane % 4
        for i in range(8):  # A is 16x16 (m, k), 8 halves per lane
            row = group + (8 if (i >> 1) & 1 else 0)
            col = thread * 2 + (i & 1) + (8 if i >= 4 else 0)
            a.append((row, col))
        for i in range(4):  # B is 16x8 (k, n), 4 halves per lane
            b.append((thread * 2 + (i & 1) + (8 if i >= 2 else 0), group))
        for i in range(4):  # C/D are 16x8 (m, n), 4 floats per lane
            c.append((group + (8 if i >= 2 else 0), thread * 2 + (i & 1)))
    return tuple(a), tuple(b), tuple(c)


MMA_M16N8K16_F16_F32 = TensorCore(
    "cuda_mma_m16n8k16_f16_f32", (16, 8, 16), dtypes.float16, dtypes.float32, 32, *_mma_m16n8k16_layouts()
)


# ---------------------------------------------------------------------------------------------
# the renderer


#: CUDA C++ for NVRTC or nvcc: no vector arithmetic (vectors are small structs handled lane by lane),
#: half through cuda_fp16.h's conversions
CUDA_DIALECT = CDialect(
    name="cuda",
    scalar_types={
        "bool": "bool",
        "int8": "signed char",
        "int16": "short",
        "int32": "int",
        "int64": "long long",
        "uint8": "unsigned char",
        "uint16": "unsigned short",
        "uint32": "unsigned int",
        "uint64": "unsigned long long",
        "float16": "half",
        "bfloat16": "float",
        "float32": "float",
        "float64": "double",
        "index": "long long",
    },
    # 64-bit index arithmetic costs a GPU two 32-bit instructions for each add, several for a multiply
    narrow_index_type="int",
    memory_types={"bfloat16": "unsigned short"},
    kernel_prefix='extern "C" __global__ void',
    helper_prefix="__device__ static inline",
    restrict="__restrict__",
    includes=("#include <cuda_fp16.h>",),
    special_indices={
        "gidx": "blockIdx.{axis}",
        "gidx_alone": "blockIdx.{axis}",
        "lidx": "threadIdx.{axis}",
        "idx": "(blockIdx.{axis} * blockDim.{axis} + threadIdx.{axis})",
    },
    barrier="__syncthreads();",
    local_qualifier="__shared__ ",
    native_vector_counts=(1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256),
    other_vector_counts="exact",
    native_vector_ops=frozenset(),
    vector_name="{scalar}x{count}",
    vector_bool_element="bool",
    vector_typedef="typedef struct __align__({align}) {{ {element} v[{lanes}]; }} {name};",
    lane="{vector}.v[{index}]",
    vector_literal="{type}{{{{{items}}}}}",
    float16_constant="__float2half({})",
    float_specials={
        ("float32", "nan"): "__int_as_float(0x7fc00000)",
        ("float32", "inf"): "__int_as_float(0x7f800000)",
        ("float32", "-inf"): "__int_as_float(0xff800000)",
        ("float64", "nan"): "__longlong_as_double(0x7ff8000000000000LL)",
        ("float64", "inf"): "__longlong_as_double(0x7ff0000000000000LL)",
        ("float64", "-inf"): "__longlong_as_double(0xfff0000000000000LL)",
    },
    math_functions=MATH_LIBRARY,
    math_float16_call="__float2half({})",
    math_float16_argument="__half2float({})",
    float16_widen="__half2float({})",
    float16_narrow="__float2half((float){})",
    element_vectors=True,
    copy="memcpy",
    bits_as_float="__uint_as_float({})",
    float_as_bits="__float_as_uint({})",
)


class CUDARenderer(CStyleRenderer):
    """CUDA C++ for NVRTC or nvcc (:data:`CUDA_DIALECT`), with code for what has another structure
    in CUDA: WMMA as the PTX ``mma`` instruction."""

    dialect = CUDA_DIALECT

    def render_wmma(self, state: CRendering, u: UOp, config: TensorCore, a: str, b: str, c: str) -> None:
        if config != MMA_M16N8K16_F16_F32:
            raise state.fail(u, f"the cuda backend has no instruction for tensor core {config.name}")
        if (u.src[0].dtype, u.src[1].dtype, u.src[2].dtype) != (
            dtypes.float16.vec(8),
            dtypes.float16.vec(4),
            dtypes.float32.vec(4),
        ):
            raise state.fail(
                u,
                f"{config.name} takes half8, half4 and float4 fragments, got "
                f"{', '.join(s.dtype.name for s in u.src)}",
            )
        a_type, b_type, c_type = (self.vector_type(s.dtype) for s in u.src)
        prefix = self.dialect.helper_prefix
        helper = self.helper(
            "mma_m16n8k16_f16_f32",
            lambda: (
                f"{prefix} {c_type} mma_m16n8k16_f16_f32({a_type} a, {b_type} b, {c_type} c) {{\n"
                f"  const unsigned int* ar = reinterpret_cast<const unsigned int*>(&a);\n"
                f"  const unsigned int* br = reinterpret_cast<const unsigned int*>(&b);\n"
                f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%0, %1, %2, %3}}, '
                f'{{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"\n'
                f'      : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3])\n'
                f'      : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));\n'
                f"  return c;\n"
                f"}}"
            ),
        )
        state.assign(u, "wmma", f"{helper}({a}, {b}, {c})")


__all__ = ["CUDA_DIALECT", "MMA_M16N8K16_F16_F32", "CUDARenderer"]
