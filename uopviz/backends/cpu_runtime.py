"""Running a kernel compiled into a shared library on the host: the library's function loaded
through ctypes and called with one pointer per parameter (the C and LLVM backends)."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.backends.base import (
    CompiledKernel,
    Launch,
)


class CPULaunch(Launch):
    """A ctypes function bound to host arrays (the arrays are the kernel's memory)."""

    def __init__(self, function: Any, arrays: Sequence[np.ndarray]):
        self.function = function
        self.arrays = list(arrays)  # keep them alive while their pointers are used
        self.pointers = [ctypes.c_void_p(a.ctypes.data) for a in arrays]

    def run(self) -> float:
        start = time.perf_counter()
        self.function(*self.pointers)
        return time.perf_counter() - start


@dataclass(kw_only=True)
class CPUCompiledKernel(CompiledKernel):
    """A kernel in a shared library, called through ctypes with one pointer per param."""

    library_path: str
    function: Any = field(repr=False)

    def prepare(self, *arrays: np.ndarray) -> Launch:
        return CPULaunch(self.function, self.check_arguments(arrays))


def load_function(library_path: str, name: str, argument_count: int) -> Any:
    """The ``void name(void*, ...)`` function of a shared library."""
    library = ctypes.CDLL(library_path)
    function = getattr(library, name)
    function.argtypes = [ctypes.c_void_p] * argument_count
    function.restype = None
    return function


