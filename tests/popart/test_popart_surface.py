"""The small PopART names (enums, logger, devices, options, TensorInfo, exceptions) and
PopXL's Session on a ``popart.DeviceInfo``."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops
import tremula.errors
import tremula.popart as tremula_popart


def test_exceptions_are_tremulas() -> None:
    assert popart.popart_exception is tremula.errors.PopartException
    assert popart.poplar_application_runtime_error is tremula.errors.ApplicationRuntimeError
    assert issubclass(popart.popart_internal_exception, popart.popart_exception)
    assert issubclass(popart.popart_runtime_error, popart.popart_exception)
    assert popart.popart_exception is tremula_popart.popart_exception
    # PopART's exception subclasses Exception, not RuntimeError (spec: popxl-fidelity)
    assert issubclass(popart.popart_exception, Exception)
    assert not issubclass(popart.popart_exception, RuntimeError)


@pytest.mark.parametrize(
    ("enum", "values"),
    [
        ("CommGroupType", {"All": 0, "Consecutive": 1, "Orthogonal": 2, "Ungrouped": 3}),
        ("VariableRetrievalMode", {"OnePerGroup": 0, "AllReduceReplicas": 1, "AllReplicas": 2}),
        ("AnchorReturnTypeId", {"Final": 0, "EveryN": 1, "All": 2, "Sum": 3}),
        ("ReductionType", {"Sum": 0, "Mean": 1, "NoReduction": 2}),
        ("SyncPattern", {"Full": 0, "SinglePipeline": 1, "ReplicaAndLadder": 2}),
        ("DataType", {"UINT8": 0, "INT32": 4, "FLOAT": 9, "FLOAT16": 10, "UNDEFINED": 18}),
    ],
)
def test_enum_values(enum: str, values: dict[str, int]) -> None:
    cls = getattr(popart, enum)
    assert {k: int(getattr(cls, k)) for k in values} == values


def test_enum_str() -> None:
    assert str(popart.DataType.FLOAT) == "DataType.FLOAT"
    assert popart.DataType.FLOAT16.name == "FLOAT16"


def test_logger(capsys: pytest.CaptureFixture[str]) -> None:
    log = popart.getLogger()
    log.setLevel("DEBUG")
    try:
        log.info("hello from the test")
        assert "hello from the test" in capsys.readouterr().err
        with pytest.raises(ValueError, match="unknown level 'LOUD'"):
            log.setLevel("LOUD")
    finally:
        log.setLevel("OFF")
    log.info("not shown")
    assert "not shown" not in capsys.readouterr().err
    assert logging.getLogger("popart.session").level == 60


def test_device_manager() -> None:
    dm = popart.DeviceManager()
    assert dm is popart.DeviceManager()
    d = dm.createIpuModelDevice({"numIPUs": "2", "tilesPerIPU": 16})
    assert (d.numIpus, d.tilesPerIPU, d.type, d.version) == (
        2,
        16,
        popart.DeviceType.IpuModel,
        "ipu2",
    )
    with d:
        assert d.isAttached
    assert not d.isAttached
    avail = dm.acquireAvailableDevice(4)
    assert (avail.numIpus, avail.tilesPerIPU) == (4, 1472)
    assert dm.createCpuDevice().type == popart.DeviceType.Cpu
    with pytest.raises(popart.popart_exception, match="unknown options \\['numIpus'\\]"):
        dm.createIpuModelDevice({"numIpus": 2})
    with pytest.raises(popart.popart_exception, match="cannot attach"):
        dm.createOfflineIPUDevice({"numIPUs": 1}).attach()


def test_session_options() -> None:
    opts = popart.SessionOptions()
    assert (opts.replicatedGraphCount, opts.constantWeights, opts.accumulationFactor) == (
        1,
        True,
        1,
    )
    assert opts.accumulationAndReplicationReductionType == popart.ReductionType.Sum
    opts.replicatedGraphCount = 4
    assert opts.getGlobalReplicationFactor() == 1  # replication not enabled
    opts.enableReplicatedGraphs = True
    assert opts.getGlobalReplicationFactor() == 4
    opts.enablePipelining = True
    assert opts.ignored_changes() == {"enablePipelining": True}
    with pytest.raises(AttributeError, match="no option 'replicatedGraphCnt'"):
        opts.replicatedGraphCnt = 2
    loc = popart.TensorLocationSettings(popart.TensorLocation(popart.TensorStorage.OffChip), 0)
    assert loc.location.storage == popart.TensorStorage.OffChip
    # PopART's (storage, replicatedTensorSharding) and (storage, loadTileSet,
    # storageTileSet, replicatedTensorSharding) constructors
    rts = popart.TensorLocation(popart.TensorStorage.OffChip, popart.ReplicatedTensorSharding.On)
    assert (rts.storage, rts.replicatedTensorSharding, rts.loadTileSet) == (
        popart.TensorStorage.OffChip,
        popart.ReplicatedTensorSharding.On,
        popart.TileSet.Compute,
    )
    io = popart.TensorLocation(
        popart.TensorStorage.OnChip,
        popart.TileSet.IO,
        popart.TileSet.Compute,
        popart.ReplicatedTensorSharding.On,
    )
    assert (io.loadTileSet, io.storageTileSet) == (popart.TileSet.IO, popart.TileSet.Compute)
    assert io.replicatedTensorSharding == popart.ReplicatedTensorSharding.On


def test_tensor_info() -> None:
    info = popart.TensorInfo("FLOAT16", [2, 3])
    assert (info.shape(), info.rank(), info.nelms(), info.nbytes()) == ([2, 3], 2, 6, 12)
    assert (info.data_type(), info.data_type_lcase()) == ("FLOAT16", "float16")
    assert info.dataType() == popart.DataType.FLOAT16
    assert popart.TensorInfo(np.zeros((4,), np.int32)) == popart.TensorInfo("INT32", [4])
    assert popart.TensorInfo(np.float32, [1]) == popart.TensorInfo("FLOAT", [1])
    assert str(popart.TensorInfo("FLOAT", [2, 3])) == "FLOAT   [2 3]"
    with pytest.raises(popart.popart_exception, match="not a data type"):
        popart.TensorInfo("FLOAT7", [2])


def test_popxl_session_on_popart_device() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(
            np.array([[1.0, 2.0], [3.0, 4.0]], np.float32),
            replica_grouping=ir.replica_grouping(group_size=1),
        )
        s = popxl.d2h_stream((2,), popxl.float32, "out")
        ops.host_store(s, x + 1.0)
    device = popart.DeviceManager().createIpuModelDevice({"numIPUs": 2, "tilesPerIPU": 4})
    with popxl.Session(ir, device) as session:
        out = session.run()[s]
    np.testing.assert_array_equal(out, [[2.0, 3.0], [4.0, 5.0]])
    with pytest.raises(ValueError, match=r"has 1 IPU.*needs a multiple of 2"):
        popxl.Session(ir, popart.DeviceManager().createCpuDevice())
