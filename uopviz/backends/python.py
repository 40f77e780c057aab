"""The Python backend: the reference interpreter of linear programs.

``render`` turns a LINEAR program into straight-line Python over numpy, one line per uop (so a
line of the source maps back to a uop), and ``compile`` executes that source.  Every ALU op goes
through :func:`uopviz.core.alu.exec_alu_array`, the one definition of the dialect's semantics, so
this backend is the reference the compiled backends are checked against.

Speed comes from *lifting* loops: a RANGE whose iterations are independent becomes a numpy axis
(``arange`` along its own dimension) instead of a Python ``for``; every value is an array that
broadcasts over the lifted loops it depends on, with vector lanes on a trailing axis.  A loop
whose iterations carry state (an accumulator read before it is written in the loop body: a
reduction) runs as a Python ``for`` inside the lifted ones, unless its only state is accumulators
each updated as ``acc = op(acc, value)`` with an associative ``op`` (ADD, MUL, MAX, the bitwise
ones) and values independent of the accumulators (:func:`foldable_loops`): such a loop runs
*vectorised*, its values computed for a chunk of iterations along a leading numpy axis and folded
into the accumulator with ``ufunc.accumulate``, which applies the op in loop order, so the result
is bit for bit the loop's (``ufunc.reduce`` would add floats pairwise).  THREAD, GLOBAL and LOOP
ranges are lifted, which runs them "sequentially" in the sense that no two threads ever run at once.

Registers (REG buffers) get one copy per iteration of the lifted loops (a trailing axis of the
buffer's size); a LOCAL buffer one copy per workgroup, shared by its threads (the lifted ``lidx``
loops), and a BARRIER holds by construction since every thread runs each instruction together.
IF blocks become masks applied to the stores (and loads) inside them.
Out-of-bounds accesses raise instead of reading a wrong element: this backend exists to catch
pipeline bugs, and numpy would silently wrap a negative index.

Three modules: this one renders (:class:`PythonWalk`, a :class:`~uopviz.backends.linear_walk.LinearWalk`)
and compiles; :mod:`uopviz.backends.python_loops` decides which loops are lifted, carried or folded;
:mod:`uopviz.backends.python_runtime` is what the generated code calls.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.backends.base import (
    Backend,
    CompiledKernel,
    CompileError,
    KernelMeta,
    Launch,
    RenderError,
    SourceMap,
    TensorCore,
    cpu_tensor_cores,
)
from uopviz.backends.linear_program import underlying_buffer
from uopviz.backends.linear_walk import LinearWalk, Scope
from uopviz.backends.python_loops import carried_ranges, foldable_loops, is_register, is_shared
from uopviz.backends.python_runtime import RUNTIME, KernelFault
from uopviz.core.dtype import AddrSpace
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.uop import UOp

#: how many elements (iterations times accumulator elements) one chunk of a vectorised loop folds
FOLD_CHUNK_ELEMENTS = 1 << 18

#: whether the renderer runs foldable reduction loops vectorised (off: every carried loop is a Python
#: ``for``, the plain reading of the program, which the tests compare the vectorised one against)
VECTORISE_REDUCTIONS = True



class PythonWalk(LinearWalk):
    """One rendering of a LINEAR program to Python: names, indentation, the lifted loops' dimensions
    and the masks of the open IFs (see the module docstring)."""

    dialect = "python"
    #: the reference interpreter runs every uop the program holds, live or not
    only_live_uops = False
    #: a constant's line in the header goes to the uop whose rendering first used it
    mapped_lists = (("header", ""), ("lines", ""))

    def __init__(self, linear: UOp):
        super().__init__(linear)
        self.lines: list[str] = []
        self.header: list[str] = []
        self.indent = 1
        self.masks: list[str] = []
        self.counter = 0
        program = list(linear.src)
        self.carried = carried_ranges(program)
        lifted = [u for u in dict.fromkeys(program)
                  if u.op in (Ops.RANGE, Ops.SPECIAL) and u not in self.carried]
        for u in lifted:
            if u.src[0].op is not Ops.CONST:
                raise RenderError(f"python: the bound of lifted {u.op.name} {u.arg} must be a constant")
        self.position_of = {u: i for i, u in enumerate(lifted)}
        self.lifted_shape = tuple(int(u.src[0].arg[0]) for u in lifted)
        self.local_dims = tuple(self.position_of[u] for u in lifted
                                if u.op is Ops.SPECIAL and u.arg.startswith("lidx"))
        warps = [u for u in lifted if (u.op is Ops.RANGE and u.arg[1] is AxisType.WARP)
                 or (u.op is Ops.SPECIAL and u.arg == "lidx0")]
        #: the lifted dimension whose iterations are the lanes of warps
        self.warp_dim = self.position_of[warps[0]] if warps else None
        foldable = foldable_loops(program, self.carried) if VECTORISE_REDUCTIONS else {}
        #: fold ALU -> (its loop, accumulator)
        self.folds = {update: (loop, accumulator) for loop, updates in foldable.items()
                      for update, accumulator in updates.items()}
        #: vectorised loop -> iterations per chunk: at most FOLD_CHUNK_ELEMENTS accumulator steps
        self.fold_chunks: dict[UOp, int] = {}
        for loop, updates in foldable.items():
            lanes = max(update.dtype.count for update in updates)
            self.fold_chunks[loop] = max(1, FOLD_CHUNK_ELEMENTS // (math.prod(self.lifted_shape) * lanes))

    def run(self) -> str:
        """The whole source: the constants, then ``kernel(data0, ...)``."""
        params = self.collect_params()
        self.walk(params)
        meta = KernelMeta(str(self.linear.arg), tuple(p for p, _ in params))
        signature = ", ".join(name for _, name in params)
        body = self.lines or ["    pass"]
        lifted = list(self.lifted_shape)
        title = f"# kernel {self.linear.arg}: {len(self.program)} uops, lifted loops {lifted}"
        header = [f"# {meta.to_comment_text()}", title, *self.header]
        return "\n".join([*header, f"def kernel({signature}):", *body, ""])

    # -- names ----------------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def ref(self, u: UOp) -> str:
        if u.op is Ops.AFTER:
            return self.ref(u.src[0])
        name = self.names.get(u)
        if name is None:
            if u.op is Ops.CONST:
                return self.constant(u)
            raise RenderError(f"python: {u.op.name} is used before it is computed in kernel "
                              f"{self.linear.arg!r}")
        return name

    def constant(self, u: UOp) -> str:
        """The name of a constant, defined in the header the first time it is used."""
        name = self.names.get(u)
        if name is None:
            name = f"c{len(self.header)}"
            value = u.arg[0]
            literal = repr(float(value)) if isinstance(value, float) else repr(value)
            if isinstance(value, float) and not math.isfinite(value):
                literal = f"float({str(value)!r})"
            self.header.append(f"{name} = make_const({literal}, {u.dtype.scalar.name!r})")
            self.names[u] = name
        return name

    def mask(self) -> str | None:
        """The mask of the innermost open IF (None outside every IF)."""
        return self.masks[-1] if self.masks else None

    def where(self) -> str:
        """The uop being rendered, as a runtime error names it."""
        return f"{self.linear.arg}@{self.position}"

    def assign(self, u: UOp, expression: str) -> None:
        """``v<n> = expression``: the value of ``u``."""
        name = self.fresh("v")
        self.names[u] = name
        self.emit(f"{name} = {expression}")

    # -- per op (the methods linear_walk.RENDER_METHODS names) ----------------------------------
    def render_const(self, u: UOp) -> None:
        self.constant(u)

    def render_barrier(self, u: UOp) -> None:
        return None  # the lifted threads run each instruction together: a barrier holds already

    render_stack = LinearWalk.render_nothing

    def render_buffer(self, u: UOp) -> None:
        if u.arg.addrspace is AddrSpace.GLOBAL:
            raise self.fail(u, "a GLOBAL BUFFER inside a kernel must be a PARAM")
        dtype_name = u.arg.dtype.scalar.name
        if u.arg.addrspace is AddrSpace.LOCAL:
            name = self.fresh("shared")
            shape = f"{self.lifted_shape!r}, {self.local_dims!r}"
            self.emit(f"{name} = new_shared({u.arg.size}, {dtype_name!r}, {shape})")
        else:
            name = self.fresh("reg")
            self.emit(f"{name} = new_register({u.arg.size}, {dtype_name!r}, {self.lifted_shape!r})")
        self.names[u] = name

    def render_special(self, u: UOp) -> None:
        self.render_loop(u)

    def render_range(self, u: UOp, scope: Scope) -> None:
        self.render_loop(u)

    def render_loop(self, u: UOp) -> None:
        """A RANGE or SPECIAL: a lifted numpy axis, a vectorised fold in chunks, or a Python ``for``."""
        name = self.fresh("r" if u.op is Ops.RANGE else "s")
        self.names[u] = name
        bound = self.ref(u.src[0])
        if u in self.fold_chunks:
            self.emit(f"# loop {name} runs vectorised: each iteration only folds a value into an")
            chunk = self.fold_chunks[u]
            self.emit(f"# accumulator, so fold() folds {chunk} iterations at a time, in order")
            self.emit(f"for {name} in folded_chunks(int({bound}), {chunk}, {len(self.lifted_shape)}):")
            self.indent += 1
        elif u in self.carried:
            self.emit(f"for {name} in range(int({bound})):")
            self.indent += 1
            self.emit(f"{name} = np.int64({name})")
        else:
            self.emit(f"{name} = lifted_range(int({bound}), {self.position_of[u]}, {len(self.lifted_shape)})")

    def render_end(self, u: UOp, scope: Scope) -> None:
        if scope.opener in self.carried:
            self.indent -= 1

    def render_if(self, u: UOp, scope: Scope) -> None:
        name = self.fresh("mask")
        gate = self.ref(u.src[0])
        outer = self.mask()
        self.emit(f"{name} = {gate}" if outer is None else f"{name} = np.logical_and({outer}, {gate})")
        self.masks.append(name)
        self.names[u] = name

    def render_endif(self, u: UOp, scope: Scope) -> None:
        self.masks.pop()

    def render_index(self, u: UOp) -> None:
        return None  # rendered into the LOAD/STORE that uses it

    def render_vectorize(self, u: UOp) -> None:
        self.assign(u, f"vectorize({', '.join(self.ref(s) for s in u.src)})")

    def render_gep(self, u: UOp) -> None:
        self.assign(u, f"gep({self.ref(u.src[0])}, {tuple(u.arg)!r}, {u.src[0].dtype.count})")

    def render_cast(self, u: UOp) -> None:
        self.assign(u, f"cast({self.ref(u.src[0])}, {u.src[0].dtype.scalar.name!r}, {u.dtype.scalar.name!r})")

    def render_bitcast(self, u: UOp) -> None:
        source, target = u.src[0].dtype.scalar.name, u.dtype.scalar.name
        self.assign(u, f"bitcast({self.ref(u.src[0])}, {source!r}, {target!r})")

    def render_wmma(self, u: UOp) -> None:
        config = u.arg
        if not isinstance(config, TensorCore):
            raise self.fail(u, "WMMA's arg must be a TensorCore config")
        warp = ""
        if config.threads > 1:
            if self.warp_dim is None or self.lifted_shape[self.warp_dim] % config.threads:
                raise self.fail(u, f"WMMA of {config.name} needs a warp of {config.threads} lanes: a "
                                   f"WARP range or lidx0 whose size is a multiple of it")
            warp = f", {config.threads}, {self.warp_dim}, {self.lifted_shape!r}"
        a, b, c = (self.ref(s) for s in u.src)
        self.assign(u, f"wmma({a}, {b}, {c}, {config.dims!r}, {config.layout_a!r}, {config.layout_b!r}, "
                       f"{config.layout_c!r}, {config.dtype_in.name!r}, {config.dtype_out.name!r}{warp})")

    def render_alu(self, u: UOp) -> None:
        if u in self.folds:
            loop, accumulator = self.folds[u]
            value = next(s for s in u.src if s is not accumulator)
            operands = f"{self.ref(accumulator)}, {self.ref(value)}, {self.ref(loop)}"
            self.assign(u, f"fold(Ops.{u.op.name}, {u.dtype.scalar.name!r}, {operands})")
            return
        operands = ", ".join(self.ref(s) for s in u.src)
        self.assign(u, f"alu(Ops.{u.op.name}, {u.dtype.scalar.name!r}, {operands})")

    def gate_with_mask(self, gate: str | None) -> str | None:
        """A LOAD's or STORE's gate combined with the innermost IF's mask (None: neither)."""
        mask = self.mask()
        if mask is None or gate is None:
            return gate if mask is None else mask
        combined = self.fresh("g")
        self.emit(f"{combined} = np.logical_and({mask}, {gate})")
        return combined

    def render_load(self, u: UOp) -> None:
        index = u.src[0]
        if index.op is not Ops.INDEX:
            raise self.fail(u, f"LOAD reads an INDEX, got {index.op.name}")
        buffer, address = index.src[0], self.ref(index.src[1])
        gate = self.ref(u.src[2]) if len(u.src) > 2 else None
        alt = self.ref(u.src[1]) if len(u.src) > 1 else None
        if self.mask() is not None and gate is None:  # a load inside an IF must not fault where it is false
            alt = self.constant(UOp.const(u.dtype.scalar, 0))
        gate = self.gate_with_mask(gate)
        gated = "" if gate is None else f", {alt}, {gate}"
        where = self.where()
        if is_register(buffer):
            register = self.ref(underlying_buffer(buffer))
            helper = "load_shared" if is_shared(buffer) else "load_register"
            expression = f"{helper}({where!r}, {register}, {address}, {u.dtype.count}{gated})"
        else:
            base = underlying_buffer(buffer)
            if base.op is not Ops.PARAM:
                raise self.fail(u, f"LOAD from a {base.op.name}; kernels read PARAMs and REG buffers")
            dtype_name = base.arg.dtype.scalar.name
            expression = f"load_global({where!r}, {self.ref(base)}, {dtype_name!r}, {address}{gated})"
        self.assign(u, expression)

    def render_store(self, u: UOp) -> None:
        index = u.src[0]
        if index.op is not Ops.INDEX:
            raise self.fail(u, f"STORE writes an INDEX, got {index.op.name}")
        buffer, address, value = index.src[0], self.ref(index.src[1]), self.ref(u.src[1])
        gate = self.gate_with_mask(self.ref(u.src[2]) if len(u.src) > 2 else None)
        gated = "" if gate is None else f", {gate}"
        where = self.where()
        if is_register(buffer):
            helper = "store_shared" if is_shared(buffer) else "store_register"
            self.emit(f"{helper}({where!r}, {self.ref(underlying_buffer(buffer))}, {address}, {value}, "
                      f"{u.src[1].dtype.count}{gated})")
            return
        base = underlying_buffer(buffer)
        if base.op is not Ops.PARAM:
            raise self.fail(u, f"STORE into a {base.op.name}; kernels write PARAMs and REG buffers")
        dtype_name = base.arg.dtype.scalar.name
        self.emit(f"store_global({where!r}, {self.ref(base)}, {dtype_name!r}, {address}, {value}{gated})")


