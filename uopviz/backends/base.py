"""The backend interface of ``docs/design/kernel-ir.md``: Backend, TensorCore, CompiledKernel.

What kernel-ir.md lists (the declaration the passes see), plus what running a compiled kernel
needs (``KernelParam``, ``Launch``, ``CompileError``, ``BackendUnavailable``).

A compiled kernel is called with host numpy arrays, one per PARAM slot, in slot order; it writes
its outputs into them.  ``prepare`` binds the arrays once (copying them to the device where the
backend has one) and returns a :class:`Launch` that runs the kernel again and again without
transfers: that is what the timing harness times.
"""

from __future__ import annotations

import abc
import json
import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Self

import numpy as np

from uopviz.backends.target import DEFAULT_L1_BYTES, DEFAULT_L2_BYTES, CPUTarget, cpu_target
from uopviz.core.dtype import DType, dtypes
from uopviz.core.errors import UopvizError
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher
from uopviz.core.uop import UOp
from uopviz.core.uop_text import register_arg_type

#: The ALU ops the compiled backends (C, LLVM, OpenCL, CUDA) render natively; Instruction
#: Selection decomposes the others (EXP2, LOG2, SIN, POW, THREEFRY) into these.
COMPILED_ALU_OPS = frozenset(
    {
        Ops.ADD,
        Ops.MUL,
        Ops.MAX,
        Ops.MOD,
        Ops.IDIV,
        Ops.CMP_LT,
        Ops.CMP_NE,
        Ops.XOR,
        Ops.OR,
        Ops.AND,
        Ops.SHR,
        Ops.SHL,
        Ops.WHERE,
        Ops.RECIP,
        Ops.TRUNC,
        Ops.CAST,
        Ops.NEG,
        Ops.SUB,
        Ops.DIV,
        Ops.CMP_GT,
        Ops.CMP_GE,
        Ops.CMP_LE,
        Ops.CMP_EQ,
        Ops.NOT,
        Ops.SQRT,
        Ops.MULACC,
    }
)


class BackendUnavailable(UopvizError, RuntimeError):
    """The backend cannot run here (no compiler, no device, a missing Python package)."""


class CompileError(UopvizError, RuntimeError):
    """The backend's compiler rejected a source; the message quotes the compiler's diagnostics."""

    def __init__(self, backend: str, name: str, message: str, source: str = ""):
        super().__init__(f"{backend} backend could not compile kernel {name!r}:\n{message}")
        self.backend, self.kernel_name, self.diagnostics, self.source = backend, name, message, source

    def __reduce__(self):  # travels between processes (worker, compile pool) as itself
        return (CompileError, (self.backend, self.kernel_name, self.diagnostics, self.source))


class RenderError(UopvizError, ValueError):
    """A linear program the renderer cannot express: names the uop, its position and why."""


# ---------------------------------------------------------------------------------------------
# tensor cores


Operand = str  # "a", "b" or "c"


@register_arg_type  # a WMMA's arg: its graph prints as text that reads back
@dataclass(frozen=True)
class TensorCore:
    """One multiply-accumulate tile a backend offers: ``D[M,N] = A[M,K] @ B[K,N] + C[M,N]``.

    ``threads`` lanes (a warp) share one tile; each holds ``elements(op)`` values of each operand
    in a vector.  ``layout_a[t * elements("a") + e]`` is the ``(m, k)`` coordinate that element
    ``e`` of lane ``t`` holds; ``layout_b`` gives ``(k, n)`` and ``layout_c`` gives ``(m, n)``
    (``c`` is both the accumulator and the result).  ``WMMA(a, b, acc)`` with this config as arg
    takes each lane's three vectors and returns its result vector.

    With ``threads == 1`` one thread holds whole tiles (row-major unless the layout says
    otherwise): that is how CPU backends emulate tensor cores, lowering WMMA to scalar code.
    """

    name: str
    dims: tuple[int, int, int]  # (M, N, K)
    dtype_in: DType
    dtype_out: DType
    threads: int
    layout_a: tuple[tuple[int, int], ...]
    layout_b: tuple[tuple[int, int], ...]
    layout_c: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        m, n, k = self.dims
        for operand, rows, cols in (("a", m, k), ("b", k, n), ("c", m, n)):
            layout = self.layout(operand)
            if sorted(layout) != [(r, c) for r in range(rows) for c in range(cols)]:
                raise ValueError(
                    f"tensor core {self.name}: layout of {operand} must hold every element of "
                    f"its {rows}x{cols} tile exactly once"
                )
            if len(layout) % self.threads:
                raise ValueError(
                    f"tensor core {self.name}: {len(layout)} elements of {operand} do not "
                    f"split over {self.threads} threads"
                )

    def layout(self, operand: Operand) -> tuple[tuple[int, int], ...]:
        """The (row, column) of every (lane, element), lane-major, of operand ``a``, ``b`` or ``c``."""
        try:
            return {"a": self.layout_a, "b": self.layout_b, "c": self.layout_c}[operand]
        except KeyError:
            raise ValueError(f"tensor core operands are 'a', 'b', 'c'; got {operand!r}") from None

    def elements(self, operand: Operand) -> int:
        """How many values of ``operand`` each lane holds (the lane count of its vector)."""
        return len(self.layout(operand)) // self.threads

    def coordinate(self, operand: Operand, lane: int, element: int) -> tuple[int, int]:
        """The tile coordinate held by ``element`` of ``lane`` for ``operand``."""
        return self.layout(operand)[lane * self.elements(operand) + element]

    @property
    def flops(self) -> int:
        """Floating-point operations of one tile (a multiply and an add per product)."""
        m, n, k = self.dims
        return 2 * m * n * k

    @staticmethod
    def row_major(name: str, dims: tuple[int, int, int], dtype_in: DType, dtype_out: DType) -> TensorCore:
        """A one-thread tile with every operand held row-major (the CPU emulation)."""
        m, n, k = dims

        def grid(rows: int, cols: int) -> tuple[tuple[int, int], ...]:
            return tuple((r, c) for r in range(rows) for c in range(cols))

        return TensorCore(name, dims, dtype_in, dtype_out, 1, grid(m, k), grid(k, n), grid(m, n))


