"""Round 8 of PopXL fidelity, ``popart._internal.ir``: what PopXL's own binding tests
(``popart._internal.ir/...``, ``popxl/ir/...``) and programs reaching ``_pb_*`` do with the
bindings (op names and settings, virtual graph ids, tensor kinds and modification, graph
order and call sites, the bound transforms), and what the bindings answer. The op classes'
attribute getters: ``test_popxl_fidelity_round8_op_getters.py``.

Confidence that PopART / PopXL behave so is given per test: *high* where it is PopART's
C++ (``Ir::getAllGraphs`` over a ``std::map``, ``Op::debugName``), *medium* where it rests
on how PopXL names its ops (``_get_op_settings``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import popart
import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from tremula.errors import PopartException

F32 = np.float32


def test_op_names_are_popxl_s_settings_names() -> None:
    """PopXL names an op ``"/".join((*name_scopes, <fn>))`` (``_get_op_settings``), also
    through the bindings with PopXL's settings (medium confidence)."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 2), F32))
        with popxl.name_scope("a"), popxl.name_scope("b"):
            y = ops.softmax(x, 1)
        z = ops.matmul(x, x)
        w = x + 1
    ops_ = [t._pb_tensor.getProducer() for t in (y, z, w)]
    assert [op.name() for op in ops_] == ["a/b/softmax", "matmul", "add"]
    s = ops_[0].settings
    assert (s.name, s.scope, s.schedulePriority) == ("a/b/softmax", "a/b", 0.0)
    assert s.getIr() == ir._pb_ir
    # an op made through the bindings with PopXL's _get_op_settings is named the same way
    from popxl.context import get_current_context

    pb = ir.main_graph._pb_graph
    opid = _ir.OperatorIdentifier("ai.onnx", "Relu", 6, _ir.NumInputs(1, 1), 1)
    with ir.main_graph, popxl.name_scope("c"):
        by_popxl = ops.relu(x)._pb_tensor.getProducer()
        settings = get_current_context()._get_op_settings("relu")
        by_bindings = pb.createConnectedOp_ReluOp({0: x.id}, {0: "r"}, opid, settings)
    assert by_popxl.name() == by_bindings.name() == "c/relu"
    # PopART's IR JSON names each op by its name()
    logged = json.loads(ir._pb_ir.serialise())["maingraph"]
    assert [op["name"] for op in logged] == [op.name() for op in pb.getOpSchedule()]
    assert [op["name"] for op in logged][:3] == ["a/b/softmax", "matmul", "add"]


def _increment_by_ref() -> None:
    t = popxl.graph_input((3,), popxl.float32, "t", by_ref=True)
    ops.add_(t, popxl.constant(1.0, F32))


