"""The ``uopviz`` command line.

Subcommands:

* ``uopviz lab`` starts JupyterLab (no browser; on a headless machine it prints the URL, token
  included, to open) on the tour notebook ``notebooks/00_tour.ipynb``.
* ``uopviz report SOURCE -o out.html`` writes a standalone interactive HTML report.

Each subcommand is one ``add_<name>_parser(subparsers)`` function listed in ``SUBCOMMANDS``; it
builds its argparse sub-parser and sets ``func``, the handler that receives the parsed namespace
and returns the exit status. To add a subcommand, write such a function and append it there.

This module imports nothing from the rest of ``uopviz`` itself (only ``uopviz/__init__.py`` runs
first, as for any submodule), so ``uopviz lab`` starts quickly.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

#: The checkout this module lives in (only meaningful for an editable install).
REPO_ROOT = Path(__file__).resolve().parent.parent
#: The notebook ``uopviz lab`` opens, relative to the served root.
TOUR_NOTEBOOK = Path("notebooks") / "00_tour.ipynb"


# --------------------------------------------------------------------------------------------
# lab
# --------------------------------------------------------------------------------------------


def free_port(ip: str = "127.0.0.1") -> int:
    """Return a TCP port on ``ip`` that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((ip, 0))
        return int(s.getsockname()[1])


def default_root() -> Path:
    """The directory JupyterLab serves: the current directory if it has ``notebooks/``, else
    this checkout if it has, else the current directory."""
    cwd = Path.cwd()
    for candidate in (cwd, REPO_ROOT):
        if (candidate / "notebooks").is_dir():
            return candidate
    return cwd


def landing_path(root: Path) -> str:
    """The path (relative to ``root``, '/'-separated) to open first: the tour notebook if it
    exists, else the ``notebooks`` folder if it exists, else ``""`` (the root itself)."""
    if (root / TOUR_NOTEBOOK).is_file():
        return TOUR_NOTEBOOK.as_posix()
    if (root / "notebooks").is_dir():
        return "notebooks"
    return ""


def lab_url(ip: str, port: int, path: str, token: str) -> str:
    """The browser URL of ``path`` in a JupyterLab at ``ip:port`` that requires ``token``."""
    host = "127.0.0.1" if ip in ("", "0.0.0.0", "::") else ip
    if ":" in host:  # a bare IPv6 address needs brackets in a URL
        host = f"[{host}]"
    tree = f"/lab/tree/{path}" if path else "/lab"
    return f"http://{host}:{port}{tree}?token={token}"


def lab_command(root: Path, ip: str, port: int, token: str) -> list[str]:
    """The argv that starts JupyterLab with this interpreter (so kernels use the same env).

    The server opens no browser, refuses to move to another port (the printed URL stays right),
    fetches neither updates nor news (the machine may have no network), and is allowed to run as
    root, which a fresh container usually is.
    """
    cmd = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser",
        f"--ServerApp.ip={ip}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.news_url=None",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd


def wait_until_ready(ip: str, port: int, token: str, proc: subprocess.Popen[bytes] | None = None,
                     timeout_s: float = 120.0) -> bool:
    """Poll the server's ``/api/status`` until it answers 200 (True), the process exits or
    ``timeout_s`` passes (False)."""
    host = "127.0.0.1" if ip in ("", "0.0.0.0", "::") else ip
    if ":" in host:
        host = f"[{host}]"
    url = f"http://{host}:{port}/api/status"
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.25)
    return False


def banner(url: str, port: int) -> str:
    """The message that tells a person (on a machine with no screen) where to point a browser."""
    rule = "=" * 78
    return "\n".join([
        "", rule,
        "  uopviz lab is running (JupyterLab; no browser was opened). Open:",
        "",
        f"      {url}",
        "",
        f"  From another machine: ssh -L {port}:127.0.0.1:{port} <this host>, then the URL above.",
        "  Stop with Ctrl-C.",
        rule, "",
    ])


