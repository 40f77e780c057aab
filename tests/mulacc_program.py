"""A small program whose trace has a rule for every question of "why didn't a rule fire?": the
tour's matmul + bias + ReLU on C, whose instruction selection fuses four ADD(MUL) into MULACC and
leaves the bias add (of two loads) alone."""

from __future__ import annotations

import numpy as np

import uopviz as uv


def mulacc_program() -> uv.Program:
    """``relu(x @ w + b)`` (8×12 by 12×4) compiled for C, opts None."""
    rng = np.random.default_rng(1)
    x = uv.Tensor(rng.random((8, 12), dtype=np.float32))
    w = uv.Tensor(rng.random((12, 4), dtype=np.float32))
    b = uv.Tensor(rng.random(4, dtype=np.float32))
    return uv.compile((x @ w + b).relu(), backend="c")
