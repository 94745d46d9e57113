"""Probe round 7, the bindings and session side: what PopXL's tests and tools read through
``popart._internal.ir`` (the IR as PopART's JSON, the Ir's ``DataFlow``, a variable's
``VariableSettings``, the graphs an op calls) and how a ``Session`` makes its device and
engine (PopXL's ``_to_device_info``, the Ir's ``SessionOptions.engineOptions``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import popart
import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from tremula.errors import EngineError


def test_ir_serialise_gives_popart_ir_json() -> None:
    """``ir._pb_ir.serialise(_ir.Ir.SerialiseFormat.JSON)``: PopART's IR JSON, the main
    graph under ``"maingraph"`` and each subgraph under its id, ops in schedule order with
    their type and their inputs' and outputs' ids, shapes and data types."""

    def body(t: popxl.Tensor) -> popxl.Tensor:
        return ops.relu(t) * 2

    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        a = popxl.variable(np.ones((2, 3), np.float32), name="a")
        g = ir.create_graph(body, a)
        (out,) = ops.call(g, a)
        ops.cast(out, popxl.float16)
    got = json.loads(ir._pb_ir.serialise(_ir.Ir.SerialiseFormat.JSON))
    assert set(got) == {"maingraph", g.id}
    assert [op["type"] for op in got["maingraph"]] == ["Call", "Cast"]
    assert [op["type"] for op in got[g.id]] == ["Relu", "Mul"]
    call = got["maingraph"][0]
    assert call["inputs"] == [{"name": "a", "shape": "[2 3]", "type": "FLOAT"}]
    assert [t["name"] for t in call["outputs"]] == [out.id]
    assert got["maingraph"][1]["outputs"][0]["type"] == "FLOAT16"
    assert json.loads(ir._pb_ir.serialise()) == got  # JSON is the default


def test_ir_data_flow_holds_num_host_transfers() -> None:
    """PopXL keeps ``num_host_transfers`` as the batches per step of the Ir's PopART
    ``DataFlow``; a PopXL Ir anchors no tensor (its host transfers are streams)."""
    ir = popxl.Ir()
    flow = ir._pb_ir.getDataFlow()
    assert flow.batchesPerStep() == 1 and flow.nAnchors() == 0 and flow.anchors() == []
    ir.num_host_transfers = 5
    assert flow.batchesPerStep() == 5
    flow.setBatchesPerStep(3)
    assert ir.num_host_transfers == 3 and ir._pb_ir.getDataFlow().batchesPerStep() == 3
    with pytest.raises(popart.popart_exception, match="Batches per step"):
        flow.setBatchesPerStep(0)
    assert ir.num_host_transfers == 3


@pytest.mark.parametrize("desc", ["gpu", "IPU_MODEL", "ipu"])
def test_session_refuses_an_unknown_device_as_popxl_to_device_info_does(desc) -> None:
    """``Session`` makes its device with ``popxl.utils._to_device_info``, so an unknown
    ``device_desc`` raises its error; the Ir is not marked prepared."""
    ir = popxl.Ir()
    with pytest.raises(ValueError, match="Incorrect device type provided") as info:
        popxl.Session(ir, desc)
    assert str(info.value) == str(_raised(lambda: popxl.utils._to_device_info(desc)))
    assert not ir._pb_ir.isPrepared()


def _raised(fn) -> BaseException:
    with pytest.raises(Exception) as info:
        fn()
    return info.value


@pytest.mark.parametrize(
    "stride, group_size, mode",
    [(1, 4, "one_per_group"), (1, 2, "all_replicas"), (2, 2, "one_per_group"), (1, 1, None)],
)
def test_variable_settings_of_a_grouped_variable(stride, group_size, mode) -> None:
    """``v._pb_tensor.getVariableSettings()`` is what ``popxl.variable`` gives PopART:
    ``replica_grouping._to_variable_settings(retrieval_mode)``; its counts follow the
    grouping (one host row per group, the replicas that return the variable)."""
    ir = popxl.Ir(replication=4)
    rg = ir.replica_grouping(stride=stride, group_size=group_size)
    data = np.zeros((rg.num_groups, 3) if rg.num_groups > 1 else (3,), np.float32)
    with ir.main_graph:
        v = popxl.variable(data, replica_grouping=rg, retrieval_mode=mode, name="v")
        c = popxl.constant(1.0)
    vs = v._pb_tensor.getVariableSettings()
    want_mode = popart.VariableRetrievalMode.AllReplicas
    if mode in (None, "one_per_group"):
        want_mode = popart.VariableRetrievalMode.OnePerGroup
    assert vs.getRetrievalMode() == want_mode
    assert (vs.getStride(), vs.getGroupCount(4)) == (rg.stride, rg.num_groups)
    assert list(vs.shapeOnReplica(list(v.shape_on_host), 4, v.id)) == [3]
    returning = 4 if want_mode == popart.VariableRetrievalMode.AllReplicas else rg.num_groups
    assert vs.numReplicasReturningVariable(4) == returning
    with pytest.raises(popart.popart_exception, match="only variables"):
        c._pb_tensor.getVariableSettings()


def test_ops_report_the_ids_of_the_graphs_they_call() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        g = ir.create_graph(lambda t: t + 1, a)
        ops.call(g, a)
        ops.repeat(g, 2, a)
        a + 1
    call, loop, add = ir.main_graph._pb_graph.getOps()
    assert call.getCalledGraphIds() == [_ir.GraphId(g.id)]
    (wrapper,) = loop.getCalledGraphIds()
    assert wrapper == loop.getCalledGraphs()[0].id and wrapper.str().startswith(g.id)
    assert add.getCalledGraphIds() == []
    assert call.getCalledGraphIndex(_ir.GraphId(g.id)) == 0 == loop.getCalledGraphIndex(wrapper)
    with pytest.raises(popart.popart_exception, match="does not call graph"):
        add.getCalledGraphIndex(_ir.GraphId(g.id))


def test_session_uses_the_irs_engine_options(tmp_path) -> None:
    """PopXL's session makes its Poplar engine with the Ir's PopART
    ``SessionOptions.engineOptions`` (what programs set to get profiles); an option Tremula
    does not know is refused when the session is made, naming it."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(4, np.float32), name="x")
        d = popxl.d2h_stream(x.shape, x.dtype, "d")
        ops.host_store(d, x * 2)
    opts = ir._pb_ir.getSessionOptions()
    opts.engineOptions["autoReport.all"] = "true"
    opts.engineOptions["autoReport.directory"] = str(tmp_path)
    session = popxl.Session(ir, "ipu_model")
    assert json.loads((tmp_path / "graph.json").read_text())
    with session:
        np.testing.assert_array_equal(session.run()[d], [2.0] * 4)
    opts.engineOptions["not.an.option"] = "1"
    with pytest.raises(EngineError, match=r"unknown engine option.*not\.an\.option"):
        popxl.Session(ir, "ipu_model")