def render_python(linear: UOp, lifted_sizes: dict[UOp, int] | None = None) -> str:
    """The Python source of a LINEAR program (see the module docstring for how it runs)."""
    return render_python_mapped(linear)[0]


def render_python_mapped(linear: UOp) -> tuple[str, SourceMap]:
    """The Python source of a LINEAR program and which uop each of its lines was written for (a
    constant's line in the header goes to the uop whose rendering first used it)."""
    walk = PythonWalk(linear)
    source = walk.run()
    return source, walk.source_map(source)


# ---------------------------------------------------------------------------------------------
# compiling and running


class PythonLaunch(Launch):
    """The generated function bound to host arrays."""

    def __init__(self, function: Any, arrays: Sequence[np.ndarray]):
        self.function, self.arrays = function, list(arrays)

    def run(self) -> float:
        start = time.perf_counter()
        with np.errstate(all="ignore"):
            self.function(*self.arrays)
        return time.perf_counter() - start


@dataclass(kw_only=True)
class PythonCompiledKernel(CompiledKernel):
    """A kernel as a Python function over numpy arrays."""

    function: Any = field(repr=False)

    def prepare(self, *arrays: np.ndarray) -> Launch:
        return PythonLaunch(self.function, self.check_arguments(arrays))


class PythonBackend(Backend):
    """The reference interpreter: every op native, vectors native, THREAD axes lifted (never parallel),
    the CPU tensor cores emulated."""

    name = "python"
    # EXP and LOG are written out by Instruction Selection here too: every backend computes them
    # with the same UOps, so the reference interpreter gives the compiled backends' values
    supported_ops = frozenset(GroupOp.ELEMENTWISE - {Ops.EXP, Ops.LOG})
    vector_widths = (2, 3, 4, 8, 16)
    has_local = False
    has_threads = True
    tensor_cores = cpu_tensor_cores()

    def __init__(self) -> None:
        self._compiled: dict[str, PythonCompiledKernel] = {}

    @property
    def device(self) -> str:
        return "python"

    def render(self, linear: UOp) -> str:
        if linear.op is not Ops.LINEAR:
            raise RenderError(f"python: render takes a LINEAR program, got {linear.op.name}")
        return render_python(linear)

    def render_mapped(self, linear: UOp) -> tuple[str, SourceMap]:
        if linear.op is not Ops.LINEAR:
            raise RenderError(f"python: render takes a LINEAR program, got {linear.op.name}")
        return render_python_mapped(linear)

    def compile(self, source: str, name: str) -> PythonCompiledKernel:
        cached = self._compiled.get(source)
        if cached is not None:
            return cached
        meta = KernelMeta.from_source(source, self.name)
        start = time.perf_counter()
        namespace = dict(RUNTIME)
        try:
            exec(compile(source, f"<uopviz kernel {name}>", "exec"), namespace)  # noqa: S102 - our own source
        except SyntaxError as error:
            raise CompileError(self.name, name, f"{error.msg} at line {error.lineno}", source) from error
        kernel = PythonCompiledKernel.built(self.name, meta, source, start, {}, function=namespace["kernel"])
        self._compiled[source] = kernel
        return kernel


__all__ = ["FOLD_CHUNK_ELEMENTS", "VECTORISE_REDUCTIONS", "KernelFault", "PythonBackend", "PythonWalk",
           "render_python", "render_python_mapped"]
