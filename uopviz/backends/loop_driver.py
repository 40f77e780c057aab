"""A loop of compiled CPU kernels driven from native code: test a condition, run a body, copy the
carried values back into the body's inputs, repeat — without returning to Python each iteration.

NNEF's ``while`` and counted loops (``uopviz.nnef.program.runtime``) run their condition and body as
bound programs of CPU kernels (C or LLVM: each kernel is a ``void f(void*, ...)`` in host memory).
Driven from Python, an iteration costs the interpreter's work around two program launches (tens
of microseconds); this driver calls the same kernel functions, through their addresses, from one
small C function, so an iteration costs the kernels and a few ``memmove``s.  It returns to Python
every ``CHUNK_STEPS`` iterations, so a loop that never ends can still be interrupted.

A bound graph's straight run of kernels goes through the same driver, once (:class:`NativeSequence`).

The driver is compiled once (cached like every C object, keyed by its source and the compiler)
with the C compiler the C backend uses; :func:`loop_driver` is None without one.
"""

from __future__ import annotations

import ctypes
import functools
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from uopviz.backends.cache import cached_file, content_key
from uopviz.backends.cpu_runtime import CPULaunch
from uopviz.backends.toolchain import compiler_version, find_c_compiler

#: kernels with more parameters than this run on the Python-driven path
MAX_PARAMETERS = 32
#: iterations between returns to Python (where KeyboardInterrupt is seen)
CHUNK_STEPS = 4096


def _driver_source() -> str:
    """The C source of the driver: one switch on the parameter count calls a kernel's address."""
    cases = []
    for count in range(MAX_PARAMETERS + 1):
        types = ", ".join(["void*"] * count) or "void"
        arguments = ", ".join(f"a[{i}]" for i in range(count))
        cases.append(f"    case {count}: ((void (*)({types}))f)({arguments}); break;")
    switch = "\n".join(cases)
    return f"""#include <stdint.h>
#include <string.h>

static void call(void* f, int64_t count, void** a) {{
  switch (count) {{
{switch}
  }}
}}

static void run_all(int64_t n, void** functions, const int64_t* counts, void*** arguments) {{
  for (int64_t i = 0; i < n; i++) call(functions[i], counts[i], arguments[i]);
}}

/* Iterations step .. stop-1: write the step into the step inputs, run the condition (when
   condition_count >= 0) and stop when its output byte is 0, run the body, copy the carried values.
   Returns the step reached; *tested_false is 1 when the condition ended the loop. */
int64_t uopviz_run_loop(int64_t step, int64_t stop, int64_t* tested_false,
                        int64_t condition_count, void** condition_functions,
                        const int64_t* condition_counts, void*** condition_arguments,
                        const uint8_t* test,
                        int64_t body_count, void** body_functions, const int64_t* body_counts,
                        void*** body_arguments,
                        int64_t copy_count, void** copy_targets, void** copy_sources,
                        const int64_t* copy_bytes, int64_t step_count, int32_t** step_inputs) {{
  *tested_false = 0;
  for (; step < stop; step++) {{
    for (int64_t i = 0; i < step_count; i++) *step_inputs[i] = (int32_t)step;
    if (condition_count >= 0) {{
      run_all(condition_count, condition_functions, condition_counts, condition_arguments);
      if (!*test) {{ *tested_false = 1; return step; }}
    }}
    run_all(body_count, body_functions, body_counts, body_arguments);
    for (int64_t i = 0; i < copy_count; i++) memmove(copy_targets[i], copy_sources[i], (size_t)copy_bytes[i]);
  }}
  return step;
}}
"""


@functools.cache
def loop_driver() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """The compiled driver function, or None where there is no working C compiler."""
    compiler = find_c_compiler()
    if compiler is None:
        return None
    source = _driver_source()
    flags = ["-O2", "-shared", "-fPIC"]

    def build(target) -> None:
        result = subprocess.run([compiler, *flags, "-x", "c", "-", "-o", str(target)], input=source,
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"the loop driver did not compile: {result.stderr.strip()}")

    try:
        path, _ = cached_file("c", content_key(source, compiler_version(compiler), flags), ".so", build)
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return None
    function = ctypes.CDLL(str(path)).uopviz_run_loop
    function.restype = ctypes.c_int64
    return function