def cmd_lab(args: argparse.Namespace) -> int:
    """Run JupyterLab in the foreground until it exits or Ctrl-C; return its exit status."""
    root = Path(args.root).resolve() if args.root else default_root()
    port = args.port or free_port(args.ip if args.ip not in ("", "0.0.0.0", "::") else "127.0.0.1")
    token = args.token or secrets.token_hex(24)
    cmd = lab_command(root, args.ip, port, token)
    url = lab_url(args.ip, port, landing_path(root), token)
    if args.dry_run:
        print(" ".join(cmd))
        print(url)
        return 0

    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)  # the venv's bin/: terminals and kernels see it
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    print(f"uopviz lab: starting JupyterLab in {root} on {args.ip}:{port} ...", flush=True)
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL)
    # SIGTERM/SIGHUP (a closed terminal, `kill`) must not orphan the server: stop it like Ctrl-C.
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        if wait_until_ready(args.ip, port, token, proc, timeout_s=args.startup_timeout):
            time.sleep(1.0)  # let the server's start-up log settle so the banner is the last thing
            print(banner(url, port), flush=True)
        elif proc.poll() is None:
            print(f"uopviz lab: server did not answer within {args.startup_timeout:.0f}s; "
                  f"it may still come up at\n    {url}", file=sys.stderr, flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return _stop(proc)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_interrupt(signum: int, frame: object) -> None:
    """Signal handler that turns SIGTERM/SIGHUP into KeyboardInterrupt (a clean stop)."""
    raise KeyboardInterrupt


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """Shut the server down: SIGTERM (clean shutdown), then SIGKILL after 10 s.

    On Ctrl-C in a terminal the server got SIGINT too; with no stdin to confirm on, it keeps
    running until this SIGTERM.
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    print("uopviz lab: stopped.", flush=True)
    return 0


def add_lab_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``uopviz lab``."""
    p = subparsers.add_parser(
        "lab", help="open JupyterLab on the tour notebook",
        description="Start JupyterLab (no browser) on notebooks/00_tour.ipynb, or on the notebooks "
                    "folder when there is no tour, and print the URL with its token.")
    p.add_argument("--ip", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    p.add_argument("--root", default=None,
                   help="directory to serve (default: the one containing notebooks/)")
    p.add_argument("--token", default=None, help="access token (default: a random one)")
    p.add_argument("--startup-timeout", type=float, default=120.0,
                   help="seconds to wait for the server before printing a warning (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the JupyterLab command and the URL instead of starting it")
    p.set_defaults(func=cmd_lab)


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------


def cmd_report(args: argparse.Namespace) -> int:
    """Write a standalone HTML report (see ``uopviz.report``); imported here, on use, because it
    loads the compiler and the widgets."""
    from uopviz.report import cmd_report as run_report

    return run_report(args)


def _opts_argument(text: str) -> str | None:
    lowered = text.lower()
    if lowered not in ("none", "heuristic", "beam"):
        raise argparse.ArgumentTypeError(f"--opts is none, heuristic or beam, got {text!r}")
    return None if lowered == "none" else lowered


def add_report_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``uopviz report``."""
    p = subparsers.add_parser(
        "report", help="write a standalone interactive HTML report",
        description="Compile what SOURCE builds and write one HTML file (everything inline: opens from "
                    "disk with no server and no network) with the graph, the lowering pipeline player, "
                    "the kernels with their sources and timings, and the backends. SOURCE: a Python file "
                    "defining main() that returns tensors (or module-level tensors), or a model a "
                    "registered loader reads.")
    p.add_argument("source", metavar="SOURCE", help="a .py file that builds tensors, or a model")
    p.add_argument("-o", "--output", default="report.html",
                   help="the HTML file to write (default: %(default)s)")
    p.add_argument("--backend", action="append", default=[],
                   help="a backend to compile for and show (repeatable; default: every available one)")
    p.add_argument("--opts", type=_opts_argument, default="heuristic",
                   help="kernel opts: none, heuristic or beam (default: %(default)s)")
    p.add_argument("--no-timing", action="store_true", help="do not time the kernels")
    p.add_argument("--title", default=None, help="the page title (default: from SOURCE)")
    p.set_defaults(func=cmd_report)


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------

#: One function per subcommand; each adds its parser and sets ``func`` (see the module docstring).
SUBCOMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    add_lab_parser,
    add_report_parser,
]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand in ``SUBCOMMANDS`` registered."""
    parser = argparse.ArgumentParser(prog="uopviz", description="uopviz: a visual compiler explorer.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the chosen subcommand, return its status."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