@pytest.mark.parametrize(
    "options",
    [
        {"target.syncReplicasIndependently": "true"},  # what GPT-J's and BERT's scripts set
        {"opt.internalExchangeOptimisationTarget": "balanced", "opt.maxCompilationThreads": 2},
        {"target.deterministicWorkers": "true", "exchange.streamBufferOverlap": "none"},
        {"target.extendedMemory": "true"},  # BERT's benchmarks.yml, POPLAR_ENGINE_OPTIONS
        {"streamCallbacks.maxLookahead": "unlimited", "streamCallbacks.numaAware": "true"},
    ],
)
def test_session_accepts_poplar_engine_options_the_model_does_not_charge(options) -> None:
    """Poplar options for compiler effort, host threads or exchange tuning are accepted, as
    Poplar accepts them, and change nothing: the same result and cycles as without them."""

    def run(engine_options: dict) -> tuple[np.ndarray, int]:
        ir = popxl.Ir()
        with ir.main_graph:
            x = popxl.variable(np.arange(6, dtype=np.float32), name="x")
            d = popxl.d2h_stream(x.shape, x.dtype, "d")
            ops.host_store(d, ops.exp(x) + x)
        ir._pb_ir.getSessionOptions().engineOptions.update(engine_options)
        session = popxl.Session(ir, "ipu_model")
        with session:
            out = session.run()[d]
            return out, session._engine.run_cycles(0)

    out, cycles = run(options)
    want_out, want_cycles = run({})
    np.testing.assert_allclose(out, np.exp(np.arange(6.0)) + np.arange(6.0), rtol=1e-6)
    np.testing.assert_array_equal(out, want_out)
    assert cycles == want_cycles