def _pointer_array(values: Sequence[int]) -> ctypes.Array:
    return (ctypes.c_void_p * max(1, len(values)))(*values)


def _int64_array(values: Sequence[int]) -> ctypes.Array:
    return (ctypes.c_int64 * max(1, len(values)))(*values)


class _Launches:
    """Kernel launches as the driver takes them: addresses, parameter counts, argument arrays."""

    def __init__(self, launches: Sequence[CPULaunch]):
        self.launches = list(launches)  # kept alive: they hold the arrays the pointers point into
        self.count = len(launches)
        self.functions = _pointer_array(
            [ctypes.cast(launch.function, ctypes.c_void_p).value for launch in launches]
        )
        self.counts = _int64_array([len(launch.pointers) for launch in launches])
        self.argument_arrays = [_pointer_array([p.value for p in launch.pointers]) for launch in launches]
        pointer_to_pointers = ctypes.POINTER(ctypes.c_void_p)
        self.arguments = (pointer_to_pointers * max(1, self.count))(
            *(ctypes.cast(a, pointer_to_pointers) for a in self.argument_arrays)
        )


@dataclass
class Copy:
    """After each body run: ``source``'s first ``target.nbytes`` bytes into ``target``."""

    target: np.ndarray
    source: np.ndarray


class NativeLoop:
    """A loop's condition and body launches, bound once, run by the native driver."""

    def __init__(self, condition: Sequence[CPULaunch] | None, test: np.ndarray | None,
                 body: Sequence[CPULaunch], copies: Sequence[Copy], step_inputs: Sequence[np.ndarray]):
        self.function = loop_driver()
        if self.function is None:
            raise RuntimeError("no C compiler for the loop driver")
        self.condition = _Launches(condition or [])
        self.has_condition = condition is not None
        self.test = test  # kept alive: the driver reads it through its pointer
        self.body = _Launches(body)
        self.copies = list(copies)
        self.copy_targets = _pointer_array([c.target.ctypes.data for c in copies])
        self.copy_sources = _pointer_array([c.source.ctypes.data for c in copies])
        self.copy_bytes = _int64_array([c.target.nbytes for c in copies])
        self.step_inputs = list(step_inputs)
        self.step_pointers = _pointer_array([a.ctypes.data for a in step_inputs])

    @staticmethod
    def can_call(launches: Sequence[object]) -> bool:
        """Whether the driver can call every launch (host functions of few enough parameters)."""
        return all(isinstance(launch, CPULaunch) and len(launch.pointers) <= MAX_PARAMETERS
                   for launch in launches)

    def run(self, step: int, stop: int | None) -> tuple[int, bool]:
        """Iterations from ``step`` until ``stop`` (None: until the condition says no). Returns the
        step reached and whether the condition ended the loop."""
        tested_false = ctypes.c_int64(0)
        while True:
            chunk_end = step + CHUNK_STEPS if stop is None else min(stop, step + CHUNK_STEPS)
            step = self.call(step, chunk_end, tested_false)
            if tested_false.value or (stop is not None and step >= stop):
                return step, bool(tested_false.value)

    def call(self, step: int, stop: int, tested_false: ctypes.c_int64) -> int:
        """One call of the driver: iterations ``step`` .. ``stop - 1``; the step reached."""
        return self.function(
            ctypes.c_int64(step), ctypes.c_int64(stop), ctypes.byref(tested_false),
            ctypes.c_int64(self.condition.count if self.has_condition else -1),
            self.condition.functions, self.condition.counts, self.condition.arguments,
            ctypes.c_void_p(self.test.ctypes.data if self.test is not None else None),
            ctypes.c_int64(self.body.count), self.body.functions, self.body.counts, self.body.arguments,
            ctypes.c_int64(len(self.copies)), self.copy_targets, self.copy_sources, self.copy_bytes,
            ctypes.c_int64(len(self.step_inputs)), self.step_pointers,
        )


class NativeSequence:
    """Launches run once, in order, by the native driver: one call from Python for a whole bound
    graph instead of one per kernel (an LSTM of 29 small kernels: ~2 us of interpreter work each)."""

    def __init__(self, launches: Sequence[CPULaunch]):
        self.loop = NativeLoop(None, None, launches, [], [])
        self.tested_false = ctypes.c_int64(0)

    def run(self) -> None:
        """Run every launch once."""
        self.loop.call(0, 1, self.tested_false)
