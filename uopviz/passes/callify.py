"""Callify: the Tensor graph becomes one stateless FUNCTION of its inputs.

Three passes, all rules:

1. **resolve functions**: every ``GET_TUPLE(FUNCTION(TUPLE(body...), args...), i)`` made by
   ``@function`` is replaced by ``body[i]`` with each ``PARAM(k)`` substituted by ``args[k]``
   (``uopviz.core.inline.resolve_functions``);
2. **parametrize inputs**: every data leaf (a ``BUFFER`` or raw ``BINARY`` data) becomes
   ``PARAM(k)``, in order of first use;
3. **make function**: the outputs and the inputs become one ``FUNCTION`` (:data:`function_rules`,
   tried at the root alone).

The result is ``FUNCTION(TUPLE(outputs...), input0, input1, ...)``: the body depends only on
PARAMs and constants; the inputs are the FUNCTION's arguments, whose data the Program binds
when it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from uopviz.core.dtype import AddrSpace
from uopviz.core.errors import UopvizError
from uopviz.core.inline import resolve_functions
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite, rewrite_root
from uopviz.core.uop import UOp
from uopviz.passes.schedule import Lowering


class CallifyError(UopvizError, ValueError):
    """A graph that is not a program: a free PARAM, an output that is not a value, ..."""


@dataclass
class InputContext:
    """The data leaves found so far, in slot order."""

    inputs: list[UOp] = field(default_factory=list)
    params: dict[UOp, UOp] = field(default_factory=dict)


def input_to_param(ctx: InputContext, data: UOp) -> UOp | None:
    """A BUFFER (or raw BINARY data) the program reads becomes a PARAM of the function."""
    if data.op is Ops.BUFFER and data.arg.addrspace is not AddrSpace.GLOBAL:
        return None
    found = ctx.params.get(data)
    if found is None:
        dtype = data.arg.dtype if data.op is Ops.BUFFER else data.dtype
        found = UOp.param(len(ctx.inputs), data.shape, dtype, data.device)
        ctx.inputs.append(data)
        ctx.params[data] = found
    return found


input_rules = PatternMatcher([
    (UPat((Ops.BUFFER, Ops.BINARY), name="data"), input_to_param, "input_to_param"),
], name="parametrize inputs")


def make_function(ctx: InputContext, body: UOp) -> UOp:
    """The program's outputs (``TUPLE``, their data leaves PARAMs) and the inputs those PARAMs stand
    for become one ``FUNCTION(body, inputs...)``."""
    return UOp(Ops.FUNCTION, (body, *ctx.inputs))


#: the rule that closes Callify, tried at the root alone (its FUNCTION holds the TUPLE it matched)
function_rules = PatternMatcher([
    (UPat(Ops.TUPLE, name="body"), make_function, "program becomes one FUNCTION"),
], name="make function")


def callify(outputs: Sequence[UOp]) -> UOp:
    """``FUNCTION(TUPLE(outputs...), inputs...)``: the whole program as one stateless function."""
    for position, out in enumerate(outputs):
        if not isinstance(out, UOp):
            raise CallifyError(f"output {position} is a {type(out).__name__}; compile takes Tensors or UOps")
        if out.dtype.scalar.kind.value == "void":
            raise CallifyError(f"output {position} is a {out.op.name} with no value (dtype void); "
                               f"compile takes values (Tensors or value UOps)")
    body = UOp(Ops.TUPLE, tuple(outputs))
    body = resolve_functions(body)
    free = [u for u in body.toposort() if u.op is Ops.PARAM]
    if free:
        raise CallifyError(f"the graph has a free PARAM (slot {free[0].arg.slot}, shape {free[0].shape}); "
                           f"a program needs concrete inputs: call the @function with Tensors or use BUFFERs")
    ctx = InputContext()
    body = graph_rewrite(body, input_rules, ctx=ctx, name="parametrize inputs")
    # a rule at the root, so the stage's last step shows its output, the FUNCTION
    return rewrite_root(body, function_rules, ctx=ctx, name="make function")


def callify_stage(lowering: Lowering) -> None:
    """Callify: the graph becomes one stateless FUNCTION of its inputs."""
    lowering.graph = callify(lowering.outputs)
    lowering.inputs = list(lowering.graph.src[1:])
