"""The IR bindings' own types as PopXL's tests and tools read them: ``TensorType`` and
``Tensor.tensorType()``, the PopART classes the bindings own (``VariableSettings``,
``ReplicaGrouping``, ``SessionOptions``, ...) and PopXL's ``ReplicaGrouping`` helpers
that make them, against PopART's definitions (spec popart.md 2.2-2.4, popxl.md 2.4)."""

from __future__ import annotations

import numpy as np
import pytest

import popart
import popart._internal.ir as _ir
import popxl
import popxl.ops as ops


def test_tensor_type_enum_is_popart_s() -> None:
    # PopART's C++ enum order: ActGrad, Const, Stream, Unknown, Variable
    names = ["ActGrad", "Const", "Stream", "Unknown", "Variable"]
    assert [m.name for m in _ir.TensorType] == names
    assert [int(m) for m in _ir.TensorType] == list(range(5))


def test_tensor_type_of_each_kind_of_tensor() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.ones(3, np.float32), name="v")
        c = popxl.constant(np.ones(3, np.float32), name="c")
        assert c._pb_tensor.tensorType() == _ir.TensorType.Const
        h2d = popxl.h2d_stream((3,), popxl.float32, name="x_stream")
        d2h = popxl.d2h_stream((3,), popxl.float32, name="y_stream")
        x = ops.host_load(h2d, "x")
        y = x + v
        ops.host_store(d2h, y)
    sub = ir.create_graph(lambda a: a * 2, v)
    kinds = {t.name: t._pb_tensor.tensorType() for t in ir.main_graph.tensors}
    assert kinds["v"] == _ir.TensorType.Variable
    assert kinds["c"] == _ir.TensorType.Const
    assert kinds["x_stream"] == _ir.TensorType.Stream
    assert kinds["y_stream"] == _ir.TensorType.ActGrad  # PopXL adds d2h tensors as ActGrad
    assert kinds["x"] == _ir.TensorType.ActGrad
    assert y._pb_tensor.tensorType() == _ir.TensorType.ActGrad
    assert sub.inputs[0]._pb_tensor.tensorType() == _ir.TensorType.ActGrad


@pytest.mark.parametrize(
    "stride, group_size, mode, want_mode",
    [
        (1, 8, None, "OnePerGroup"),
        (2, 4, "one_per_group", "OnePerGroup"),
        (4, 2, "all_replicas", "AllReplicas"),
        (1, 1, "all_replicas", "AllReplicas"),
    ],
)
def test_replica_grouping_to_variable_settings(
    stride: int, group_size: int, mode: str | None, want_mode: str
) -> None:
    ir = popxl.Ir(replication=8)
    rg = ir.replica_grouping(stride=stride, group_size=group_size)
    vs = rg._to_variable_settings(mode) if mode else rg._to_variable_settings()
    assert isinstance(vs, popart.VariableSettings) and isinstance(vs, _ir.VariableSettings)
    assert vs.isUsingCommGroup() is False
    assert vs.getRetrievalMode() == getattr(popart.VariableRetrievalMode, want_mode)
    # groupSize 1 forces stride 1 (PopART)
    assert (vs.getStride(), vs.getGroupSize()) == (1 if group_size == 1 else stride, group_size)
    assert vs.getGroupCount(8) == rg.num_groups
    # the settings' groups are the grouping's: replica r is in group assignment[r]
    groups = vs.groups(8)
    assert [next(g for g, rs in enumerate(groups) if r in rs) for r in range(8)] == rg.assignment
    returned = 8 if want_mode == "AllReplicas" else rg.num_groups
    assert vs.numReplicasReturningVariable(8) == returned


def test_to_variable_settings_refuses_bad_mode_and_non_constant_grouping() -> None:
    ir = popxl.Ir(replication=4)
    with pytest.raises(ValueError, match="Invalid retrieval_mode value"):
        ir.replica_grouping()._to_variable_settings("all_reduce_replicas")
    nc = ir.replica_grouping_from_assignments([0, 1, 1, 0])
    with pytest.raises(NotImplementedError, match="not a constant-stride grouping"):
        nc._to_variable_settings()


def test_pb_replica_grouping_is_the_bindings_class() -> None:
    ir = popxl.Ir(replication=8)
    pb = ir.replica_grouping(stride=2, group_size=4)._pb_replica_grouping
    assert isinstance(pb, _ir.ReplicaGrouping)
    assert (pb.getNumReplicas(), pb.getStride(), pb.getGroupSize()) == (8, 2, 4)
    assert pb.getReplicasAt(1) == [1, 3, 5, 7]
    assert str(pb) == "ReplicaGrouping(numReplicas=8, stride=2, groupSize=4)"


def test_popart_reads_the_classes_the_ir_owns() -> None:
    for name in ("CommGroup", "CommGroupType", "DataType", "ReplicaGrouping"):
        assert getattr(_ir, name) is getattr(popart._internal.ir, name)
    for name in ("CommGroup", "CommGroupType", "DataType", "VariableRetrievalMode"):
        assert getattr(popart, name) is getattr(_ir, name)
    assert popart.VariableSettings is _ir.VariableSettings
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    assert isinstance(opts, popart.SessionOptions)
    assert opts.enableExplicitMainLoops is True and opts.aliasZeroCopy is True


def test_log_ir_logs_the_ir_as_popart_s_json(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 3), np.float32), name="a")
        sub = ir.create_graph(lambda x: x + 1, a)
        with popxl.ipu(0):
            (b,) = ops.call(sub, a)
        ops.cast(b, popxl.float16)
    ir._pb_ir.logIr()  # silent until PopART's ir logger is at INFO
    assert capsys.readouterr().err == ""
    logger = popart.getLogger("ir")
    logger.setLevel("INFO")
    try:
        ir._pb_ir.logIr()
    finally:
        logger.setLevel("OFF")
    line = capsys.readouterr().err.strip()
    assert line.startswith("[popart:popart.ir] [INFO] ")
    log = json.loads(line.split("[INFO] ", 1)[1])
    assert list(log) == ["maingraph", sub.name]
    call, cast = log["maingraph"]
    assert call["type"] == "Call" and call["attributes"]["graphs"] == f"[{sub.name}]"
    assert call["attributes"]["__ipu_number"] == "0"
    assert call["inputs"] == [{"name": "a", "shape": "[2 3]", "type": "FLOAT"}]
    assert call["outputs"] == [{"name": b.id, "shape": "[2 3]", "type": "FLOAT"}]
    assert cast["type"] == "Cast" and cast["outputs"][0]["type"] == "FLOAT16"
    (add,) = log[sub.name]
    assert add["type"] == "Add" and add["inputs"][0]["name"] == sub.inputs[0].id
