"""Reverse-mode gradients: graph shapes and dtypes, symbolic checks, and values against central
finite differences computed with the test evaluator (float64 data)."""

from __future__ import annotations

import numpy as np
import pytest
from test_tensor import evaluate, needs_pipeline

from uopviz.core import Ops, UOp, dtypes
from uopviz.core.function import function
from uopviz.core.gradient import GradientError, gradient, gradient_rules
from uopviz.core.tensor import Tensor


def buffer_number(t: Tensor) -> int:
    return next(u for u in t.uop.toposort() if u.op is Ops.BUFFER).arg.number


def finite_differences(loss: Tensor, inputs: list[Tensor], arrays: list[np.ndarray], eps: float = 1e-6):
    """Central differences of ``loss`` in every element of every input (by replacing buffer data)."""
    numbers = [buffer_number(t) for t in inputs]
    results = []
    for number, array in zip(numbers, arrays):
        grad = np.zeros_like(array)
        for position in np.ndindex(array.shape):
            values = []
            for sign in (1, -1):
                moved = array.copy()
                moved[position] += sign * eps
                values.append(float(evaluate(loss, {number: moved.reshape(-1)})))
            grad[position] = (values[0] - values[1]) / (2 * eps)
        results.append(grad)
    return results


POSITIVE, ANY = "positive", "any"
CASES = {  # name: (function of tensors, input shapes, domain)
    "square": (lambda x: x * x, [(3, 2)], ANY),
    "add_sub_broadcast": (lambda x, y: x + y - x * 2, [(2, 3), (3,)], ANY),
    "mul_div": (lambda x, y: x * y / (y * y + 1), [(4,), (4,)], ANY),
    "div": (lambda x, y: x / y, [(3,), (3,)], POSITIVE),
    "neg_recip": (lambda x: -x.reciprocal(), [(2, 2)], POSITIVE),
    "maximum": (lambda x, y: x.maximum(y), [(5,), (5,)], ANY),
    "minimum": (lambda x, y: x.minimum(y) * 3, [(5,), (1,)], ANY),
    "where": (lambda x, y: (x > 0).where(x * y, y), [(6,), (6,)], ANY),
    "exp_log": (lambda x: x.exp() + x.log(), [(3,)], POSITIVE),
    "exp2_log2": (lambda x: x.exp2() * x.log2(), [(3,)], POSITIVE),
    "sin_cos_tan": (lambda x: x.sin() + x.cos() * x.tan(), [(4,)], ANY),
    "sqrt_rsqrt": (lambda x: x.sqrt() + x.rsqrt(), [(4,)], POSITIVE),
    "pow_tensor": (lambda x, y: x ** y, [(3,), (3,)], POSITIVE),
    "pow_float": (lambda x: x ** 1.7 + 2.0 ** x, [(3,)], POSITIVE),
    "pow_int": (lambda x: x ** 3 - x ** -2, [(3,)], POSITIVE),
    "activations": (lambda x: x.sigmoid() + x.tanh() + x.gelu() + x.relu() + x.abs(), [(6,)], ANY),
    "clip": (lambda x: x.clip(-0.5, 0.5), [(6,)], ANY),
    "cast_float32": (lambda x: x.cast(dtypes.float32).cast(dtypes.float64) * x, [(3,)], ANY),
    "sum_axes": (lambda x: x.sum(0) * x.sum((0, 2), keepdim=True).sum(), [(2, 3, 2)], ANY),
    "max_min": (lambda x: x.max(1) + x.min(0).sum(), [(3, 4)], ANY),
    "prod": (lambda x: x.prod(1), [(2, 3)], POSITIVE),
    "mean_var_std": (lambda x: x.mean(0) + x.var(1).sum() + x.std(), [(3, 4)], ANY),
    "softmax": (lambda x: x.softmax() + x.log_softmax(0), [(3, 4)], ANY),
    "layernorm": (lambda x: x.layernorm(), [(2, 5)], ANY),
    "matmul": (lambda x, y: x @ y, [(2, 3), (3, 4)], ANY),
    "batched_matmul": (lambda x, y: x @ y, [(2, 2, 3), (3,)], ANY),
    "movement": (lambda x: x.reshape(3, 4).permute(1, 0).flip(0).pad(((1, 0), (0, 2)))
                 .shrink(((0, 3), (1, 4))), [(2, 6)], ANY),
    "expand": (lambda x: x.reshape(3, 1).expand(2, 3, 4), [(3,)], ANY),
    "getitem": (lambda x: x[::-2, 1:, None] * x[0], [(5, 3)], ANY),
    "cat_stack": (lambda x, y: Tensor.cat([x, y, x]).sum(0, keepdim=True)
                  * Tensor.stack([x, y], axis=1).sum(1), [(2, 2), (2, 2)], ANY),
    "split_repeat": (lambda x: x.split(1)[1].repeat(2, 2) * x.chunk(2)[0].sum(), [(2, 3)], ANY),
    "cumsum": (lambda x: x.cumsum(1), [(2, 4)], ANY),
    "gather": (lambda x: x.gather(Tensor([2, 0, 2]), 1), [(2, 3)], ANY),
    "scatter_add": (lambda x, v: x.scatter_add(Tensor([1, 0, 1]), v), [(2,), (3,)], ANY),
    "conv2d": (lambda x, w: x.conv2d(w, stride=(2, 1), padding=1), [(1, 2, 4, 4), (2, 2, 3, 2)], ANY),
    "pools": (lambda x: x.max_pool2d(2) + x.avg_pool2d(2), [(1, 1, 4, 4)], ANY),
    "markers": (lambda x: x.contiguous() * x.contiguous_backward().copy("GPU").copy("CPU"), [(3,)], ANY),
    "function": (lambda x, y: function(lambda a, b: (a * b).exp() - a)(x, y), [(3,), (3,)], ANY),
}


