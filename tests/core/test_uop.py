"""The UOp: hash-consing, immutability, every row of the spec's derived-property table, validation."""

import gc
import math
import pickle
import random

import networkx as nx
import pytest

import uopviz as uv
from uopviz import AxisType, OpFamily, Ops, UOp, UOpError, dtypes
from uopviz.core.uop import live_uop_count

f32, i32, idx = dtypes.float32, dtypes.int32, dtypes.index


def buf(size=16, dtype=f32, device="CPU"):
    return UOp.buffer(size, dtype, device)


# ---------------------------------------------------------------------------------------------
# ops, families, colours


def test_every_spec_op_exists_in_upper_snake_case():
    names = [
        "PARAM",
        "BUFFER",
        "CONST",
        "BINARY",
        "PERMUTE",
        "FLIP",
        "RESHAPE",
        "EXPAND",
        "PAD",
        "SHRINK",
        "INDEX",
        "STACK",
        "REPLICATED",
        "SLICE",
        "BITCAST",
        "REDUCE",
        "FUNCTION",
        "CALL",
        "TUPLE",
        "GET_TUPLE",
        "LOAD",
        "STORE",
        "RANGE",
        "END",
        "AFTER",
        "GROUP",
        "SINK",
        "LINEAR",
        "RECIP",
        "TRUNC",
        "CAST",
        "ADD",
        "MUL",
        "MAX",
        "MOD",
        "IDIV",
        "CMP_LT",
        "CMP_NE",
        "XOR",
        "OR",
        "AND",
        "SHR",
        "SHL",
        "WHERE",
        "NEG",
        "SUB",
        "DIV",
        "CMP_GT",
        "CMP_GE",
        "CMP_LE",
        "CMP_EQ",
        "NOT",
        "EXP2",
        "LOG2",
        "SIN",
        "SQRT",
        "POW",
        "MULACC",
        "THREEFRY",
        "CONTIGUOUS",
        "CONTIGUOUS_BACKWARD",
        "DETACH",
        "BARRIER",
        "INS",
        "SPECIAL",
        "IF",
        "ENDIF",
        "WMMA",
        "CUSTOM",
        "ATOMIC_ADD",
        "CUSTOM_FUNCTION",
        "PROGRAM",
        "SOURCE",
        "COPY",
    ]
    for name in names:
        assert hasattr(Ops, name), name


@pytest.mark.parametrize(
    "family,color",
    [
        (OpFamily.MOVEMENT, "#2E7D32"),
        (OpFamily.REDUCE, "#C62828"),
        (OpFamily.ELEMENTWISE, "#F9A825"),
        (OpFamily.CALL, "#1565C0"),
        (OpFamily.STORE, "#7B1FA2"),
        (OpFamily.LOAD, "#C08080"),
        (OpFamily.ORDERING, "#795548"),
        (OpFamily.MARKER, "#E65100"),
    ],
)
def test_family_colours_are_the_specs(family, color):
    assert family.color.upper() == color.upper()


@pytest.mark.parametrize(
    "op,family",
    [
        (Ops.ADD, OpFamily.ELEMENTWISE),
        (Ops.THREEFRY, OpFamily.ELEMENTWISE),
        (Ops.RESHAPE, OpFamily.MOVEMENT),
        (Ops.BITCAST, OpFamily.MOVEMENT),
        (Ops.REDUCE, OpFamily.REDUCE),
        (Ops.GET_TUPLE, OpFamily.CALL),
        (Ops.LOAD, OpFamily.LOAD),
        (Ops.COPY, OpFamily.LOAD),
        (Ops.STORE, OpFamily.STORE),
        (Ops.RANGE, OpFamily.ORDERING),
        (Ops.SINK, OpFamily.ORDERING),
        (Ops.DETACH, OpFamily.MARKER),
        (Ops.WMMA, OpFamily.CODEGEN),
        (Ops.CONST, OpFamily.SOURCE),
    ],
)
def test_op_family(op, family):
    assert op.family is family


