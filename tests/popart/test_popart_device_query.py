"""PopART's device query and ``DataFlow`` keywords as PopXL's and PopART's tests use them:
``DeviceManager().enumerateDevices(numIpus=n)`` reports the IPU Models of a modelled
IPU-POD16 where the SDK would report hardware (so tests for hardware run on the IPU
Model), and ``DataFlow(batchesPerStep=, anchorTensors=)`` / ``anchorIds=``."""

from __future__ import annotations

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops


@pytest.mark.parametrize("n, count, first_id", [(1, 16, 0), (2, 8, 16), (4, 4, 24), (16, 1, 30)])
def test_enumerate_devices_reports_a_pod16_of_ipu_models(n: int, count: int, first_id: int):
    devices = popart.DeviceManager().enumerateDevices(numIpus=n)
    assert len(devices) == count
    assert [d.id for d in devices] == list(range(first_id, first_id + count))
    assert all(d.numIpus == n and d.type == popart.DeviceType.Ipu for d in devices)
    assert all(d.tilesPerIPU == 1472 and d.version == "ipu2" for d in devices)


def test_enumerate_devices_of_no_such_size_or_type_is_empty() -> None:
    dm = popart.DeviceManager()
    assert dm.enumerateDevices(numIpus=3) == [] and dm.enumerateDevices(numIpus=32) == []
    assert dm.enumerateDevices(deviceType=popart.DeviceType.IpuModel) == []
    assert len(dm.enumerateDevices()) == 16  # numIpus=1 by default, as in PopART


def test_an_enumerated_device_runs_a_popxl_session() -> None:
    (device,) = popart.DeviceManager().enumerateDevices(numIpus=2)[:1]
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.arange(3, dtype=np.float32), name="x")
        s = popxl.d2h_stream((3,), popxl.float32)
        ops.host_store(s, ops.collectives.replicated_all_reduce(x))
    with popxl.Session(ir, device) as session:
        out = session.run()[s]
    np.testing.assert_array_equal(out, np.stack([2 * np.arange(3)] * 2))


def test_dataflow_takes_popart_s_keywords() -> None:
    final = popart.AnchorReturnType("Final")
    df = popart.DataFlow(batchesPerStep=4, anchorTensors={"a": final, "b": final})
    assert df.anchors() == ["a", "b"] and df.batchesPerStep() == 4
    assert df.art("a").id() == popart.AnchorReturnTypeId.Final
    df = popart.DataFlow(2, anchorIds=["x"], anchorReturnType=popart.AnchorReturnType("Sum"))
    assert df.art("x").id() == popart.AnchorReturnTypeId.Sum
    assert popart.DataFlow(1, anchorIds=["x"]).art("x").id() == popart.AnchorReturnTypeId.All
    with pytest.raises(TypeError, match="anchors are given twice"):
        popart.DataFlow(1, ["x"], anchorTensors={"x": final})