def case_inputs(name: str, shapes: list, domain: str) -> list[np.ndarray]:
    rng = np.random.default_rng(sum(map(ord, name)))
    if domain == POSITIVE:
        return [rng.uniform(0.5, 2.0, size=s) for s in shapes]
    arrays = []
    for s in shapes:
        values = rng.uniform(-1.5, 1.5, size=s)
        values = np.where(np.abs(values) < 0.05, 0.3, values)  # keep away from kinks at 0
        arrays.append(values + rng.permutation(np.arange(values.size)).reshape(s) * 1e-3)  # no ties
    return arrays


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_match_finite_differences(name):
    build, shapes, domain = CASES[name]
    arrays = case_inputs(name, shapes, domain)
    inputs = [Tensor(a) for a in arrays]
    out = build(*inputs)
    weights = Tensor(np.random.default_rng(1).uniform(0.5, 1.5, size=out.shape))
    loss = (out * weights).sum()
    grads = gradient(loss, inputs)
    for grad, tensor in zip(grads, inputs):
        assert isinstance(grad, Tensor) and grad.shape == tensor.shape and grad.dtype is dtypes.float64
    # through a float32 cast, a tiny step drowns in rounding: take a larger one
    expected = finite_differences(loss, inputs, arrays, eps=1e-3 if name == "cast_float32" else 1e-6)
    tolerance = 1e-4 if name == "cast_float32" else 1e-5
    for grad, want in zip(grads, expected):
        np.testing.assert_allclose(evaluate(grad), want, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("shape", [(3,), (2, 4), (2, 1, 3)])
def test_square_is_two_x(shape):
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    t = Tensor(x)
    (grad,) = gradient(t * t, [t])
    assert grad.shape == shape and grad.dtype is dtypes.float32
    assert grad.uop.op is Ops.ADD and {s.op for s in grad.uop.src} == {Ops.MUL}  # g*x + g*x
    np.testing.assert_array_equal(evaluate(grad), 2 * x)


def test_default_seed_is_ones_and_grad_out_is_used():
    x = Tensor(np.arange(4, dtype=np.float32))
    (grad,) = gradient(x * 3, [x])
    np.testing.assert_array_equal(evaluate(grad), np.full(4, 3, np.float32))
    upstream = Tensor(np.array([1.0, 0.0, 2.0, -1.0], np.float32))
    (grad,) = gradient(x * 3, [x], grad_out=upstream)
    np.testing.assert_array_equal(evaluate(grad), [3.0, 0.0, 6.0, -3.0])
    with pytest.raises(ValueError, match="grad_out has shape"):
        gradient(x * 3, [x], grad_out=Tensor(np.ones(3, np.float32)))


def test_max_ties_split_the_gradient():
    x = Tensor(np.array([1.0, 2.0, 2.0], np.float32))
    y = Tensor(np.array([1.0, 1.0, 2.0], np.float32))
    gx, gy = gradient(x.maximum(y).sum(), [x, y])
    np.testing.assert_array_equal(evaluate(gx), [0.5, 1.0, 0.5])
    np.testing.assert_array_equal(evaluate(gy), [0.5, 0.0, 0.5])
    z = Tensor(np.array([0.0, 1.0, -1.0], np.float32))
    (gz,) = gradient(z.relu().sum(), [z])
    np.testing.assert_array_equal(evaluate(gz), [0.5, 1.0, 0.0])
    w = Tensor(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]], np.float32))
    (gw,) = gradient(w.max(1).sum(), [w])
    np.testing.assert_array_equal(evaluate(gw), [[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])


def test_detach_and_integer_paths_stop_gradients():
    x = Tensor(np.array([1.0, 2.0, 3.0], np.float32))
    (grad,) = gradient((x.detach() * x).sum(), [x])
    np.testing.assert_array_equal(evaluate(grad), [1.0, 2.0, 3.0])
    (grad,) = gradient((x.cast(dtypes.int32).cast(dtypes.float32) * 2).sum(), [x])
    np.testing.assert_array_equal(evaluate(grad), np.zeros(3))
    (grad,) = gradient(((x > 1).cast(dtypes.float32) + x).sum(), [x])
    np.testing.assert_array_equal(evaluate(grad), np.ones(3))
    unrelated = Tensor(np.ones((2, 2), np.float16))
    (zero,) = gradient(x.sum(), [unrelated])
    assert zero.shape == (2, 2) and zero.dtype is dtypes.float16 and not evaluate(zero).any()
    ints = Tensor(np.arange(3, dtype=np.int32))
    (int_grad,) = gradient((ints.cast(dtypes.float32) * x).sum(), [ints])
    assert int_grad.dtype is dtypes.int32 and not evaluate(int_grad).any()


def test_contiguous_backward_wraps_the_gradient():
    x = Tensor(np.array([1.0, 2.0], np.float32))
    (grad,) = gradient((x.contiguous_backward() * 3).sum(), [x])
    assert grad.uop.op is Ops.CONTIGUOUS
    np.testing.assert_array_equal(evaluate(grad), [3.0, 3.0])
    (grad,) = gradient((x.contiguous() * 3).sum(), [x])
    assert Ops.CONTIGUOUS not in {u.op for u in grad.uop.toposort()}


def test_uop_targets_give_uops_and_implicit_broadcasting():
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).uop
    b = Tensor(np.arange(4, dtype=np.float32)).uop
    out = (a * b).reduce(Ops.ADD, (0, 1))  # UOp-level: b broadcasts implicitly
    ga, gb = gradient(out, [a, b])
    assert isinstance(ga, UOp) and ga.shape == (3, 4) and gb.shape == (4,)
    np.testing.assert_array_equal(evaluate(ga), np.broadcast_to(np.arange(4), (3, 4)))
    np.testing.assert_array_equal(evaluate(gb), np.arange(12).reshape(3, 4).sum(0))