@pytest.mark.parametrize(
    "axis_type,letter,color",
    [
        (AxisType.GLOBAL, "g", "#1565C0"),
        (AxisType.LOCAL, "l", "#00838F"),
        (AxisType.WARP, "w", "#00ACC1"),
        (AxisType.THREAD, "t", "#42A5F5"),
        (AxisType.LOOP, "L", "#616161"),
        (AxisType.REDUCE, "R", "#C62828"),
        (AxisType.GROUP_REDUCE, "G", "#E53935"),
        (AxisType.UPCAST, "u", "#F9A825"),
        (AxisType.UNROLL, "r", "#7B1FA2"),
    ],
)
def test_axis_types(axis_type, letter, color):
    assert axis_type.letter == letter and axis_type.color == color
    assert AxisType.from_letter(letter) is axis_type


def test_dtypes_ranges():
    assert (dtypes.int8.min, dtypes.int8.max) == (-128, 127)
    assert (dtypes.uint16.min, dtypes.uint16.max) == (0, 65535)
    assert dtypes.int64.max == 2**63 - 1 and dtypes.uint64.max == 2**64 - 1
    assert dtypes.float32.itemsize == 4 and dtypes.bfloat16.itemsize == 2 and dtypes.bool.itemsize == 1
    assert dtypes.float32.min == -math.inf
    vec = dtypes.float32.vec(4)
    assert vec.count == 4 and vec.scalar is dtypes.float32 and vec.itemsize == 16
    ptr = dtypes.float32.ptr(64, uv.AddrSpace.LOCAL)
    assert ptr.base is dtypes.float32 and ptr.addrspace is uv.AddrSpace.LOCAL and ptr.size == 64


# ---------------------------------------------------------------------------------------------
# hash-consing and immutability


def test_structurally_equal_uops_are_the_same_object():
    a = buf()
    assert a.reshape((4, 4)) is a.reshape((4, 4))
    assert UOp.const(i32, 3) is UOp.const(i32, 3)
    assert UOp.const(i32, 3) is not UOp.const(dtypes.int64, 3)
    assert (a + 1.0) is (a + 1.0)
    assert UOp(Ops.RESHAPE, (a,), (4, 4)) is a.reshape((4, 4))


def test_distinct_buffers_and_ranges_stay_distinct():
    assert buf() is not buf()
    assert UOp.range(8) is not UOp.range(8)
    assert UOp.range(8, number=1) is UOp.range(8, number=1)


def test_signed_zero_and_nan_constants_are_not_merged():
    assert UOp.const(f32, 0.0) is not UOp.const(f32, -0.0)
    assert math.copysign(1, UOp.const(f32, -0.0).const_value) == -1


def test_uops_are_immutable():
    u = UOp.const(i32, 1)
    with pytest.raises(AttributeError):
        u.arg = 5


def test_cache_does_not_leak():
    gc.collect()
    before = live_uop_count()
    x = UOp.range(10)
    for i in range(2000):
        x = x * 3 + i
    assert live_uop_count() > before + 2000
    del x
    gc.collect()
    assert live_uop_count() <= before + 5


def test_uop_has_no_truth_value():
    with pytest.raises(TypeError):
        bool(UOp.const(i32, 1) == UOp.const(i32, 1))


def test_pickle_round_trip_keeps_identity():
    u = (buf().reshape((4, 4)) + 1.0).reduce(Ops.ADD, (1,))
    assert pickle.loads(pickle.dumps(u)) is u


# ---------------------------------------------------------------------------------------------
# derived-property table, row by row


def test_row_buffer():
    b = buf(16, dtypes.int16, "CPU")
    assert b.dtype is dtypes.int16 and b.shape == (16,) and b.device == "CPU"
    assert b.min_max == (-32768, 32767) and b.axis is None


def test_row_buffer_on_n_tuple_device():
    b = UOp.buffer(8, f32, ("CPU:0", "CPU:1", "CPU:2"))
    assert b.shape == (24,) and b.device == ("CPU:0", "CPU:1", "CPU:2") and b.axis == 0


