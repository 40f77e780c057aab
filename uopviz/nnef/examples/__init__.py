"""Example models shipped with uopviz, as SkriptND files next to this module.

- ``alexnet``: the AlexNet of §2.1 of the NNEF 2.0 draft, as printed there. Its ``conv7`` reads
  ``relu6`` where ``flat1`` is meant, a shape error that loading it reports; :func:`text` with
  ``fixed=True`` gives the corrected graph.

``uv.nnef.load(uv.nnef.examples.path("alexnet"))`` loads one; the tests, the NNEF benchmark and
notebook 04 read these same files.
"""

from __future__ import annotations

from pathlib import Path

from uopviz.nnef.errors import NNEFError

__all__ = ["EXAMPLES_DIR", "names", "path", "text"]

EXAMPLES_DIR = Path(__file__).resolve().parent

# The one correction an example needs to compose (the printed text keeps the spec's error).
_FIXES = {"alexnet": ("nn.linear(relu6,", "nn.linear(flat1,")}


def names() -> list[str]:
    """The names of the shipped examples."""
    return sorted(file.stem for file in EXAMPLES_DIR.glob("*.sknd"))


def path(name: str) -> Path:
    """The ``.sknd`` file of the example ``name``."""
    file = EXAMPLES_DIR / f"{name}.sknd"
    if not file.is_file():
        raise NNEFError(f"no example model named '{name}' (the examples are: {', '.join(names())})")
    return file


def text(name: str, fixed: bool = False) -> str:
    """The SkriptND text of the example ``name``; with ``fixed``, the spec's misprint corrected."""
    source = path(name).read_text()
    if fixed and name in _FIXES:
        wrong, right = _FIXES[name]
        if wrong not in source:
            raise NNEFError(f"example '{name}' no longer contains the misprint '{wrong}' to correct")
        source = source.replace(wrong, right)
    return source