def test_tensor_is_modified_by_a_consumer_that_writes_it() -> None:
    """``Tensor.isModified()``: a consumer writes it in place (an in-place op, a var
    update, a call taking it by reference); reading it, or making a view, does not
    (high confidence)."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(3, F32), name="a")
        b = popxl.variable(np.ones(3, F32), name="b")
        c = popxl.variable(np.ones(3, F32), name="c")
        d = popxl.variable(np.ones(3, F32), name="d")
        ops.var_updates.accumulate_(a, b)  # writes a, reads b
        ops.reshape_(c, (3, 1))  # a view of c
        g = ir.create_graph(lambda t: ops.add_(t, popxl.constant(1.0, F32)), d)
        ops.call(g, d)
    flags = [t._pb_tensor.isModified() for t in (a, b, c)]
    assert flags == [True, False, False]
    assert d._pb_tensor.isModified() is False  # passed by value
    with ir.main_graph:
        e = popxl.variable(np.ones(3, F32), name="e")
        h = ir.create_graph(_increment_by_ref)
        ops.call(h, e)
    assert e._pb_tensor.isModified()  # its call writes it through the by-ref input
    assert h.inputs[0]._pb_tensor.isModified()  # add_ writes the input inside the graph


def test_all_graphs_come_in_popart_s_graph_id_order() -> None:
    """``Ir.getAllGraphs()`` / ``getAllOps()`` iterate PopART's ``std::map<GraphId, ...>``:
    graphs by id, the main graph (``""``) first, whatever order they were made in; ops by id
    within each (high confidence)."""
    ir = _ir.Ir()
    for gid in ("b", "c", "a"):
        ir.createGraph(_ir.GraphId(gid))
    assert [g.id.str() for g in ir.getAllGraphs()] == ["", "a", "b", "c"]
    xl = popxl.Ir()
    with xl.main_graph:
        x = popxl.variable(np.ones(2, F32))
        late = xl.create_graph(_zz, x)  # made first, sorts last
        early = xl.create_graph(_aa, x)
        ops.call(late, ops.call(early, x)[0])
    ids = [g.id.str() for g in xl._pb_ir.getAllGraphs()]
    assert ids == ["", early.id, late.id] and early.id < late.id
    got = [op.getGraph().id.str() for op in xl._pb_ir.getAllOps()]
    assert got == ["", "", early.id, late.id]  # two calls, then each graph's op


def _zz(t: popxl.Tensor) -> popxl.Tensor:
    return t * 2.0


def _aa(t: popxl.Tensor) -> popxl.Tensor:
    return t + 1.0


def _gradient_graph(ir: popxl.Ir, x: popxl.Tensor) -> tuple[popxl.Graph, Any]:
    fwd = ir.create_graph(lambda a: a * a * a + a * 2.0 + ops.sin(a), x)
    return fwd, popxl.transforms.autodiff(fwd)


def _gradient(ir: popxl.Ir, fwd: popxl.Graph, info: Any, x: popxl.Tensor) -> np.ndarray:
    """Run ``fwd`` on ``x`` and its gradient graph ``info`` on a seed of ones; the gradient
    of ``x``."""
    with ir.main_graph:
        site = ops.call_with_info(fwd, x)
        seed = np.ones(x.shape, F32)
        (grad,) = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(site))
        d2h = popxl.d2h_stream(grad.shape, grad.dtype, name="grad")
        ops.host_store(d2h, grad)
    with popxl.Session(ir, "cpu") as session:
        return session.run()[d2h]


def _sums(graph: popxl.Graph) -> list[int]:
    return [len(op.getInputTensors()) for op in graph._pb_graph.getOps() if op.opType() == "Sum"]


@pytest.mark.parametrize("how", ["apply", "applyTransform"])
def test_decompose_sum_through_the_bindings(how) -> None:
    """PopXL's ``decompose_sum`` is ``_ir.transforms.DecomposeSum().apply(g._pb_graph)``;
    ``Ir.applyTransform(DecomposeSum.id(), g)`` the same. The gradient sums of more than two
    terms become an ``Init`` and in-place additions; the gradient is unchanged (NumPy)."""
    x_np = np.array([0.5, -1.0, 2.0], F32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x_np)
        fwd, info = _gradient_graph(ir, x)
        assert max(_sums(info.graph)) > 2
        pb = info.graph._pb_graph
        if how == "apply":
            assert _ir.transforms.DecomposeSum().apply(pb) is True
        else:
            ir._pb_ir.applyTransform(_ir.transforms.DecomposeSum.id(), pb)
        assert all(n <= 2 for n in _sums(info.graph))
        assert any(isinstance(op, _ir.op.AddLhsInplaceOp) for op in pb.getOps())
    expected = 3 * x_np**2 + 2 + np.cos(x_np)
    np.testing.assert_allclose(_gradient(ir, fwd, info, x), expected, rtol=1e-5)


def test_merge_exchange_through_the_bindings() -> None:
    """``MergeExchange().applyToOps(g, op ids)`` merges those host loads into one
    ``MultiExchangeOp`` (what ``popxl.transforms.merge_exchange`` does at the end of its
    block); the loaded values are unchanged. Unknown ids and a transform id no bound
    transform has are refused by name, leaving the graph as it was."""
    ir = popxl.Ir()
    with ir.main_graph:
        streams = [popxl.h2d_stream((2,), popxl.float32, name=f"s{k}") for k in range(2)]
        loaded = [ops.host_load(s) for s in streams]
        outs = [popxl.d2h_stream((2,), popxl.float32, name=f"o{k}") for k in range(2)]
    pb = ir.main_graph._pb_graph
    loads = [op.id for op in pb.getOps() if op.opType() == "HostLoad"]
    with pytest.raises(PopartException, match="no op of id"):
        _ir.transforms.MergeExchange().applyToOps(pb, {*loads, 999})
    with pytest.raises(PopartException, match="no transform of id 7"):
        ir._pb_ir.applyTransform(7, pb)
    assert sorted(op.opType() for op in pb.getOps()) == ["HostLoad", "HostLoad", "Init", "Init"]
    multi = _ir.transforms.MergeExchange().applyToOps(pb, set(loads))
    assert isinstance(multi, _ir.op.exchange.MultiExchangeOp) and multi.getNumExchanges() == 2
    assert [t._pb_tensor.getProducer() for t in loaded] == [multi, multi]
    with ir.main_graph:
        for out, t in zip(outs, loaded):
            ops.host_store(out, t * 2.0)
    data = {s: np.array([k, k + 0.5], F32) for k, s in enumerate(streams)}
    with popxl.Session(ir, "cpu") as session:
        got = session.run(data)
    for k in range(2):
        np.testing.assert_array_equal(got[outs[k]], 2 * data[streams[k]])


def test_tensor_kind_stream_mode_and_consumer_counts() -> None:
    """``getTensorTypeInfo()`` (``type()``, ``type_s()``), ``getReplicatedStreamMode()``
    (PopART's default ``Replicate``, which PopXL's streams keep: one array per replica),
    ``consumers.n(op)`` (how many of the op's inputs are the tensor), and a ``TensorInfo``
    whose shape is a NumPy array (pybind11 takes any sequence) (medium-high confidence)."""
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.ones(2, F32), name="v")
        s = popxl.h2d_stream((2,), popxl.float32, name="s")
        x = ops.host_load(s, "x")
        y = v * v
        z = v + x
    pv = v._pb_tensor
    assert (pv.getTensorTypeInfo().type(), pv.getTensorTypeInfo().type_s()) == (
        _ir.TensorType.Variable,
        "Variable",
    )
    stream = ir.main_graph._pb_graph.getTensor(s.tensor_id)
    assert stream.getTensorTypeInfo().type_s() == "Stream"
    assert stream.getReplicatedStreamMode() == popart.ReplicatedStreamMode.Replicate
    assert x._pb_tensor.getReplicatedStreamMode() == popart.ReplicatedStreamMode.Replicate
    mul, add = y._pb_tensor.getProducer(), z._pb_tensor.getProducer()
    assert (pv.consumers.n(mul), pv.consumers.n(add), x._pb_tensor.consumers.n(mul)) == (2, 1, 0)
    assert pv.consumers.getTotal() == 3
    info = _ir.TensorInfo(_ir.DataType.FLOAT, np.array([4, 2]))
    assert (info.shape(), info.nelms()) == ([4, 2], 8)


def test_tensors_get_all_is_the_graphs_store_by_id_and_debug_name_uses_the_op_name() -> None:
    """``getTensors().getAll()`` is the graph's own store sorted by id (what PopXL's
    ``Graph.tensors`` lists: spec popxl-fidelity §10); ``Op.debugName()`` is PopART's
    ``Op(<name>, inputs=[...], outputs=[...])`` (high confidence)."""
    ir = popxl.Ir()
    with ir.main_graph:
        b = popxl.variable(np.ones(2, F32), name="b")
        a = popxl.variable(np.ones(2, F32), name="a")
        with popxl.name_scope("s"):
            c = a + b
    got = [t.id for t in ir.main_graph._pb_graph.getTensors().getAll()]
    assert got == sorted(got) == [t.id for t in ir.main_graph.tensors] == ["a", "b", "s/add_out"]
    op = c._pb_tensor.getProducer()
    assert op.debugName() == "Op(s/add, inputs=[a, b], outputs=[s/add_out])"


def test_call_sites_and_called_graphs() -> None:
    """``Graph.getCallSiteOps()``: every op of the Ir that calls the graph (a repeat's
    call sits in its wrapper graph); ``getCalledGraphs()``: the graphs the graph's own ops
    call, each once; a called graph cannot be removed (medium-high confidence)."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, F32), name="x")
        g = ir.create_graph(lambda t: t * 2.0, x)
        (y,) = ops.call(g, x)
        (z,) = ops.call(g, y)
        ops.repeat(g, 3, x)
    pg, pm = g._pb_graph, ir.main_graph._pb_graph
    calls = [y._pb_tensor.getProducer(), z._pb_tensor.getProducer()]
    sites = pg.getCallSiteOps()
    assert sites[:2] == calls and len(sites) == 3
    wrapper = sites[2].getGraph()
    assert isinstance(sites[2], _ir.op.CallOp) and wrapper != pm
    assert pm.getCalledGraphs() == [pg, wrapper] and wrapper.getCalledGraphs() == [pg]
    assert pg.getCalledGraphs() == [] and pg.getCallSiteOps(True) == sites
    with pytest.raises(PopartException, match="is called by"):
        ir._pb_ir.removeGraph(pg.id)