def cpu_tensor_cores() -> tuple[TensorCore, ...]:
    """The tiles CPU backends emulate: float32 4x4x4 (and an 8x8x8 for wider registers)."""
    return (
        TensorCore.row_major("cpu_f32_4x4x4", (4, 4, 4), dtypes.float32, dtypes.float32),
        TensorCore.row_major("cpu_f32_8x8x8", (8, 8, 8), dtypes.float32, dtypes.float32),
    )


# ---------------------------------------------------------------------------------------------
# compiled kernels


@dataclass(frozen=True)
class KernelParam:
    """One kernel argument: PARAM ``slot`` pointing to ``size`` elements of ``dtype``."""

    slot: int
    dtype: DType
    size: int
    written: bool

    def check(self, kernel: str, array: Any) -> np.ndarray:
        """``array`` as the contiguous numpy array the kernel reads/writes, or a clear error."""
        if not isinstance(array, np.ndarray):
            raise TypeError(
                f"kernel {kernel}: argument {self.slot} must be a numpy array, got {type(array).__name__}"
            )
        expected = numpy_dtype(self.dtype)
        if array.dtype != expected:
            raise TypeError(
                f"kernel {kernel}: argument {self.slot} must have dtype {expected}, got {array.dtype}"
            )
        if array.size < self.size:
            raise ValueError(
                f"kernel {kernel}: argument {self.slot} needs {self.size} elements, got {array.size}"
            )
        if not array.flags.c_contiguous or (self.written and not array.flags.writeable):
            raise ValueError(
                f"kernel {kernel}: argument {self.slot} must be a C-contiguous"
                f"{' writeable' if self.written else ''} array"
            )
        return array


