"""The ``nnef`` package's parser, run in a child process.

The Khronos ``nnef`` package parses NNEF 1.0 text in a C extension; some malformed inputs crash it
(``graph G( x ) -> ( y ) { x ( }`` kills the process) and its shape inference raises Python errors
other than ``nnef.Error`` (TypeError, ZeroDivisionError). Parsing in a short-lived child process
keeps a notebook alive through such a crash: :func:`parse_nnef1` returns the parsed graph or raises
:class:`NNEFError` for every failure, a crash and a hang included.

Run as a script (``python -P nnef1_process.py``), this file is the child: it answers length-prefixed
pickled requests on stdin with pickled answers on stdout, importing nothing of uopviz (the graph's
nnef types do not pickle; :func:`encode` turns them into plain tuples that :func:`decode` rebuilds).
The child lives on between parses and is started again after it dies.
"""

from __future__ import annotations

import atexit
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
from typing import Any

#: How long one parse may take before it counts as hung.
PARSE_TIMEOUT_S = 60.0
_POSITION = re.compile(r"error in '[^']*' \[(\d+):(\d+)\]")


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


def _answer(request: dict) -> tuple[str, Any]:
    """``("ok", encoded graph)`` or ``("error", message)`` for one request."""
    import nnef

    try:
        if request["path"] is not None:
            graph = nnef.load_graph(request["path"], load_variables=False)
        else:
            graph = nnef.parse_string(request["text"])
        nnef.infer_shapes(graph)
        return ("ok", encode(graph))
    except nnef.Error as error:
        return ("error", str(error))
    except Exception as error:  # noqa: BLE001 - shape inference raises more than nnef.Error
        return ("error", f"the nnef package failed with {type(error).__name__}: {error}")


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


def parse_nnef1(text: str | None, path: str | None, file: str, timeout_s: float = PARSE_TIMEOUT_S) -> Any:
    """Parse NNEF 1.0 ``text`` or the file or folder at ``path`` with the ``nnef`` package in the child
    process, and infer its shapes; every failure is an NNEFError naming ``file``."""
    from uopviz.nnef.errors import NNEFError

    answer = _PARSER.request({"text": text, "path": path}, timeout_s)
    if answer is None:
        raise NNEFError(f"NNEF 1.0: the nnef package's parser did not finish within {timeout_s:g} s", file)
    if not isinstance(answer, tuple):
        raise NNEFError(f"NNEF 1.0: the nnef package's parser crashed ({_how(answer)}) on this input; it "
                        f"runs in a child process, so only that process died", file)  # fmt: skip
    kind, payload = answer
    if kind == "ok":
        return decode(payload)
    position = _POSITION.search(payload)
    line, column = (int(position[1]), int(position[2])) if position else (None, None)
    raise NNEFError(f"NNEF 1.0: {payload}", file, line, column)


def _how(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


if __name__ == "__main__":
    _child()