def test_row_const():
    c = UOp.const(i32, 7)
    assert c.dtype is i32 and c.shape == () and c.device is None and c.min_max == (7, 7)


def test_row_param():
    p = UOp.param(0, (3, 5), f32, "CPU")
    assert p.dtype is f32 and p.shape == (3, 5) and p.device == "CPU" and p.min_max == (-math.inf, math.inf)


@pytest.mark.parametrize(
    "build,shape",
    [
        (lambda t: t.reshape((2, 8)), (2, 8)),
        (lambda t: t.reshape((4, 4)).permute((1, 0)), (4, 4)),
        (lambda t: t.reshape((1, 16)).expand((3, 16)), (3, 16)),
        (lambda t: t.pad((2,), (20,)), (20,)),
        (lambda t: t.shrink((3,), (5,)), (5,)),
        (lambda t: t.flip((True,)), (16,)),
        (lambda t: t.reshape((4, 4)).replicated((0,)), (1, 4)),
    ],
)
def test_rows_movement_ops(build, shape):
    t = UOp.buffer(16, dtypes.uint8, "GPU")
    moved = build(t)
    assert moved.shape == shape and moved.dtype is dtypes.uint8 and moved.device == "GPU"
    assert moved.min_max == (0, 255)


def test_row_movement_min_max_follows_source():
    r = UOp.range(5)
    assert UOp(Ops.STACK, (r, r)).min_max == (0, 4)


def test_row_reduce():
    t = buf(24, dtypes.int8).reshape((2, 3, 4))
    r = t.reduce(Ops.ADD, (1,))
    assert r.shape == (2, 1, 4) and r.dtype is dtypes.int8 and r.device == "CPU" and r.min_max == (-128, 127)
    assert t.reduce(Ops.MAX, (0, 2)).shape == (1, 3, 1)


def test_row_cast_clamps_to_dtype():
    r = UOp.range(1000)
    assert r.cast(dtypes.uint8).min_max == (0, 255)
    assert r.cast(dtypes.int32).min_max == (0, 999)
    assert (UOp.const(f32, -3.5)).cast(dtypes.uint8).min_max == (0, 0)
    c = buf().cast(i32)
    assert c.dtype is i32 and c.shape == (16,) and c.device == "CPU"


def test_row_bitcast():
    b = buf(4, i32).bitcast(f32)
    assert b.dtype is f32 and b.shape == (4,) and b.min_max == (-math.inf, math.inf)


def test_row_copy():
    b = buf(8)
    c = b.copy_to("GPU")
    assert c.dtype is f32 and c.shape == (8,) and c.device == "GPU" and c.axis is None
    r = UOp(Ops.COPY, (UOp.range(4),), "CPU")
    assert r.min_max == (0, 3)


def test_row_alu_unary():
    u = UOp(Ops.RECIP, (buf(),))
    assert u.dtype is f32 and u.shape == (16,) and u.device == "CPU" and u.min_max == (-math.inf, math.inf)


def test_row_add_mul_max():
    a, b = UOp.range(4), UOp.range(10)
    assert (a + b).min_max == (0, 12)
    assert (a * b).min_max == (0, 27)
    assert ((a + -3) * (b + -5)).min_max == (-12, 15)  # [-3, 0] * [-5, 4]
    assert (a - 3).min_max == (idx.min, idx.max)  # SUB is "other binary" in the table
    assert a.maximum(b).min_max == (0, 9)
    assert (a + 5).maximum(b).min_max == (5, 9)


def test_row_add_overflow_falls_back_to_dtype_range():
    big = UOp.const(dtypes.int8, 100)
    assert (UOp.range(100).cast(dtypes.int8) + big).min_max == (-128, 127)