def numpy_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype that holds a buffer of ``dtype`` (bfloat16 lives in uint16)."""
    if dtype.scalar is dtypes.bfloat16:
        return np.dtype(np.uint16)
    if dtype.numpy_name is None:
        raise TypeError(f"{dtype.name} has no numpy storage")
    return np.dtype(dtype.numpy_name)


@dataclass(frozen=True)
class KernelMeta:
    """What a launch needs besides the code: name, params, and GPU launch sizes.

    Renderers write it into the source as one comment line (``uopviz-meta {...}``), so that
    ``Backend.compile(source, name)`` can launch a kernel from its source alone.
    """

    name: str
    params: tuple[KernelParam, ...]
    global_size: tuple[int, ...] = (1, 1, 1)
    local_size: tuple[int, ...] = (1, 1, 1)

    def to_comment_text(self) -> str:
        """The JSON text renderers put inside a comment."""
        body = {
            "name": self.name,
            "global": list(self.global_size),
            "local": list(self.local_size),
            "params": [[p.slot, p.dtype.name, p.size, p.written] for p in self.params],
        }
        return "uopviz-meta " + json.dumps(body, separators=(",", ":"))

    @staticmethod
    def from_source(source: str, backend: str = "") -> KernelMeta:
        """Read the meta comment back from a rendered source."""
        found = re.search(r"uopviz-meta (\{.*\})", source)
        if found is None:
            raise CompileError(
                backend,
                "?",
                "the source has no 'uopviz-meta {...}' comment line; render it "
                "with the backend's render() first",
            )
        body = json.loads(found.group(1))
        params = tuple(
            KernelParam(slot, dtypes.from_name(name), size, written)
            for slot, name, size, written in body["params"]
        )
        return KernelMeta(body["name"], params, tuple(body["global"]), tuple(body["local"]))


class Launch(abc.ABC):
    """A kernel bound to its arguments: ``run()`` executes it once and returns elapsed seconds."""

    @abc.abstractmethod
    def run(self) -> float:
        """Run once on the bound data, wait for it, and return the seconds it took."""

    def read_back(self) -> None:  # noqa: B027 - a no-op by default: CPU arrays are the kernel's memory
        """Copy the outputs back into the host arrays (a no-op where the arrays are the device data)."""


@dataclass
class CompiledKernel(abc.ABC):
    """A kernel ready to run: ``kernel(*arrays)`` runs it on host numpy arrays in PARAM slot order.

    A backend makes its own with :meth:`built`; a subclass adds what runs the kernel (the loaded
    library, module, program or JIT engine) as keyword-only dataclass fields.
    """

    backend: str
    meta: KernelMeta
    source: str
    compile_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def built(
        cls, backend: str, meta: KernelMeta, source: str, started: float, extra: dict[str, Any],
        **handles: Any,
    ) -> Self:  # fmt: skip
        """The kernel ``backend`` has just built and loaded from ``source``: ``compile_s`` is the time
        since ``started`` (a ``time.perf_counter()`` reading taken before the build), ``extra`` what
        the build says of itself (``cached``, ``target``, ``cannot_run``, compiler output...), and
        ``handles`` the subclass's fields."""
        return cls(backend, meta, source, time.perf_counter() - started, extra, **handles)

    @property
    def name(self) -> str:
        """The kernel's name (the LINEAR's arg)."""
        return self.meta.name

    @property
    def params(self) -> tuple[KernelParam, ...]:
        """The arguments, in slot order."""
        return self.meta.params

    def check_arguments(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        """The arrays after checking count, dtype, size and layout against the params (and that the
        host can run the kernel: code for a CPU target this host lacks raises BackendUnavailable)."""
        cannot_run = self.extra.get("cannot_run")
        if cannot_run:
            raise BackendUnavailable(f"kernel {self.name}: {cannot_run}")
        if len(arrays) != len(self.params):
            raise TypeError(
                f"kernel {self.name} takes {len(self.params)} arrays (slots "
                f"{[p.slot for p in self.params]}), got {len(arrays)}"
            )
        return [p.check(self.name, a) for p, a in zip(self.params, arrays)]

    def __call__(self, *arrays: np.ndarray) -> None:
        """Run once on host arrays; outputs are written into them."""
        launch = self.prepare(*arrays)
        launch.run()
        launch.read_back()

    @abc.abstractmethod
    def prepare(self, *arrays: np.ndarray) -> Launch:
        """Bind host arrays (device copies made here) for repeated runs."""


# ---------------------------------------------------------------------------------------------
# source maps


@dataclass(frozen=True)
class SourceMap:
    """Which instruction of a LINEAR program each line of its rendered source was written for.

    ``lines`` maps a 1-based line number of the source to the position of a uop in ``linear.src``
    (lines written for no uop, the signature, the prelude, closing braces of the function, are
    absent).  ``note`` says why a map is empty when the backend keeps none.
    """

    linear: UOp
    lines: dict[int, int]
    note: str = ""

    def uop(self, line: int) -> UOp | None:
        """The uop line ``line`` (1-based) was written for, or None."""
        position = self.lines.get(line)
        return None if position is None else self.linear.src[position]

    def lines_of(self, position: int) -> list[int]:
        """The source lines (1-based, in order) written for the uop at ``position``."""
        return sorted(line for line, owner in self.lines.items() if owner == position)


def locate_block(source_lines: Sequence[str], block: Sequence[str], start: int = 0) -> int:
    """The index of the first line at or after ``start`` where ``block`` appears whole in
    ``source_lines``; a RenderError when it is not there (a renderer whose map and text disagree)."""
    if not block:
        return start
    first = block[0]
    for index in range(start, len(source_lines) - len(block) + 1):
        if source_lines[index] == first and list(source_lines[index:index + len(block)]) == list(block):
            return index
    raise RenderError(f"source map: a block of {len(block)} lines starting {first!r} is not in the source")


def map_lines(
    source: str, linear: UOp, blocks: Sequence[tuple[Sequence[str], Sequence[int | None]]]
) -> SourceMap:
    """The :class:`SourceMap` of ``source`` from ``blocks``: each a list of emitted texts (one may hold
    several lines) with the position of the uop each was written for (None: no uop), in the order
    they appear in the source."""
    source_lines = source.split("\n")
    mapped: dict[int, int] = {}
    start = 0
    for texts, owners in blocks:
        flat, flat_owners = [], []
        for text, owner in zip(texts, owners, strict=True):
            for line in text.split("\n"):
                flat.append(line)
                flat_owners.append(owner)
        start = locate_block(source_lines, flat, start)
        for offset, owner in enumerate(flat_owners):
            if owner is not None:
                mapped[start + offset + 1] = owner
        start += len(flat)
    return SourceMap(linear, mapped)


# ---------------------------------------------------------------------------------------------
# the backend


def chunk_sizes(count: int, widths: Collection[int]) -> list[int]:
    """``count`` lanes as equal chunks of the widest width in ``widths`` that divides ``count``
    (a chunk of 1: a scalar lane).  Equal, not the fewest: the lanes of a reduction's unrolled
    steps come in runs of the output's lanes, and chunks of mixed widths (a row of 14: 8 + 4 + 2)
    straddle the runs of three steps (42 lanes: 16 + 16 + 8 + 2), which GCC compiled 5x slower
    than seven chunks of 2 (a depthwise conv, 576 channels 14x14: 236 vs 48 us)."""
    if count in widths:
        return [count]
    even = max((w for w in widths if 1 < w < count and count % w == 0), default=1)
    return [even] * (count // even)


class Backend(abc.ABC):
    """A code generator and runtime for one target (see kernel-ir.md, "Backends")."""

    name: str = ""
    supported_ops: frozenset[Ops] = frozenset()
    vector_widths: tuple[int, ...] = ()
    has_local: bool = False
    has_threads: bool = False
    tensor_cores: tuple[TensorCore, ...] = ()
    #: the vector registers the heuristics plan register tiles for: bytes of one, and how many
    register_bytes: int = 16
    vector_registers: int = 16
    #: bytes of one core's L2 cache on CPU targets (the heuristic's loop order)
    l2_bytes: int = DEFAULT_L2_BYTES
    #: bytes of one core's L1 data cache on CPU targets (the heuristic's register tiles)
    l1_bytes: int = DEFAULT_L1_BYTES
    #: the widest vector the renderer's compiler handles well, in bytes (0: any of ``vector_widths``);
    #: Instruction Selection splits wider vector ops into chunks of this size
    vector_bytes: int = 0
    #: dtypes whose values the backend never holds in vectors (Instruction Selection splits them)
    scalar_dtypes: frozenset[DType] = frozenset()
    #: True when a vector store whose lanes scatter (a register tile of channels stored to rows of
    #: positions) is split by address runs, whose values the renderer transposes in registers
    #: (``uopviz.passes.isel``, :func:`uopviz.backends.linear_program.transpose_plan`): C and LLVM
    transposes_stores: bool = False
    #: how many threads a THREAD axis is split for (GPU backends use workgroups instead)
    thread_count: int = 1
    #: True when :meth:`compile_alongside` may run in several threads at once (each build a process
    #: of its own), so the Render stage compiles a program's distinct kernels in parallel
    parallel_compile: bool = False
    #: How many of a program's sources one build may take at once (:meth:`compile_together`): a C
    #: compiler's process start and link cost as much as a small kernel's compile
    sources_per_build: int = 1
    #: True when one compiled kernel may serve kernels that differ only in an extent, each launch
    #: reading its extents from one more int64 array (``uopviz.passes.extent_sharing``): CPU
    #: backends, whose launch sizes do not come from the kernel's ranges
    shares_extents: bool = False
    #: True when a contiguous vector LOAD gated lane by lane is read as one vector (not lane by
    #: lane): the Optimize stage then gates the loads of padded vector lanes instead of clamping
    #: each lane (``uopviz.passes.optops.axes.settle_pad_clamps``)
    loads_gated_vectors_whole: bool = False
    #: True when a gated LOAD of every other element (a stride-2 pool's or conv's row) is read as
    #: two whole vectors, a shuffle and a select where it lies inside the buffer: the Optimize stage
    #: then gates such loads of padded vector lanes too instead of clamping each lane
    loads_gated_strided_vectors_whole: bool = False
    #: True when the renderer writes a register tile's step as one assembly block whose registers it
    #: plans (:mod:`uopviz.backends.register_tile`): the heuristic's tiles of broadcast columns then
    #: take all but two vector registers as accumulators (GCC and LLVM spill such tiles themselves)
    writes_register_tiles: bool = False
    #: rules of the backend's own, by the name of the pipeline stage that runs them (``"Linearize"``,
    #: ``"Instruction Selection"``, any stage from Optimize on): the stage rewrites each kernel with
    #: them before its own rules, as a traced pass named after the backend (``cuda rules``); a
    #: rule's ``ctx`` is the kernel's schedule item (``ctx.body``: the kernel as the stage got it)
    extra_rules: Mapping[str, PatternMatcher] = MappingProxyType({})

    @property
    def runs_on_cpu(self) -> bool:
        """True when kernels run on CPU cores: the heuristics plan register tiles and staged strips,
        not workgroups (an OpenCL CPU device such as pocl has workgroups but is a CPU)."""
        return not self.has_local

    def available(self) -> bool:
        """True when this machine can compile and run this backend's kernels."""
        return self.unavailable_reason() is None

    def unavailable_reason(self) -> str | None:
        """Why the backend cannot run here, or None when it can."""
        return None

    @property
    def device(self) -> str:
        """A name of the device kernels run on (cache and tuning keys include it)."""
        return self.name

    def supports_dtype(self, dtype: DType) -> bool:
        """True when kernels may compute with ``dtype`` here.  float16 and float64 depend on the
        device on some targets: a renderer says so with ``has_fp16`` / ``has_fp64`` (backends with
        other limits override this)."""
        renderer = getattr(self, "renderer", None)
        if dtype.scalar is dtypes.float16:
            return bool(getattr(renderer, "has_fp16", True))
        if dtype.scalar is dtypes.float64:
            return bool(getattr(renderer, "has_fp64", True))
        return True

    @abc.abstractmethod
    def render(self, linear: UOp) -> str:
        """The source code of a LINEAR program."""

    def render_mapped(self, linear: UOp) -> tuple[str, SourceMap]:
        """The source of a LINEAR program (the same text as :meth:`render`) and its
        :class:`SourceMap`.  Backends whose renderers keep track of the lines they write override
        this; for others the map is empty and says so."""
        return self.render(linear), SourceMap(linear, {}, f"backend {self.name!r} keeps no source map")

    @abc.abstractmethod
    def compile(self, source: str, name: str) -> CompiledKernel:
        """Compile a rendered source (cached by source hash)."""

    def compile_alongside(self, source: str, name: str) -> CompiledKernel:
        """:meth:`compile`, called by one of the threads that build a program's kernels side by side
        (``parallel_compile``): a backend whose compiler holds a lock for the whole process (LLVM's)
        makes the machine code in a process of its own here."""
        return self.compile(source, name)

    def compile_together(self, builds: Sequence[tuple[str, str]]) -> list[CompiledKernel]:
        """:meth:`compile_alongside` of each ``(source, name)``, in order; a backend whose builds
        take several sources at once (``sources_per_build``) builds them in one go."""
        return [self.compile_alongside(source, name) for source, name in builds]

    def require(self) -> None:
        """Raise BackendUnavailable with the reason when the backend cannot run here."""
        reason = self.unavailable_reason()
        if reason is not None:
            raise BackendUnavailable(f"backend {self.name!r} is not available: {reason}")


class TargetsCPU:
    """For backends whose kernels run on the host's cores (C, LLVM; OpenCL on a CPU device): the CPU
    target profile (:func:`uopviz.backends.target.cpu_target`) decides the registers the heuristics
    plan for, the threads, the code the compiler generates and the keys its caches use."""

    @property
    def target(self) -> CPUTarget:
        """The CPU target code is generated for now."""
        return cpu_target()

    @property
    def register_bytes(self) -> int:
        """Bytes of one of the target's SIMD registers."""
        return self.target.vector_bytes

    @property
    def vector_registers(self) -> int:
        """How many SIMD registers the target has."""
        return self.target.vector_registers

    @property
    def thread_count(self) -> int:
        """How many threads THREAD axes are split for: the target's cores."""
        return self.target.cores

    @property
    def l2_bytes(self) -> int:
        """Bytes of one core's L2 cache on the target (the heuristic's loop order)."""
        return self.target.l2_bytes

    @property
    def l1_bytes(self) -> int:
        """Bytes of one core's L1 data cache on the target (the heuristic's register tiles)."""
        return self.target.l1_bytes

    @property
    def device(self) -> str:
        """The host CPU and the target profile's key (BEAM and tuning records are kept per device)."""
        return f"CPU:{self.target.host_model} {self.target.device_tag}"
