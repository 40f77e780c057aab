"""Lowering of @lower formulas (§2.12) to kernel ASTs in the form of docs/design/kernel-ir.md, with
the examples of the spec's text: the kernel structure (RANGE per index symbol, REDUCE ranges for
indices absent from the left side, gated loads for |i| guards, remaps, one REDUCE for an
initialised accumulation, conditional updates, with-locals, unrolling, packs, counted outputs) and
the values computed through the pipeline, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from uopviz.core.dtype import AddrSpace
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import tracing
from uopviz.nnef import NNEFError, loads

RNG = np.random.default_rng(3)


def real(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def graph_of(operator: str, call: str, inputs: dict[str, np.ndarray], outputs: str = "y: real;"):
    types = {"f": "real", "i": "int", "b": "bool"}
    decls = " ".join(
        f"{n}: {types[a.dtype.kind]}[{', '.join(map(str, a.shape))}];" for n, a in inputs.items()
    )
    text = f"{operator}\ngraph G {{ @input {{ {decls} }} @output {{ {outputs} }} @compose {{ {call} }} }}"
    return loads(text, file="lowering.sknd")


def ops_in(kernel_ast):
    return [u.op for u in kernel_ast.toposort()]


def ranges_in(kernel_ast):
    return [u for u in kernel_ast.toposort() if u.op is Ops.RANGE]


MATMUL = """
operator matmul {
    @input { A: real[m,k]; B: real[k,n]; Z: optional real[m,n]; }
    @output { C: real[m,n]; }
    @lower {
        C[i,j] = Z[i,j] ?? 0.0, i < m, j < n;
        C[i,j] += A[i,l] * B[l,j], i < m, l < k, j < n;
    }
}
"""


def test_matmul_is_one_kernel_with_a_reduce_range_and_the_init_folded_in():
    a, b, z = real(3, 5), real(5, 4), real(3, 4)
    graph = graph_of(MATMUL, "y = matmul(a, b, z);", {"a": a, "b": b, "z": z})
    (kernel,) = graph.lower()
    root = kernel.ast
    assert root.op is Ops.SINK and all(s.op is Ops.STORE for s in root.src)
    ranges = ranges_in(root)
    assert sorted((r.src[0].arg[0], r.arg[1]) for r in ranges) == sorted(
        [(3, AxisType.LOOP), (4, AxisType.LOOP), (5, AxisType.REDUCE)]
    )
    reduces = [u for u in root.toposort() if u.op is Ops.REDUCE]
    assert len(reduces) == 1 and reduces[0].arg == (Ops.ADD, ())
    params = [u for u in root.toposort() if u.op is Ops.PARAM]
    assert all(p.arg.addrspace is AddrSpace.GLOBAL and len(p.shape) == 1 for p in params)
    assert kernel.buffers[0] == "y" and sorted(kernel.buffers[1:]) == ["a", "b", "z"]
    np.testing.assert_allclose(graph.run({"a": a, "b": b, "z": z})["y"], a @ b + z, rtol=1e-5, atol=1e-5)
    graph = graph_of(MATMUL, "y = matmul(a, b);", {"a": a, "b": b})
    np.testing.assert_allclose(graph.run({"a": a, "b": b})["y"], a @ b, rtol=1e-5, atol=1e-5)


def test_a_lowered_kernel_is_finished_by_rangeifys_named_rules():
    """The kernel a formula builds is finished as Rangeify finishes its kernels (finish_kernel): its
    index arithmetic simplified by the named rules of "simplify indices", which a trace shows."""
    graph = graph_of(MATMUL, "y = matmul(a, b, z);", {"a": real(3, 5), "b": real(5, 4), "z": real(3, 4)})
    with tracing() as trace:
        (kernel,) = graph.lower()
    (simplified,) = trace.passes
    assert simplified.name == "simplify indices" and simplified.output is kernel.ast
    assert [step.rule for step in simplified.steps] == [
        "canonical sum (combine like terms)",
        "order the operands (commutative)",
    ]


SMOOTH = """
operator smooth {
    @attrib { w: int; }
    @input { x: real[s]; }
    @output { y: real[s]; }
    @lower {
        y[i,] += x[|i + j - w / 2|,] / real(w), i < s, j < w;
    }
}
"""


def test_guarded_indices_gate_the_load_and_skip_the_term():
    x = real(9)
    graph = graph_of(SMOOTH, "y = smooth{w=3}(x);", {"x": x})
    (kernel,) = graph.lower()
    loads_ = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    assert loads_ and all(len(load.src) == 3 for load in loads_)  # LOAD(index, alt, gate)
    padded = np.pad(x, 1)
    expected = (padded[:-2] + padded[1:-1] + padded[2:]) / 3
    np.testing.assert_allclose(graph.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)


REMAPS = """
operator replicate_edges {
    @attrib { n: int; }
    @input { x: real[s]; }
    @output { y: real[s + 2 * n]; }
    @lower { y[i,] = x[|i - n <> 0 : s - 1|,], i < s + 2 * n; }
}
operator reflect_edges {
    @attrib { n: int; }
    @input { x: real[s]; }
    @output { y: real[s + 2 * n]; }
    @lower {
        with z = i - n:
        y[i,] = x[|z <> -z : 2 * (s - 1) - z|,], i < s + 2 * n;
    }
}
"""


def test_remapped_indices_replicate_and_reflect():
    x = real(6)
    graph = graph_of(
        REMAPS, "y = replicate_edges{n=2}(x); z = reflect_edges{n=3}(x);", {"x": x}, "y: real; z: real;"
    )
    out = graph.run({"x": x})
    np.testing.assert_allclose(out["y"], np.pad(x, 2, mode="edge"))
    np.testing.assert_allclose(out["z"], np.pad(x, 3, mode="reflect"))  # a remap, not a clamp
    for kernel in graph.lower():
        assert not any(
            len(u.src) == 3 for u in kernel.ast.toposort() if u.op is Ops.LOAD
        )  # no term is skipped


ARGMAX = """
operator max_idx {
    @input { x: real[n]; }
    @output { idx: int[]; }
    @lower {
        idx[] = 0;
        idx[] := i, i < n | x[i,] > x[idx[],];
    }
}
operator max_idx_2d {
    @input { x: real[m,n]; }
    @output { idx: int[2]; }
    @lower {
        idx[:,] = 0;
        idx[:,] := [i,j], i < m, j < n | x[i,j] > x[idx[:,]..];
    }
}
"""


STARTED = """
operator max_idx_from_last {
    @input { x: real[n]; }
    @output { idx: int[]; }
    @lower {
        idx[] = n - 1;
        idx[] := i, i < n | x[i,] > x[idx[],];
    }
}
operator last_min_idx {
    @input { x: real[n]; }
    @output { idx: int[]; }
    @lower {
        idx[] = 0;
        idx[] := i, i < n | x[i,] <= x[idx[],];
    }
}
"""


@pytest.mark.parametrize(
    "values, first_from_last, last_min",
    [
        ([5, 1, 5], 2, 1),  # the initial index holds a maximum: a strict update never moves away
        ([5, 1, 7, 0, 0], 2, 4),
        ([3, 3, 3], 2, 2),
    ],
)
def test_conditional_updates_start_from_their_initial_value(values, first_from_last, last_min):
    x = np.array(values, np.float32)
    graph = graph_of(STARTED, "y = max_idx_from_last(a); z = last_min_idx(a);", {"a": x}, "y: int; z: int;")
    out = graph.run({"a": x})
    assert int(out["y"]) == first_from_last and int(out["z"]) == last_min


def test_conditional_updates_find_the_first_maximum():
    x1 = np.array([1, 5, 2, 5, 0], np.float32)
    x2 = RNG.integers(0, 4, (4, 5)).astype(np.float32)
    graph = graph_of(ARGMAX, "y = max_idx(a); z = max_idx_2d(b);", {"a": x1, "b": x2}, "y: int; z: int;")
    out = graph.run({"a": x1, "b": x2})
    assert out["y"] == 1  # the first of the two maxima: the update condition is strict
    np.testing.assert_array_equal(out["z"], np.unravel_index(x2.argmax(), x2.shape))
    for kernel in graph.lower():
        assert (
            sum(u.op is Ops.REDUCE for u in kernel.ast.toposort()) == 2
        )  # the maximum, then its first index


LOCALS = """
operator square_sin {
    @input { x: real[s..]; }
    @output { y: real[s..]; }
    @lower {
        with z = x[i..] ** 2:
        y[i..] = z * sin(z), i < s;
    }
}
"""


def test_with_locals_are_shared_subexpressions():
    x = real(2, 3)
    graph = graph_of(LOCALS, "y = square_sin(x);", {"x": x})
    (kernel,) = graph.lower()
    ops = ops_in(kernel.ast)
    assert ops.count(Ops.LOAD) == 1 and ops.count(Ops.SIN) == 1
    np.testing.assert_allclose(graph.run({"x": x})["y"], x**2 * np.sin(x**2), rtol=1e-5, atol=1e-6)


PACKS = """
operator add_to_all {
    @input { xs: real[n,m]..(k); z: real[n,m]; }
    @output { ys: real[n,m]..(k); }
    @lower {
        unroll..(ki -> k)
        ys[ki][ni,mi] = xs[ki][ni,mi] + z[ni,mi], ni < n, mi < m;
    }
}
operator add_to_all_packed {
    @input { xs: real[n,m]..(k); z: real[n,m]; }
    @output { ys: real[n,m]..(k); }
    @lower {
        ys[ni,mi] = xs[ni,mi] + z[ni,mi], ni < n, mi < m;
    }
}
operator add_slices {
    @input { xs: real[n,m,k]; z: real[n,m]; }
    @output { ys: real[n,m,k]; }
    @lower {
        ys[ni,mi,:] = xs[ni,mi,:] + z[ni,mi], ni < n, mi < m;
    }
}
"""


def test_unrolled_and_packed_assignments():
    a, b, z, c = real(2, 3), real(2, 3), real(2, 3), real(2, 3, 4)
    graph = graph_of(
        PACKS,
        "[p, q] = add_to_all([a, b], z); [r, s] = add_to_all_packed([a, b], z); t = add_slices(c, z);",
        {"a": a, "b": b, "z": z, "c": c},
        "p: real; q: real; r: real; s: real; t: real;",
    )
    out = graph.run({"a": a, "b": b, "z": z, "c": c})
    for name, expected in {"p": a + z, "q": b + z, "r": a + z, "s": b + z, "t": c + z[:, :, None]}.items():
        np.testing.assert_allclose(out[name], expected, rtol=1e-6, err_msg=name)
    kernels = graph.lower()
    assert [k.name for k in kernels[:2]] == ["p[0]", "p[1]"]  # one kernel per unrolled pack item
    slices = kernels[-1]
    assert sum(s.op is Ops.STORE for s in slices.ast.src) == 4  # the ':' dimension: one store per item


WHERE_TRUE = """
operator where_true {
    @input { cond: bool[s..(d)]; }
    @output { idx: int[d,k|(s * ..)]; }
    @lower {
        idx[:,k] = i, i < s | cond[i..];
    }
}
"""


def test_data_dependent_output_counts_its_points():
    cond = RNG.random((3, 4)) > 0.6
    graph = graph_of(WHERE_TRUE, "y = where_true(c);", {"c": cond}, "y: int;")
    assert graph.tensors["y"].upper_shape == (2, 12)
    out = graph.run({"c": cond})["y"]
    np.testing.assert_array_equal(out, np.stack(np.nonzero(cond)))
    names = [k.name for k in graph.lower()]
    assert names == ["y.positions", "y.count", "y.clear", "y.scatter"]


INVERSE = """
operator spread {
    @attrib { stride: int; }
    @input { x: real[s]; w: real[f]; }
    @output { y: real[(s - 1) * stride + f]; }
    @lower {
        y[|stride * i + j|,] += x[i,] * w[j,], i < s, j < f;
    }
}
"""


def test_scatter_shaped_formulas_are_inverted_into_gathers():
    x, w = real(5), real(3)
    graph = graph_of(INVERSE, "y = spread{stride=2}(x, w);", {"x": x, "w": w})
    (kernel,) = graph.lower()
    loops = [r for r in ranges_in(kernel.ast) if r.arg[1] is AxisType.LOOP]
    assert [r.src[0].arg[0] for r in loops] == [11]  # the loop is the output, the input index is recovered
    expected = np.zeros(11, np.float32)
    for i in range(5):
        expected[2 * i : 2 * i + 3] += x[i] * w
    np.testing.assert_allclose(graph.run({"x": x, "w": w})["y"], expected, rtol=1e-5, atol=1e-6)


def test_flatten_is_a_pure_gather_over_a_mixed_radix_range():
    x = real(2, 3, 4)
    graph = graph_of("import layout;", "y = layout.flatten{axis=1}(x);", {"x": x})
    (kernel,) = graph.lower()
    assert not any(u.op is Ops.REDUCE for u in kernel.ast.toposort())
    assert sorted(r.src[0].arg[0] for r in ranges_in(kernel.ast)) == [2, 12]
    np.testing.assert_array_equal(graph.run({"x": x})["y"], x.reshape(2, 12))


@pytest.mark.parametrize(
    "body, message",
    [
        ("y[i,] = x[i, 0], i < n;", "'x' has rank 1 but is accessed with 2 indices"),
        ("y[i,] = x[i + 1,], i < n;", None),
        ("y[i, j] = x[i,], i < n, j < n;", "'y' has rank 1 but the left side has 2 indices"),
        ("y[i,] = q[i,], i < n;", "unknown identifier 'q'"),
        ("y[i + n,] = x[i,], i < n;", "guard it with"),
    ],
)
def test_lowering_errors_name_the_problem(body, message):
    operator = f"operator bad {{ @input {{ x: real[n]; }} @output {{ y: real[n]; }} @lower {{ {body} }} }}"
    graph = graph_of(operator, "y = bad(x);", {"x": real(4)})
    if message is None:  # an unguarded index past the end: the python backend refuses to read there
        with pytest.raises(Exception, match="out of"):
            graph.run({"x": real(4)})
        return
    with pytest.raises(NNEFError, match=message) as info:
        graph.lower()
    assert info.value.line is not None
