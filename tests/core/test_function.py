"""@function: the spec's five steps (FUNCTION / PARAM / TUPLE / GET_TUPLE), caching, and
resolve_functions giving back exactly the graph the Python function builds directly."""

from __future__ import annotations

import numpy as np
import pytest
from test_tensor import evaluate

import uopviz as uv
from uopviz.core import Ops, UOp, dtypes, tracing
from uopviz.core.function import Function, function, resolve_functions, substitute_in_scope
from uopviz.core.tensor import Tensor


def random_tensor(rng: np.random.Generator, shape: tuple, dtype=np.float32) -> Tensor:
    return Tensor(rng.standard_normal(shape).astype(dtype))


def params_of(body: UOp) -> dict[int, UOp]:
    return {u.arg.slot: u for u in body.toposort() if u.op is Ops.PARAM}


@pytest.mark.parametrize("shape", [(3,), (2, 4), (2, 1, 3)])
def test_single_return_structure(shape):
    rng = np.random.default_rng(len(shape))

    @function
    def f(a, b):
        return a * b + a

    x, y = random_tensor(rng, shape), random_tensor(rng, shape)
    out = f(x, y)
    assert isinstance(out, Tensor) and out.shape == shape and out.dtype is dtypes.float32
    get = out.uop
    assert get.op is Ops.GET_TUPLE and get.arg == 0
    call = get.src[0]
    assert call.op is Ops.FUNCTION and call.src[1] is x.uop and call.src[2] is y.uop and len(call.src) == 3
    body = call.src[0]
    assert body.op is Ops.TUPLE and len(body.src) == 1
    params = params_of(body)
    assert set(params) == {0, 1}
    for slot, tensor in ((0, x), (1, y)):
        assert params[slot].shape == tensor.shape and params[slot].dtype is tensor.dtype
        assert params[slot].arg.device == tensor.device
    # the body holds only PARAM references, not the concrete buffers
    assert not any(u.op is Ops.BUFFER for u in body.toposort())
    np.testing.assert_allclose(evaluate(out), evaluate(x * y + x))


def test_resolve_gives_the_very_same_graph():
    rng = np.random.default_rng(0)
    x, y = random_tensor(rng, (4, 3)), random_tensor(rng, (3,))

    def python(a, b):
        return (a.exp() + b).sum(0) @ b.reshape(3, 1) - a.max()

    direct = python(x, y)
    traced = function(python)(x, y)
    assert traced.uop is not direct.uop
    assert resolve_functions(traced.uop) is direct.uop  # hash-consing: same structure, same object
    assert uv.function is function


def test_a_tensor_passed_twice_is_one_parameter():
    @function
    def f(a, b):
        return a - b * 2

    x = Tensor(np.arange(5, dtype=np.float32))
    out = f(x, x)
    call = out.uop.src[0]
    assert len(call.src) == 2 and call.src[1] is x.uop  # deduplicated by identity
    assert set(params_of(call.src[0])) == {0}
    assert resolve_functions(out.uop) is (x - x * 2).uop


def test_tuple_returns_and_nested_arguments():
    rng = np.random.default_rng(1)
    x, y, z = (random_tensor(rng, (2, 3)) for _ in range(3))

    @function
    def f(pair, scale=1.0, extra=None):
        first, second = pair
        return first * scale + extra["bias"], (second - first).sum(1)

    total, summed = f([x, y], scale=2.0, extra={"bias": z})
    assert total.uop.op is Ops.GET_TUPLE and summed.uop.op is Ops.GET_TUPLE
    assert (total.uop.arg, summed.uop.arg) == (0, 1)
    assert total.uop.src[0] is summed.uop.src[0]  # one FUNCTION, one GET_TUPLE per element
    call = total.uop.src[0]
    assert [a for a in call.src[1:]] == [x.uop, y.uop, z.uop]
    assert len(call.src[0].src) == 2 and total.shape == (2, 3) and summed.shape == (2,)
    assert resolve_functions(total.uop) is (x * 2.0 + z).uop
    assert resolve_functions(summed.uop) is (y - x).sum(1).uop
    (single,) = function(lambda a: (a + 1,))(x)
    assert single.uop.op is Ops.GET_TUPLE and single.uop.src[0].src[0].op is Ops.TUPLE


def test_cache_per_signature():
    calls = []

    @function
    def f(a, b):
        calls.append(1)
        return a + b

    rng = np.random.default_rng(2)
    x1, y1, x2, y2 = (random_tensor(rng, (3,)) for _ in range(4))
    out1, out2 = f(x1, y1), f(x2, y2)
    assert len(calls) == 1  # traced once for (3,) float32 inputs
    assert out1.uop.src[0].src[0] is out2.uop.src[0].src[0]  # the same body, different arguments
    assert out2.uop.src[0].src[1] is x2.uop
    f(random_tensor(rng, (4,)), random_tensor(rng, (4,)))
    f(Tensor(np.ones(3, np.int32)), Tensor(np.ones(3, np.int32)))
    assert len(calls) == 3  # new shapes, new dtypes: new traces
    assert isinstance(f, Function) and len(f.cache) == 3
    assert resolve_functions(out2.uop) is (x2 + y2).uop


def test_non_tensor_arguments_are_part_of_the_signature():
    @function
    def scaled(a, factor):
        return a * factor

    x = Tensor(np.ones(3, np.float32))
    assert resolve_functions(scaled(x, 2.0).uop) is (x * 2.0).uop
    assert resolve_functions(scaled(x, 3.0).uop) is (x * 3.0).uop
    assert len(scaled.cache) == 2
    assert resolve_functions(scaled(x, [1.0, 2.0, 3.0]).uop).shape == (3,)  # unhashable: traced each call


