"""Long chains of elementwise operations (x1 = f1(x0); x2 = f2(x1); ...) as SkriptND and NNEF 1.0 text,
with their numpy reference: the graphs whose lowering, fusion and compilation must cost time linear in
their length (issue #21: a 3,000-operation chain took longer than 75 s to fuse)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ChainOp:
    """One operation of a chain: its SkriptND and NNEF 1.0 call on ``{x}`` and its numpy value."""

    skriptnd: str
    nnef1: str
    numpy: Callable[[np.ndarray], np.ndarray]


#: operations that keep values within a few units whatever their order (contractions, clamps and
#: squashing functions), so float32 rounding stays small over thousands of them
CHAIN_OPS: dict[str, ChainOp] = {
    "relu": ChainOp("nn.relu({x})", "relu({x})", lambda x: np.maximum(x, np.float32(0))),
    "add": ChainOp("math.add({x}, 0.5)", "add({x}, 0.5)", lambda x: x + np.float32(0.5)),
    "sub": ChainOp("math.sub({x}, 0.25)", "sub({x}, 0.25)", lambda x: x - np.float32(0.25)),
    "mul": ChainOp("math.mul({x}, 0.75)", "mul({x}, 0.75)", lambda x: x * np.float32(0.75)),
    "neg": ChainOp("math.neg({x})", "neg({x})", lambda x: -x),
    "tanh": ChainOp("math.tanh({x})", "tanh({x})", np.tanh),
    "abs": ChainOp("math.abs({x})", "abs({x})", np.abs),
    "min": ChainOp("math.min({x}, 2.0)", "min({x}, 2.0)", lambda x: np.minimum(x, np.float32(2))),
    "max": ChainOp("math.max({x}, -2.0)", "max({x}, -2.0)", lambda x: np.maximum(x, np.float32(-2))),
}


def chain_skriptnd(ops: Sequence[str], shape: Sequence[int]) -> str:
    """Graph ``G`` (input ``x0``, output ``y``) applying ``ops`` (names of :data:`CHAIN_OPS`) in turn."""
    extents = ", ".join(map(str, shape))
    lines = ["import nn; import math;", "graph G {", f"  @input {{ x0: real[{extents}]; }}",
             "  @output { y: real; }", "  @compose {"]
    for i, name in enumerate(ops, start=1):
        target = "y" if i == len(ops) else f"x{i}"
        lines.append(f"    {target} = {CHAIN_OPS[name].skriptnd.format(x=f'x{i - 1}')};")
    lines += ["  }", "}"]
    return "\n".join(lines)


def chain_nnef1(ops: Sequence[str], shape: Sequence[int]) -> str:
    """The same chain as NNEF 1.0 text (``version 1.0; graph G( x0 ) -> ( y ) {...}``)."""
    lines = ["version 1.0;", "graph G( x0 ) -> ( y )", "{",
             f"    x0 = external<scalar>(shape = [{', '.join(map(str, shape))}]);"]
    for i, name in enumerate(ops, start=1):
        target = "y" if i == len(ops) else f"x{i}"
        lines.append(f"    {target} = {CHAIN_OPS[name].nnef1.format(x=f'x{i - 1}')};")
    lines.append("}")
    return "\n".join(lines)


def chain_reference(ops: Sequence[str], x: np.ndarray) -> np.ndarray:
    """What the chain computes, in float32 as the kernels do."""
    x = x.astype(np.float32)
    for name in ops:
        x = CHAIN_OPS[name].numpy(x).astype(np.float32)
    return x


def random_chain(length: int, rng: np.random.Generator) -> list[str]:
    """``length`` operation names drawn from :data:`CHAIN_OPS`."""
    names = sorted(CHAIN_OPS)
    return [names[i] for i in rng.integers(0, len(names), size=length)]