def test_an_op_on_no_ipu_has_no_virtual_graph_id() -> None:
    """An op made under ``popxl.ipu(None)`` (or given ``setVirtualGraphId(None)``) has no
    virtual graph: ``hasVirtualGraphId()`` False, ``getVirtualGraphId()`` raises PopART's
    "has not had this attribute set"; other ops are on PopXL's default IPU 0 or their
    ``popxl.ipu`` (high confidence)."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, F32))
        with popxl.ipu(None):
            none = (a - 1.0)._pb_tensor.getProducer()
        default = (a + 1.0)._pb_tensor.getProducer()
        with popxl.ipu(2):
            two = (a * 2.0)._pb_tensor.getProducer()
    assert [op.hasVirtualGraphId() for op in (none, default, two)] == [False, True, True]
    assert (default.getVirtualGraphId(), two.getVirtualGraphId()) == (0, 2)
    with pytest.raises(PopartException, match="has not had this attribute set"):
        none.getVirtualGraphId()
    assert none.settings.vgraphId is None
    two.setVirtualGraphId(None)
    assert not two.hasVirtualGraphId() and two.settings.vgraphId is None
    two.setVirtualGraphId(1)
    assert (two.getVirtualGraphId(), two.settings.vgraphId) == (1, 1)


def test_autodiff_through_the_bindings() -> None:
    """PopXL's ``autodiff`` is ``_ir.transforms.Autodiff().apply(ir, graph id, provided ids,
    required ids, {GraphId: BwdGraphInfo}, AutodiffStitchStrategy.SafeAddFwdOutputs)``, giving
    ``{GraphId: BwdGraphInfo}``; ``GradGraphInfo._from_pb`` turns it back into PopXL's
    info, whose graph computes the gradient (NumPy). A recomputing strategy is refused by
    name (Tremula adds the needed forward values as outputs)."""
    x_np = np.array([0.5, -1.0, 2.0], F32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x_np, name="x")
        fwd = ir.create_graph(lambda a: a * a + ops.sin(a), x)
    strategy = _ir.AutodiffStitchStrategy
    with pytest.raises(PopartException, match="RecomputeAllNonInputs"):
        _ir.transforms.Autodiff().apply(
            ir._pb_ir, fwd._pb_graph.id, None, None, {}, strategy.RecomputeAllNonInputs
        )
    result = _ir.transforms.Autodiff().apply(
        ir._pb_ir, fwd._pb_graph.id, None, None, {}, strategy.SafeAddFwdOutputs
    )
    assert list(result) == [fwd._pb_graph.id]
    bwd = result[fwd._pb_graph.id]
    assert isinstance(bwd, _ir.BwdGraphInfo)
    assert [c.type for c in bwd.expectedOutputs] == [_ir.ExpectedConnectionType.FwdGrad]
    assert bwd.expectedOutputs[0].fwdId == fwd.inputs[0].id
    info = popxl.transforms.GradGraphInfo._from_pb(ir._pb_ir, fwd._pb_graph, bwd)
    np.testing.assert_allclose(_gradient(ir, fwd, info, x), 2 * x_np + np.cos(x_np), rtol=1e-5)


def test_autodiff_through_the_bindings_uses_the_given_grad_info_of_called_graphs() -> None:
    """``calledGraphsGradInfo`` names the gradient graph of a called graph: it is used, not
    made again, so the result holds the outer graph only; without it both are made."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, 2.0], F32), name="x")
        inner = ir.create_graph(lambda a: a * a, x)
        outer = ir.create_graph(lambda a: ops.call(inner, a)[0] * 3.0, x)
    apply = _ir.transforms.Autodiff().apply
    pb_ir, safe = ir._pb_ir, _ir.AutodiffStitchStrategy.SafeAddFwdOutputs
    both = apply(pb_ir, outer._pb_graph.id, None, None, {}, safe)
    assert set(both) == {outer._pb_graph.id, inner._pb_graph.id}
    given = {inner._pb_graph.id: both[inner._pb_graph.id]}
    count = len(pb_ir.getAllGraphs())
    again = apply(pb_ir, outer._pb_graph.id, None, None, given, safe)
    assert list(again) == [outer._pb_graph.id] and len(pb_ir.getAllGraphs()) == count + 1