def test_gradient_through_function_bodies_equals_direct():
    rng = np.random.default_rng(9)
    x, y = (Tensor(rng.standard_normal((2, 3))) for _ in range(2))

    def python(a, b):
        return ((a * b).sin() + a).sum(1)

    traced = gradient(function(python)(x, y), [x, y])
    direct = gradient(python(x, y), [x, y])
    for t, d in zip(traced, direct):
        assert t.uop is d.uop  # resolving the FUNCTION gives the same forward graph, hence the same gradient


def test_backward_sets_and_accumulates_grad():
    x = Tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
    w = Tensor(np.array([0.5, 0.5, 2.0], np.float32), requires_grad=True)
    constant = Tensor(np.ones(3, np.float32))
    loss = (x * w + constant).sum()
    assert loss.requires_grad
    loss.backward()
    np.testing.assert_array_equal(evaluate(x.grad), [0.5, 0.5, 2.0])
    np.testing.assert_array_equal(evaluate(w.grad), [1.0, -2.0, 3.0])
    assert constant.grad is None
    (x * x).sum().backward()
    np.testing.assert_array_equal(evaluate(x.grad), [2.5, -3.5, 8.0])
    with pytest.raises(ValueError, match="non-scalar"):
        (x * 2).backward()
    (x * 2).backward(Tensor(np.ones(3, np.float32)))
    with pytest.raises(ValueError, match="requires_grad"):
        constant.sum().backward()
    x.requires_grad = False
    with pytest.raises(ValueError, match="requires_grad"):
        (x * constant).sum().backward()


