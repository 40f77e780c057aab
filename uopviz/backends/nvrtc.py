"""NVRTC: CUDA C++ compiled in this process (the CUDA toolkit's ``libnvrtc`` or the
``nvidia-cuda-nvrtc`` wheel's), as a JIT does it: no ``nvcc`` process per kernel and no GPU needed.

``find_nvrtc()`` looks in ``$UOPVIZ_NVRTC`` (a library path), the loader's search path,
``$CUDA_HOME``/``/usr/local/cuda`` and the ``nvidia/*/lib`` folders of installed wheels.
``nvrtc_compile(source, arch, output)`` gives the cubin (``sm_90``: machine code for that GPU) or the
PTX (``compute_90``) of a source; a compile error is a :class:`CompileError` with NVRTC's log.
The sources include ``cuda_fp16.h`` and ``cuda_bf16.h``: NVRTC is given the folder that holds them
(:func:`cuda_include_folder`: the toolkit's, or an ``nvidia/*/include`` of the wheels).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import sys
from pathlib import Path

from uopviz.backends.base import CompileError

#: what NVRTC is asked for besides the architecture (it optimizes by default, and keeps IEEE math)
NVRTC_OPTIONS = ("--std=c++17", "-default-device")


def _candidates() -> list[str]:
    """Library paths to try, most specific first."""
    found = []
    if os.environ.get("UOPVIZ_NVRTC"):
        found.append(os.environ["UOPVIZ_NVRTC"])
    name = ctypes.util.find_library("nvrtc")
    if name:
        found.append(name)
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            found += sorted(glob.glob(str(Path(home) / "lib64" / "libnvrtc.so*")), reverse=True)
    for entry in sys.path:  # the nvidia-cuda-nvrtc wheels: nvidia/cu13/lib, nvidia/cuda_nvrtc/lib
        found += sorted(glob.glob(str(Path(entry or ".") / "nvidia" / "*" / "lib" / "libnvrtc.so*")),
                        reverse=True)
    return [path for path in found if "builtins" not in path]


@functools.cache
def find_nvrtc() -> ctypes.CDLL | None:
    """The NVRTC library (loaded once), or None where there is none."""
    for path in _candidates():
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(library, "nvrtcCreateProgram"):
            library.nvrtcGetErrorString.restype = ctypes.c_char_p
            return library
    return None


@functools.cache
def cuda_include_folder() -> str | None:
    """The folder holding ``cuda_fp16.h`` (the toolkit's ``include``, or a wheel's), or None."""
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    folders = [str(Path(home) / "include") for home in homes if home]
    for entry in sys.path:
        folders += sorted(glob.glob(str(Path(entry or ".") / "nvidia" / "*" / "include")))
    return next((folder for folder in folders if (Path(folder) / "cuda_fp16.h").is_file()), None)


@functools.cache
def nvrtc_version() -> str:
    """``NVRTC major.minor`` of the library found ('' without one): part of the compile cache's key."""
    library = find_nvrtc()
    if library is None:
        return ""
    major, minor = ctypes.c_int(), ctypes.c_int()
    library.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"NVRTC {major.value}.{minor.value}"


def _check(library: ctypes.CDLL, status: int, what: str, name: str) -> None:
    if status != 0:
        reason = library.nvrtcGetErrorString(status).decode()
        raise CompileError("cuda", name, f"NVRTC {what} failed: {reason}")


def nvrtc_compile(source: str, arch: str = "sm_90", output: str = "cubin", name: str = "kernel") -> bytes:
    """``source`` compiled by NVRTC: the cubin for ``arch`` (``sm_90``) or, with ``output="ptx"``, the
    PTX for its virtual architecture.  Raises :class:`CompileError` (with NVRTC's log) when the source
    does not compile, ``RuntimeError`` when there is no NVRTC (see :func:`find_nvrtc`)."""
    if output not in ("cubin", "ptx"):
        raise ValueError(f"NVRTC output is 'cubin' or 'ptx', got {output!r}")
    library = find_nvrtc()
    if library is None:
        raise RuntimeError("no NVRTC library: install the CUDA toolkit or the nvidia-cuda-nvrtc wheel")
    program = ctypes.c_void_p()
    _check(library, library.nvrtcCreateProgram(ctypes.byref(program), source.encode(), f"{name}.cu".encode(),
                                               0, None, None), "nvrtcCreateProgram", name)
    try:
        target = arch if output == "cubin" else arch.replace("sm_", "compute_")
        include = cuda_include_folder()
        options = [f"--gpu-architecture={target}", *NVRTC_OPTIONS]
        if include is not None:
            options.append(f"--include-path={include}")
        array = (ctypes.c_char_p * len(options))(*(option.encode() for option in options))
        status = library.nvrtcCompileProgram(program, len(options), array)
        if status != 0:
            raise CompileError("cuda", name, f"NVRTC, for {arch}:\n{_log(library, program)}", source)
        size = ctypes.c_size_t()
        getter_size, getter = ((library.nvrtcGetCUBINSize, library.nvrtcGetCUBIN) if output == "cubin"
                               else (library.nvrtcGetPTXSize, library.nvrtcGetPTX))
        _check(library, getter_size(program, ctypes.byref(size)), f"getting the {output} size", name)
        buffer = ctypes.create_string_buffer(size.value)
        _check(library, getter(program, buffer), f"getting the {output}", name)
        data = buffer.raw
        return data.rstrip(b"\0") if output == "ptx" else data
    finally:
        library.nvrtcDestroyProgram(ctypes.byref(program))


def _log(library: ctypes.CDLL, program: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    library.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    buffer = ctypes.create_string_buffer(size.value)
    library.nvrtcGetProgramLog(program, buffer)
    return buffer.value.decode(errors="replace")


__all__ = ["NVRTC_OPTIONS", "cuda_include_folder", "find_nvrtc", "nvrtc_compile", "nvrtc_version"]
