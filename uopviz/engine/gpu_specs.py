"""The GPUs the GPU model (:mod:`uopviz.engine.gpu_model`) knows, as data: one :class:`GPU` per card.

Numbers are the vendors' datasheets and whitepapers (NVIDIA H100/H200/A100 datasheets, the Hopper,
Ampere and Ada architecture whitepapers, the CUDA C++ Programming Guide's table of compute-capability
limits); tensor-core rates are dense (no 2:4 sparsity) FP16 inputs with FP32 accumulation, the
instruction the CUDA backend emits (``mma.m16n8k16.f32.f16.f16.f32``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class GPU:
    """One GPU's limits and peak rates (what the model needs; every number positive)."""

    name: str
    sms: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int  # 32-bit registers
    shared_memory_per_sm: int  # bytes usable by blocks (the carve-out's maximum)
    shared_memory_per_block: int  # bytes, with the opt-in for dynamic shared memory
    l2_bytes: int
    dram_bytes_per_s: float
    fp32_flops_per_s: float  # CUDA cores, FMA counted as two
    fp16_tensor_flops_per_s: float  # dense, FP32 accumulate
    clock_hz: float  # boost clock
    warp_size: int = 32
    max_threads_per_block: int = 1024
    #: a static ``__shared__`` array (what the CUDA backend declares) may use at most 48 KiB per block;
    #: more needs dynamic shared memory and an opt-in (CUDA C++ Programming Guide)
    static_shared_memory_per_block: int = 48 * KIB
    #: shared memory the driver reserves for each resident block on sm_80 and newer
    reserved_shared_memory_per_block: int = 1 * KIB
    #: what one SM's L1/shared-memory pipe moves per clock (architecture whitepapers: 128 bytes)
    l1_bytes_per_clock_per_sm: int = 128

    @property
    def l1_bytes_per_s(self) -> float:
        """What all SMs' L1/shared-memory pipes move per second together."""
        return self.sms * self.l1_bytes_per_clock_per_sm * self.clock_hz

    @property
    def max_warps_per_sm(self) -> int:
        """Resident warps per SM at most."""
        return self.max_threads_per_sm // self.warp_size

    @property
    def ridge_flops_per_byte(self) -> float:
        """FP32 arithmetic intensity (FLOP per DRAM byte) above which a kernel is compute-bound."""
        return self.fp32_flops_per_s / self.dram_bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready numbers."""
        return asdict(self)


# vendor datasheet (NVIDIA H100 Tensor Core GPU datasheet, SXM5; Hopper whitepaper for per-SM limits)
H100 = GPU(
    name="H100 SXM", sms=132, max_threads_per_sm=2048, max_blocks_per_sm=32, registers_per_sm=65536,
    shared_memory_per_sm=228 * KIB, shared_memory_per_block=227 * KIB, l2_bytes=50 * MIB,
    dram_bytes_per_s=3.35e12, fp32_flops_per_s=67e12, fp16_tensor_flops_per_s=989.4e12, clock_hz=1.98e9,
)
# vendor datasheet (NVIDIA H200 Tensor Core GPU datasheet, SXM; the same GH100 SMs as H100 SXM)
H200 = GPU(
    name="H200 SXM", sms=132, max_threads_per_sm=2048, max_blocks_per_sm=32, registers_per_sm=65536,
    shared_memory_per_sm=228 * KIB, shared_memory_per_block=227 * KIB, l2_bytes=50 * MIB,
    dram_bytes_per_s=4.8e12, fp32_flops_per_s=67e12, fp16_tensor_flops_per_s=989.4e12, clock_hz=1.98e9,
)
# vendor datasheet (NVIDIA A100 Tensor Core GPU datasheet, SXM 80GB; Ampere whitepaper for per-SM limits)
A100 = GPU(
    name="A100 SXM 80GB", sms=108, max_threads_per_sm=2048, max_blocks_per_sm=32, registers_per_sm=65536,
    shared_memory_per_sm=164 * KIB, shared_memory_per_block=163 * KIB, l2_bytes=40 * MIB,
    dram_bytes_per_s=2.039e12, fp32_flops_per_s=19.5e12, fp16_tensor_flops_per_s=312e12, clock_hz=1.41e9,
)
# vendor datasheet (NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090; compute capability 8.9 limits)
RTX_4090 = GPU(
    name="RTX 4090", sms=128, max_threads_per_sm=1536, max_blocks_per_sm=24, registers_per_sm=65536,
    shared_memory_per_sm=100 * KIB, shared_memory_per_block=99 * KIB, l2_bytes=72 * MIB,
    dram_bytes_per_s=1.008e12, fp32_flops_per_s=82.6e12, fp16_tensor_flops_per_s=165.2e12, clock_hz=2.52e9,
)

#: the GPUs by the names ``gpu_account(..., gpu=...)`` accepts
GPUS: dict[str, GPU] = {"H100": H100, "H200": H200, "A100": A100, "RTX4090": RTX_4090}


def gpu_named(gpu: str | GPU) -> GPU:
    """A :class:`GPU` itself, or the one named (``"H100"``, ``"H200"``, ``"A100"``, ``"RTX4090"``;
    case and spaces ignored); an unknown name is a ValueError listing the known ones."""
    if isinstance(gpu, GPU):
        return gpu
    key = str(gpu).upper().replace(" ", "").replace("_", "")
    for name, spec in GPUS.items():
        if key in (name, spec.name.upper().replace(" ", "")):
            return spec
    raise ValueError(f"unknown GPU {gpu!r}: the GPU model knows {', '.join(GPUS)}")