def test_backward_through_function():
    x = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    out = function(lambda a: a * a * 3)(x)
    out.sum().backward()
    np.testing.assert_allclose(evaluate(x.grad), [6.0, 12.0])


def test_rules_are_named_data():
    names = [rule.name for rule in gradient_rules.rules]
    assert len(names) == len(set(names))
    ops = {op for rule in gradient_rules.rules for op in rule.pattern.ops}
    for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.DIV, Ops.NEG, Ops.RECIP, Ops.MAX, Ops.WHERE, Ops.EXP2,
               Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW, Ops.CAST, Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD,
               Ops.SHRINK, Ops.FLIP, Ops.REDUCE, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH,
               Ops.COPY):
        assert op in ops, op
    assert all(rule.location.startswith("uopviz/core/gradient.py:") for rule in gradient_rules.rules)


def test_no_rule_is_an_error():
    x = Tensor(np.ones((2, 3), np.float32))
    opaque = Tensor._wrap(UOp(Ops.CUSTOM, (x.uop,), ("opaque({0})", dtypes.float32)))
    with pytest.raises(GradientError, match="no gradient rule for CUSTOM"):
        gradient(opaque, [x])


def test_deep_graphs_do_not_recurse():
    x = Tensor(np.ones(2, np.float32))
    out = x
    for _ in range(3000):
        out = out * 1.0 + x
    (grad,) = gradient(out.sum(), [x])
    assert grad.shape == (2,)


def test_gradient_of_multi_device_copy():
    x = Tensor(np.arange(4, dtype=np.float32))
    (grad,) = gradient((x.copy("GPU") * 2).sum(), [x])
    assert grad.uop.op is Ops.COPY and grad.device == "CPU"
    np.testing.assert_array_equal(evaluate(grad), [2.0] * 4)


@needs_pipeline
@pytest.mark.parametrize("name", list(CASES))
def test_gradients_through_the_pipeline(name):
    build, shapes, domain = CASES[name]
    arrays = case_inputs(name, shapes, domain)
    inputs = [Tensor(a) for a in arrays]
    loss = build(*inputs).sum()
    eps = 1e-3 if name == "cast_float32" else 1e-6
    for grad, want in zip(gradient(loss, inputs), finite_differences(loss, inputs, arrays, eps)):
        np.testing.assert_allclose(grad.numpy(), want, rtol=1e-4, atol=1e-4)


@needs_pipeline
@pytest.mark.parametrize("shape", [(4,), (3, 5)])
def test_square_gradient_through_the_pipeline(shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    t = Tensor(x)
    (grad,) = gradient((t * t).sum(), [t])
    np.testing.assert_allclose(grad.numpy(), 2 * x, rtol=1e-5)


@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_float32_sigmoid_and_tanh_gradients_are_their_slopes(name: str) -> None:
    # float32 sigmoid and tanh compute in pairs of floats split by masking bits (no gradient there):
    # they are differentiated as s·(1 - s) and 1 - t², and keep their values (tanh(-0) is -0)
    import uopviz as uv

    x0 = np.array([-90.0, -20.0, -4.15, -0.5, -0.0, 0.0, 0.3, 0.54, 0.56, 3.1, 30.0, np.inf, -np.inf],
                  np.float32)
    x = Tensor(x0)
    y = getattr(x, name)()
    (grad,) = gradient(y.sum(), [x])
    value, slope = (np.asarray(a, np.float64) for a in uv.compile([y, grad]).run())
    expected = value * (1 - value) if name == "sigmoid" else 1 - value * value
    np.testing.assert_allclose(slope, expected, rtol=1e-6, atol=1e-7)  # (1 - t² rounds in float32)
    if name == "tanh":
        assert np.signbit(value[4]) and not np.signbit(value[5])