def test_captured_tensors_become_parameters():
    rng = np.random.default_rng(3)
    weight = random_tensor(rng, (3, 2))

    @function
    def layer(a):
        return (a @ weight).relu() + Tensor([1.0, 2.0])

    x = random_tensor(rng, (4, 3))
    out = layer(x)
    call = out.uop.src[0]
    assert not any(u.op is Ops.BUFFER for u in call.src[0].toposort())
    assert call.src[1] is x.uop and len(call.src) == 4  # x, then the two captured buffers
    assert {u.op for u in call.src[2:]} == {Ops.BUFFER}
    expected = np.maximum(evaluate(x) @ evaluate(weight), 0) + np.array([1.0, 2.0], np.float32)
    np.testing.assert_allclose(evaluate(out), expected, rtol=1e-5)
    again = layer(random_tensor(rng, (4, 3)))  # cached: the captured buffers of the first trace
    assert again.uop.src[0].src[2:] == call.src[2:]


def test_nested_functions():
    @function
    def inner(a):
        return a * a + 1

    @function
    def outer(a, b):
        return inner(a) - inner(b)

    rng = np.random.default_rng(4)
    x, y = random_tensor(rng, (3,)), random_tensor(rng, (3,))
    out = outer(x, y)
    body = out.uop.src[0].src[0]
    inner_calls = [u for u in body.toposort() if u.op is Ops.FUNCTION]
    assert inner_calls and all(u.src[1].op is Ops.PARAM for u in inner_calls)
    assert resolve_functions(out.uop) is ((x * x + 1) - (y * y + 1)).uop
    np.testing.assert_allclose(evaluate(out), evaluate(x) ** 2 - evaluate(y) ** 2, rtol=1e-5)


def test_constant_inputs_do_not_leak_into_inner_scopes():
    # the outer input is CONST 2.0, hash-identical to the inner body's own constant: only the outer
    # scope's occurrence may become a PARAM
    @function
    def inner(a):
        return a * 2.0

    @function
    def outer(a, c):
        return inner(a) + c

    x = Tensor(np.arange(3, dtype=np.float32))
    two = Tensor(2.0)
    out = outer(x, two)
    assert resolve_functions(out.uop) is (x * 2.0 + two).uop
    np.testing.assert_allclose(evaluate(out), np.arange(3) * 2.0 + 2.0)


def test_resolve_rules_are_named_and_traced():
    @function
    def f(a):
        return a.exp()

    x = Tensor(np.ones(2, np.float32))
    with tracing() as trace:
        resolved = resolve_functions(f(x).uop)
    assert resolved is x.exp().uop
    record = trace.find("resolve functions")
    assert [s.rule for s in record.steps] == ["inline a FUNCTION's element: PARAM k -> argument k"]
    assert record.steps[0].location.startswith("uopviz/core/inline.py:")
    assert resolve_functions(x.uop) is x.uop  # nothing to resolve


def test_get_tuple_of_a_plain_tuple():
    x = Tensor(np.ones(2, np.float32))
    packed = UOp(Ops.GET_TUPLE, (UOp(Ops.TUPLE, (x.uop, (x + 1).uop)),), 1)
    assert resolve_functions(packed) is (x + 1).uop


def test_errors():
    with pytest.raises(TypeError, match="must return a Tensor"):
        function(lambda a: 3)(Tensor([1.0]))
    with pytest.raises(TypeError, match="callable"):
        function(3)
    x = Tensor(np.ones(3, np.float32))
    body = UOp(Ops.TUPLE, (UOp.param(0, (3,), dtypes.float32) * 2,))
    bad = UOp(Ops.GET_TUPLE, (UOp(Ops.FUNCTION, (body, Tensor(np.ones(4, np.float32)).uop)),), 0)
    with pytest.raises(uv.UOpError, match="PARAM expects"):
        resolve_functions(bad)
    missing = UOp(Ops.GET_TUPLE, (UOp(Ops.FUNCTION, (body,)),), 0)
    with pytest.raises(uv.UOpError, match="0 arguments"):
        resolve_functions(missing)
    assert resolve_functions(UOp(Ops.GET_TUPLE, (UOp(Ops.FUNCTION, (body, x.uop)),), 0)) is x.uop * 2


def test_substitute_in_scope_leaves_function_bodies():
    param = UOp.param(0, (3,), dtypes.float32)
    inner_body = UOp(Ops.TUPLE, (param + 1,))
    x = Tensor(np.ones(3, np.float32)).uop
    call = UOp(Ops.GET_TUPLE, (UOp(Ops.FUNCTION, (inner_body, param)),), 0)
    root = call * param
    replaced = substitute_in_scope(root, {param: x})
    function_uop = replaced.src[0].src[0]
    assert function_uop.src[0] is inner_body and function_uop.src[1] is x and replaced.src[1] is x


def test_methods_can_be_decorated():
    class Model:
        def __init__(self, scale):
            self.scale = scale

        @function
        def forward(self, a):
            return a * self.scale

    x = Tensor(np.ones(2, np.float32))
    assert resolve_functions(Model(3.0).forward(x).uop) is (x * 3.0).uop


def test_requires_grad_flows_to_outputs():
    x = Tensor(np.ones(2, np.float32), requires_grad=True)
    assert function(lambda a: a * 2)(x).requires_grad
    assert not function(lambda a: a * 2)(Tensor(np.ones(2, np.float32))).requires_grad