def test_row_other_binary_is_dtype_range():
    a = UOp.range(4).cast(i32)
    assert (a // 2).min_max == (i32.min, i32.max)
    assert (a ^ 1).min_max == (i32.min, i32.max)


def test_rows_comparisons_from_intervals():
    a = UOp.range(4)
    assert (a < 10).min_max == (True, True)
    assert (a < 0).min_max == (False, False)
    assert (a < 2).min_max == (False, True)
    assert a.ne(7).min_max == (True, True)
    assert UOp.const(idx, 3).ne(3).min_max == (False, False)
    assert (a < 2).dtype is dtypes.bool


def test_row_where():
    a, b = UOp.range(4), UOp.range(10) + 20
    assert (a < 2).where(a, b).min_max == (0, 29)
    assert (a < 100).where(a, b).min_max == (0, 3)
    w = (buf(4) < 0.0).where(buf(4), buf(4))
    assert w.dtype is f32 and w.shape == (4,)


def test_row_range():
    r = UOp.range(16, AxisType.REDUCE)
    assert r.dtype is idx and r.shape == () and r.device is None and r.min_max == (0, 15)


def test_row_index():
    t = buf(12).reshape((3, 4))
    row = t.index(UOp.const(idx, 1))
    assert row.shape == (4,) and row.dtype is f32 and row.device == "CPU"
    gathered = t.index(UOp.buffer(5, i32))
    assert gathered.shape == (5, 4)


def test_row_store_and_after():
    b = buf(4)
    s = UOp(Ops.STORE, (b, buf(4)))
    assert s.dtype is dtypes.void and s.shape == () and s.device == "CPU"
    after = UOp(Ops.AFTER, (b, s))
    assert after.dtype is f32 and after.shape == (4,) and after.device == "CPU"


def test_row_function_and_call():
    x = buf(4)
    p = UOp.param(0, (4,), f32)
    body = UOp(Ops.TUPLE, (p + 1.0,))
    fn = UOp(Ops.FUNCTION, (body, x))
    out = UOp(Ops.GET_TUPLE, (fn,), 0)
    assert out.shape == (4,) and out.dtype is f32
    assert fn.device == "CPU"


def test_row_binary_and_stack():
    assert UOp(Ops.BINARY, (), b"abc").shape == (3,)
    assert UOp(Ops.BINARY, (), b"abc").dtype is dtypes.uint8
    s = UOp(Ops.STACK, (buf(3), buf(3)))
    assert s.shape == (2, 3)


def test_broadcast_right_aligns():
    a = buf(12).reshape((3, 4))
    b = buf(4)
    assert (a + b).shape == (3, 4)
    assert (a + UOp.const(f32, 2.0)).shape == (3, 4)
    assert (buf(3).reshape((3, 1)) + b).shape == (3, 4)


# ---------------------------------------------------------------------------------------------
# axis (multi-device sharding)

DEVICES = ("CPU:0", "CPU:1")


def test_axis_follows_reshape_permute_and_dies_on_reduce():
    t = UOp.buffer(6, f32, DEVICES)  # (12,) axis 0
    r = t.reshape((2, 6))
    assert r.axis == 0
    p = r.permute((1, 0))
    assert p.axis == 1
    assert p.reduce(Ops.ADD, (1,)).axis is None
    assert p.reduce(Ops.ADD, (0,)).axis == 1
    assert r.replicated((0,)).axis is None
    assert (r + 1.0).axis == 0
    assert r.copy_to("CPU").axis is None
    assert buf(4).copy_to(DEVICES).axis == 0


# ---------------------------------------------------------------------------------------------
# validation errors name the op and the shapes


@pytest.mark.parametrize(
    "build,fragments",
    [
        (lambda: buf(16).reshape((5, 3)), ["RESHAPE", "(16,)", "(5, 3)"]),
        (lambda: buf(16).reshape((4, 4)).permute((0, 0)), ["PERMUTE", "(0, 0)", "(4, 4)"]),
        (lambda: buf(16).reshape((4, 4)).expand((4, 8)), ["EXPAND", "axis 1", "(4, 8)"]),
        (lambda: buf(16).reshape((4, 4)) + buf(3), ["ADD", "(4, 4)", "(3,)"]),
        (lambda: buf(4) + buf(4, i32), ["ADD", "float32", "int32"]),
        (lambda: buf(4).pad((1,), (4,)), ["PAD", "offset 1"]),
        (lambda: buf(4).shrink((2,), (3,)), ["SHRINK", "exceed"]),
        (lambda: buf(4).reduce(Ops.ADD, (2,)), ["REDUCE", "axes (2,)"]),
        (lambda: buf(4).reduce(Ops.SUB, (0,)), ["REDUCE", "ADD|MAX|MUL"]),
        (lambda: buf(4, i32).bitcast(dtypes.float64), ["BITCAST", "int32", "float64"]),
        (lambda: buf(4) % buf(4), ["MOD", "integer"]),
        (lambda: UOp(Ops.WHERE, (buf(4), buf(4), buf(4))), ["WHERE", "bool"]),
        (lambda: UOp(Ops.STORE, (buf(4), buf(5))), ["STORE", "(4,)", "(5,)"]),
        (lambda: UOp(Ops.STACK, (buf(3), buf(4))), ["STACK", "match"]),
        (lambda: UOp(Ops.EXP2, (buf(4, i32),)), ["EXP2", "floating"]),
        (lambda: UOp(Ops.ADD, (buf(4),)), ["ADD", "2 sources"]),
        (lambda: buf(4).flip((True, False)), ["FLIP", "flag"]),
        (lambda: UOp(Ops.GET_TUPLE, (buf(4),), 0), ["GET_TUPLE", "TUPLE"]),
        (lambda: UOp(Ops.ADD, (buf(4), 3)), ["ADD", "UOp"]),
        # malformed args are printed as they are in the message (not a TypeError while writing it)
        (lambda: UOp(Ops.RANGE, (UOp.const(dtypes.index, 4),), 5), ["RANGE", "(number, AxisType)", "arg: 5"]),
        (lambda: UOp(Ops.RANGE, (UOp.const(dtypes.index, 4),), (1,)), ["RANGE", "arg: (1,)"]),
        (lambda: UOp(Ops.CONST, (), None), ["CONST", "(value, dtype)", "arg: None"]),
    ],
)
def test_malformed_construction_raises_uop_error(build, fragments):
    with pytest.raises(UOpError) as error:
        build()
    for fragment in fragments:
        assert fragment in str(error.value), (fragment, str(error.value))


# ---------------------------------------------------------------------------------------------
# graph walks and printing


def test_toposort_sources_before_users():
    a = buf(4)
    b = (a + 1.0) * (a + 1.0)
    order = b.toposort()
    position = {u: i for i, u in enumerate(order)}
    for u in order:
        for s in u.src:
            assert position[s] < position[u]
    assert len(order) == len(set(order))


def test_deep_graphs_work_without_recursion():
    x = UOp.range(10)
    for i in range(100_000):
        x = x + (i % 7)
    assert len(x.toposort()) > 100_000
    assert x.min_max[0] >= 0
    assert x.device is None
    assert pickle.loads(pickle.dumps(x)) is x
    assert len(str(x).splitlines()) > 100_000


def test_printer_names_each_node_once():
    a = buf(4)
    b = (a + 1.0) * (a + 1.0)
    text = str(b)
    lines = text.splitlines()
    assert sum("BUFFER" in line for line in lines) == 1
    assert sum(" ADD " in line for line in lines) == 1
    assert lines[-1].startswith("%2 = MUL %1, %1")


def test_to_networkx():
    a = buf(4)
    g = ((a + 1.0) * a).to_networkx()
    assert isinstance(g, nx.DiGraph)
    assert nx.is_directed_acyclic_graph(g)
    assert {d["op"] for _, d in g.nodes(data=True)} >= {"BUFFER", "ADD", "MUL", "CONST"}


def test_random_graphs_hash_cons_when_rebuilt():
    rng = random.Random(0)

    def build(seed):
        r = random.Random(seed)
        nodes = [UOp.range(8, number=1), UOp.range(3, number=2)]
        for _ in range(200):
            a, b = r.choice(nodes), r.choice(nodes)
            nodes.append(r.choice([a + b, a * b, a.maximum(b), a + r.randint(0, 5)]))
        return nodes[-1]

    seed = rng.randint(0, 1000)
    assert build(seed) is build(seed)
