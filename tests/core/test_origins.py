"""The origins side table (uopviz/core/origins.py): which user-level call built each node."""

from __future__ import annotations

import numpy as np

import uopviz as uv
from uopviz.core.dtype import dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.origins import (
    MAX_ORIGINS,
    Origin,
    carry_origins,
    origin_of,
    origins_of,
    record_nnef_operation,
    record_origin,
)
from uopviz.core.uop import UOp


def test_a_tensor_method_names_itself_and_the_users_line():
    x = uv.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    line = test_a_tensor_method_names_itself_and_the_users_line.__code__.co_firstlineno + 3  # y = ...
    y = x.exp().sum(axis=1)
    built = origin_of(y.uop)
    assert built is not None and (built.kind, built.name) == ("tensor", "sum")
    assert built.location == f"{__file__}:{line}" and built.describe() == f"Tensor.sum at {__file__}:{line}"
    assert origin_of(x.uop).name == "Tensor" and origin_of(x.uop).describe().startswith("Tensor(...) at ")
    # exp's own nodes are exp's: sum's call stopped at its input
    exp_nodes = [u for u in y.uop.toposort() if u.op is Ops.EXP]  # one node until Instruction Selection
    assert exp_nodes and all(origin_of(u).name == "exp" for u in exp_nodes)


def test_calls_inside_a_method_are_part_of_it():
    x = uv.Tensor(np.ones((2, 4), dtype=np.float32))
    y = x.softmax(axis=1)  # softmax calls max, exp, sum, div inside
    given = {id(u) for u in x.uop.toposort()}
    built = [u for u in y.uop.toposort() if id(u) not in given and u.op is not Ops.CONST]
    assert built and all("softmax" in {o.name for o in origins_of(u)} for u in built)
    assert origin_of(y.uop).name == "softmax"


def test_a_shared_node_keeps_each_calls_origin_the_first_first():
    one = UOp.const(dtypes.float32, 1234.5678)  # a node no other test builds
    first, second = Origin("tensor", "a"), Origin("tensor", "b")
    record_origin(one, first)
    record_origin(one, second)
    assert [o.name for o in origins_of(one)][:2] == ["a", "b"] and origin_of(one).name == "a"
    assert origins_of(one)[1].returned() == [one]  # what the call returned, weakly
    for index in range(MAX_ORIGINS + 5):
        record_origin(one, Origin("tensor", f"c{index}"))
    kept = origins_of(one)
    assert len(kept) == MAX_ORIGINS and kept[0].name == "a" and kept[-1].name == f"c{MAX_ORIGINS + 4}"


def test_recording_stops_at_the_inputs():
    a = UOp.const(dtypes.int32, 30303)
    b = a + UOp.const(dtypes.int32, 40404)
    record_origin(b, Origin("tensor", "add"), inputs=[a])
    assert origin_of(b).name == "add" and all(o.name != "add" for o in origins_of(a))


def test_carried_origins_follow_a_rebuilt_graph():
    r = UOp.range(4, AxisType.LOOP, 77)
    value = r * 2 + 1
    record_nnef_operation([value], "y", "nn.relu", "model.sknd", 12)
    renamed = UOp.range(4, AxisType.LOOP, 78)
    rebuilt = renamed * 2 + 1
    carry_origins(value, rebuilt)
    assert origin_of(rebuilt).describe() == "NNEF y = nn.relu at model.sknd:12"
    assert origin_of(renamed).operator == "nn.relu"


def test_namespaces_on_the_tensor_class_are_left_alone():
    from uopviz.core.collectives import allreduce

    assert uv.Tensor.collectives.allreduce is allreduce
    assert uv.Tensor.exp.__wrapped__.__name__ == "exp"
