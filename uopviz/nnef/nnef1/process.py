"""The ``nnef`` package's parser, run in a child process.

The Khronos ``nnef`` package parses NNEF 1.0 text in a C extension; some malformed inputs crash it
(``graph G( x ) -> ( y ) { x ( }`` kills the process) and its shape inference raises Python errors
other than ``nnef.Error`` (TypeError, ZeroDivisionError). Parsing in a short-lived child process
keeps a notebook alive through such a crash: :func:`parse_nnef1` returns the parsed graph or raises
:class:`NNEFError` for every failure, a crash and a hang included.

Everything the package does runs in the child: the parse with the quantisation file, the expansion
of fragments the graph file defines itself (``KHR_enable_fragment_definitions``: parsed again with
them in the parser's ``lowered`` list, down to standard operations) and shape inference with the
corrected shape functions (:func:`corrected_shape_functions`).

Run as a script (``python -P process.py``), this file is the child: it answers length-prefixed
pickled requests on stdin with pickled answers on stdout, importing nothing of uopviz (the graph's
nnef types do not pickle; :func:`encode` turns them into plain tuples that :func:`decode` rebuilds).
The child lives on between parses and is started again after it dies.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: How long one parse may take before it counts as hung.
PARSE_TIMEOUT_S = 60.0
#: Where the package's messages place an error: the text's name ('input' for the graph text,
#: 'quantization' for the quantisation text, else a file's path), line and column.
_POSITION = re.compile(r"error in '([^']*)' \[(\d+):(\d+)\]")


def encode(value: Any) -> Any:
    """``value`` (a parsed nnef graph or a part of it) as plain picklable tuples."""
    import nnef

    if isinstance(value, nnef.Identifier):
        return ("identifier", str(value))
    for kind, cls in (("graph", nnef.Graph), ("tensor", nnef.Tensor), ("operation", nnef.Operation)):
        if isinstance(value, cls):
            return (kind, [encode(item) for item in value])
    if isinstance(value, OrderedDict):
        return ("ordered", [(key, encode(item)) for key, item in value.items()])
    if isinstance(value, dict):
        return ("dict", [(key, encode(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [encode(item) for item in value])
    if isinstance(value, tuple):
        return ("tuple", [encode(item) for item in value])
    return ("value", value)


def decode(encoded: Any) -> Any:
    """The nnef objects :func:`encode` described."""
    import nnef

    kind, payload = encoded
    if kind == "identifier":
        return nnef.Identifier(payload)
    types = {"graph": nnef.Graph, "tensor": nnef.Tensor, "operation": nnef.Operation}
    if kind in types:
        return types[kind](*[decode(item) for item in payload])
    if kind in ("ordered", "dict"):
        pairs = [(key, decode(item)) for key, item in payload]
        return OrderedDict(pairs) if kind == "ordered" else dict(pairs)
    if kind == "list":
        return [decode(item) for item in payload]
    if kind == "tuple":
        return tuple(decode(item) for item in payload)
    return payload


class _Refused(Exception):
    """A graph the package parses but that cannot be given a meaning (its message is the answer)."""


def _answer(request: dict) -> tuple[str, Any]:
    """``("ok", encoded graph)`` or ``("error", message)`` for one request: ``text`` (or the file
    ``path``, with the ``graph.quant`` beside it) and ``quantization``, the text of a quantisation
    file."""
    import nnef

    try:
        graph = _expanded_graph(nnef, request)
        with corrected_shape_functions(nnef):
            nnef.infer_shapes(graph)
        return ("ok", encode(graph))
    except (nnef.Error, _Refused) as error:
        return ("error", str(error))
    except Exception as error:  # noqa: BLE001 - shape inference raises more than nnef.Error
        return ("error", f"the nnef package failed with {type(error).__name__}: {error}")


def _expanded_graph(nnef: Any, request: dict) -> Any:
    """The parsed graph with the fragments the file defines itself expanded into their bodies
    (the parser's ``lowered`` list); operator expressions in the graph body
    (``KHR_enable_operator_expressions``) are operations already."""
    graph = _parse_graph(nnef, request, [])
    custom = sorted({op.name for op in graph.operations} - nnef.StandardOperations)
    if not custom:
        return graph
    graph = _parse_graph(nnef, request, custom)
    bodiless = sorted({op.name for op in graph.operations} - nnef.StandardOperations)
    if bodiless:
        raise _Refused(
            f"the graph's own fragment(s) {', '.join(bodiless)} have no body, so nothing says what "
            "they compute (a body of standard operations is needed)"
        )
    return graph


def _parse_graph(nnef: Any, request: dict, lowered: list[str]) -> Any:
    path = request.get("path")
    if path is not None:  # the graph.quant beside the graph file is read with it
        quant = Path(path).with_name("graph.quant")
        return nnef.parse_file(path, str(quant) if quant.is_file() else None, lowered=lowered)
    return nnef.parse_string(request["text"], request.get("quantization"), lowered=lowered)


def _sample_shape(
    input: list,
    index: list,
    size: list,
    border: Any = None,
    padding: list = (),
    stride: list = (),
    dilation: list = (),
    **_: Any,
) -> list:
    """``sample``'s output shape: the shape of ``index``, which is the pooled shape of ``input``."""
    import nnef

    pooled = nnef.shapes.pool_shape(input, size, border, list(padding), list(stride), list(dilation))
    if index != pooled:
        raise AssertionError(f"'index' shape {index} should be the pooled shape {pooled} of 'input' {input}")
    return index


@contextlib.contextmanager
def corrected_shape_functions(nnef: Any) -> Iterator[None]:
    """The package's shape inference with ``sample`` corrected: it asks for an index of the
    input's shape, where the index comes from argmax_pool, of the pooled shape."""
    table = nnef.shapes._StandardShapeFuncs
    original = table["sample"]
    table["sample"] = _sample_shape
    try:
        yield
    finally:
        table["sample"] = original


def _child() -> None:
    """Answer length-prefixed pickled requests on stdin until it closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the caller, which kills us if needed
    while True:
        header = sys.stdin.buffer.read(8)
        if len(header) < 8:
            return
        request = pickle.loads(sys.stdin.buffer.read(int.from_bytes(header, "little")))
        answer = pickle.dumps(_answer(request))
        sys.stdout.buffer.write(len(answer).to_bytes(8, "little") + answer)
        sys.stdout.buffer.flush()


class _Parser:
    """The child process, started on first use and again after it dies; one request at a time."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def request(self, payload: dict, timeout_s: float) -> tuple[str, Any] | int | None:
        """The child's answer, its exit status when it died, or None when it ran out of time."""
        with self.lock:
            if self.process is None or self.process.poll() is not None:
                self.process = subprocess.Popen(
                    [sys.executable, "-P", __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE
                )
            process = self.process
            data = pickle.dumps(payload)
            try:
                process.stdin.write(len(data).to_bytes(8, "little") + data)
                process.stdin.flush()
                answer = self._read(process, timeout_s)
            except (BrokenPipeError, OSError, EOFError):
                answer = -1
            if not isinstance(answer, tuple):
                process.kill()
                status = process.wait()
                self.process = None
                return None if answer is None else status
            return answer

    @staticmethod
    def _read(process: subprocess.Popen, timeout_s: float) -> tuple[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        chunks, needed, header_read = bytearray(), 8, False
        stream = process.stdout
        while len(chunks) < needed:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([stream], [], [], remaining)[0]:
                return None
            chunk = os.read(stream.fileno(), max(needed - len(chunks), 1 << 16))
            if not chunk:
                raise EOFError
            chunks += chunk
            if not header_read and len(chunks) >= 8:
                needed, header_read = 8 + int.from_bytes(chunks[:8], "little"), True
        return pickle.loads(bytes(chunks[8:]))

    def close(self) -> None:
        """Stop the child process."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


_PARSER = _Parser()
atexit.register(_PARSER.close)


def parse_nnef1(
    text: str | None,
    path: str | None,
    file: str,
    timeout_s: float = PARSE_TIMEOUT_S,
    quantization: str | None = None,
    quantization_file: str = "<quantization>",
) -> Any:
    """Parse NNEF 1.0 ``text`` (with the text of its quantisation file, ``quantization``) or the file
    at ``path`` (with the ``graph.quant`` beside it) with the ``nnef`` package in the child process,
    expand the graph's own fragments and infer its shapes; every failure is an NNEFError naming
    ``file`` (or ``quantization_file``) and, where the package says, the line and column."""
    from uopviz.nnef.errors import NNEFError

    request = {"text": text, "path": path, "quantization": quantization}
    answer = _PARSER.request(request, timeout_s)
    if answer is None:
        raise NNEFError(f"NNEF 1.0: the nnef package's parser did not finish within {timeout_s:g} s", file)
    if not isinstance(answer, tuple):
        raise NNEFError(f"NNEF 1.0: the nnef package's parser crashed ({_how(answer)}) on this input; it "
                        f"runs in a child process, so only that process died", file)  # fmt: skip
    kind, payload = answer
    if kind == "ok":
        return decode(payload)
    position = _POSITION.search(payload)
    if position is None:
        raise NNEFError(f"NNEF 1.0: {payload}", file)
    where = {"input": file, "quantization": quantization_file}.get(position[1], position[1])
    raise NNEFError(f"NNEF 1.0: {payload}", where, int(position[2]), int(position[3]))


def _how(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


if __name__ == "__main__":
    _child()
