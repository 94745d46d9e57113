"""Editing Tremula's IR through PopXL's bindings, as popxl-addons' transforms do: what is
edited is what runs (checked against NumPy), and edits that would leave the IR
inconsistent raise ``popart.popart_exception``."""

from __future__ import annotations

import numpy as np
import pytest

import popart
import popart._internal.ir as _ir
import popxl
import popxl.ops as ops

X0 = np.arange(6, dtype=np.float32).reshape(2, 3)


def run(ir: popxl.Ir, outputs: list) -> list[np.ndarray]:
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()
    return [got[o] for o in outputs]


def store(t: popxl.Tensor) -> popxl.DeviceToHostStream:
    d2h = popxl.d2h_stream(t.shape, t.dtype)
    ops.host_store(d2h, t)
    return d2h


def test_removed_output_is_gone_from_the_program() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")
        g = ir.create_graph(lambda t: (t + 1, t * 2), x)
        g._pb_graph.removeOutput(0)
        (out,) = ops.call(g, x)
        s = store(out)
    assert len(g.outputs) == 1 and g._pb_graph.getOutputIds() == [g.outputs[0].id]
    np.testing.assert_array_equal(run(ir, [s])[0], X0 * 2)


def test_remove_output_indices() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0)
        g = ir.create_graph(lambda t: (t + 1, t * 2, t * 3, t * 4), x)
        kept = g.outputs[:2]
        for idx in (2, 3):  # popxl-addons' autodiff_with_accumulation: trailing, ascending
            g._pb_graph.removeOutput(idx)
        assert g.outputs == kept
        g._pb_graph.removeOutput(g.outputs[0].id)
        assert g.outputs == kept[1:]
        with pytest.raises(popart.popart_exception, match="no output -1"):
            g._pb_graph.removeOutput(-1)
        ops.call(g, x)
        with pytest.raises(popart.popart_exception, match="is called by"):
            g._pb_graph.removeOutput(0)
    assert g.outputs == kept[1:]


def _move_into_repeat(graph: popxl.Graph, count: int) -> popxl.Graph:
    """popxl-addons' ``repeat_graph`` transform, written out: clone every op of ``graph``
    into a new graph in schedule order (inputs by reference), repeat it, erase the
    originals."""
    ir = graph.ir
    body = ir.create_empty_graph("repeat_graph")
    old_to_new: dict = {}
    new_to_old: dict = {}
    moved = graph._pb_graph.getOpSchedule()
    with body:
        for op in moved:
            clone = op.cloneIntoGraph(body._pb_graph)
            for idx, t_ in op.getInputIndexMap().items():
                if t_ not in old_to_new:
                    t = popxl.Tensor._from_pb_tensor(t_)
                    new_t = popxl.graph_input(**t.spec, name=t.name, by_ref=True)
                    old_to_new[t_] = new_t._pb_tensor
                    new_to_old[new_t] = t
                clone.connectInTensor(idx, old_to_new[t_].id)
            for idx, t_ in op.getOutputIndexMap().items():
                clone.createAndConnectOutTensor(idx, popxl.Tensor._from_pb_tensor(t_).name)
                old_to_new[t_] = clone.outTensor(idx)
            clone.setup()
    with graph:
        loop = ops.repeat_with_info(body, count, inputs_dict=new_to_old)._op
    graph._pb_graph.topoCons().transferToSubgraph(loop, {op: [] for op in moved}, True)
    for op in moved:
        op.disconnectAllInputs()
        op.disconnectAllOutputs()
        graph._pb_graph.eraseOp(op.id)
    return body


def test_ops_moved_into_a_repeat_run_there() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros((2, 3), np.float32), name="w")
        x = popxl.variable(X0, name="x")
        y = ops.sin(x) * 2.0
        ops.var_updates.accumulate_(w, y)
    body = _move_into_repeat(ir.main_graph, 3)
    types = [op.opType() for op in body._pb_graph.getOpSchedule()]
    assert types == ["Sin", "Mul", "Accumulate"]
    assert [op.opType() for op in ir.main_graph._pb_graph.getOps()] == ["Loop"]
    loop = ir.main_graph._pb_graph.getOps()[0]
    assert isinstance(loop, _ir.op.LoopOp) and loop.getTripCountValue() == 3
    assert loop.getInputIndexMap()[2]._t is not None and not loop.hasInput(0)
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
        s.run()
        got = s.get_tensor_data(w)
    np.testing.assert_allclose(got, 6 * np.sin(X0) * 2, rtol=1e-6)


def test_routing_a_tensor_into_a_called_graph() -> None:
    """popxl-addons' ``route_tensor_into_graph``: a new graph input, connected at the call
    site and marked modified, so the subgraph's update reaches the parent variable."""
    ir = popxl.Ir()
    with ir.main_graph:
        acc = popxl.variable(np.zeros(3, np.float32), name="acc")
        x = popxl.variable(np.arange(3, dtype=np.float32), name="x")
        g = ir.create_graph(lambda t: t * 2, x)
        call = ops.call_with_info(g, x)._op
        with g:
            inner = popxl.graph_input(acc.shape, acc.dtype, acc.name)
            ops.var_updates.accumulate_(inner, g.outputs[0])
        idx = call.subgraphInToOpInIndex(g._pb_graph.getInputIndex(inner.id))
        assert not call.hasInput(idx)
        call.connectInTensor(idx, acc.id)
        call.addModified(idx, [_ir.view.Region.getFull(acc.shape)])
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
        s.run()
        got = s.get_tensor_data(acc)
    np.testing.assert_allclose(got, 2 * (np.arange(3) * 2))


def test_loop_input_added_to_a_repeat() -> None:
    """PopXL's loop structure edited as popxl-addons' pipelining and route_tensor_into_graph
    edit it: a new fixed loop input enters the wrapper graph, the wrapper's CallOp passes
    it on to the repeated graph, and a new output of that graph, through a new output of
    the CallOp, replaces the loop-carried value."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.float32), name="x")
        step = popxl.variable(np.full(3, 0.5, np.float32), name="step")
        body = ir.create_graph(lambda t: t * 1.0, x)
        info = ops.repeat_with_info(body, 4, x)
        loop = info._op
        wrapper = popxl.Graph._from_pb(loop.getCalledGraph())
        (call,) = wrapper._pb_graph.getOps()
        n = loop.getNumExplicitInputs()
        assert n == 3
        w_step = wrapper._create_tensor_id("step")
        loop.addLoopInput(n, step.id, w_step, False)
        assert loop.opInToSubgraphInIndex(n) == wrapper._pb_graph.getInputIndex(w_step) == 3
        with body:  # the body now adds the fixed input each iteration
            inner = popxl.graph_input(step.shape, step.dtype, "step")
            out = body.outputs[0] + inner
            popxl.graph_output(out)
        call.connectInTensor(
            call.subgraphInToOpInIndex(body._pb_graph.getInputIndex(inner.id)), w_step
        )
        w_out = wrapper._create_tensor_id("out")
        call.createAndConnectOutTensor(body._pb_graph.getOutputIndex(out.id), w_out)
        call.setup()
        loop.addLoopOutput(0, loop.outId(0), w_out, True)
        assert wrapper._pb_graph.getOutputId(1) == w_out
        s = store(info.outputs[0])
    with pytest.raises(popart.popart_exception, match="must be a new fixed input"):
        loop.addLoopInput(2, step.id, "other", False)
    np.testing.assert_allclose(run(ir, [s])[0], 1 + 4 * 0.5)


def test_setup_restores_a_valid_order() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")
        a = x + 1
        b = ops.exp(x)
        c = a * 2
    mul = c._pb_tensor.getProducer()
    exp = b._pb_tensor.getProducer()
    mul.connectInTensor(0, b.id)  # now consumes exp's output
    mul.setup()
    order = ir.main_graph._pb_graph.getOpSchedule()
    assert order.index(exp) < order.index(mul)
    with ir.main_graph:
        s = store(c)
    np.testing.assert_allclose(run(ir, [s])[0], np.exp(X0) * 2, rtol=1e-6)


def test_inconsistent_edits_are_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")
        y = x + 1
        z = y * 2
    add = y._pb_tensor.getProducer()
    with pytest.raises(popart.popart_exception, match="still connected"):
        ir.main_graph._pb_graph.eraseOp(add.id)
    with pytest.raises(popart.popart_exception, match="No Ir::Tensor with TensorId 'nope'"):
        add.connectInTensor(0, "nope")
    with pytest.raises(popart.popart_exception, match="already exists"):
        add.createAndConnectOutTensor(1, "x")
    with pytest.raises(popart.popart_exception, match="Failed to find op 999"):
        ir.main_graph._pb_graph.eraseOp(999)
    clone = add.cloneIntoGraph(ir.main_graph._pb_graph)
    clone.connectInTensor(1, x.id)
    with pytest.raises(popart.popart_exception, match=r"inputs \[0\] are not connected"):
        clone.setup()
    with pytest.raises(popart.popart_exception, match="input 0 is not connected"):
        popxl.Session(ir, "ipu_model")
    clone.connectInTensor(0, x.id)
    clone.setup()
    assert clone.outTensor(0)._t.shape == (2, 3)
    mul = z._pb_tensor.getProducer()
    mul.disconnectAllInputs()
    with pytest.raises(popart.popart_exception, match="input 0 is not connected"):
        popxl.Session(ir, "ipu_model")


def test_call_site_must_match_its_graph() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")
        v = popxl.variable(np.ones(4, np.float32), name="v")
        g = ir.create_graph(lambda t: t + 1, x)
        call = ops.call_with_info(g, x)._op
    call.connectInTensor(0, v.id)
    with pytest.raises(popart.popart_exception, match=r"CallOp input \(@0\) does not match"):
        call.setup()
    with pytest.raises(popart.popart_exception, match="does not match"):
        popxl.Session(ir, "ipu_model")
    with ir.main_graph:
        moved = ops.call_with_info(g, x)._op
    with pytest.raises(popart.popart_exception, match="not an op of graph"):
        g._pb_graph.topoCons().transferToSubgraph(moved, {}, True)


def test_repeat_site_marks_a_modified_input_through_the_wrapper() -> None:
    """``repeat_with_info(...).set_parent_input_modified``: the loop and the wrapper's call
    both mark the input, so the repeated graph's in-place update reaches the parent."""
    ir = popxl.Ir()
    with ir.main_graph:
        acc = popxl.variable(np.zeros(3, np.float32), name="acc")
        body = ir.create_graph(
            lambda t: ops.var_updates.accumulate_(t, popxl.constant(np.ones(3, np.float32))), acc
        )
        g_in = body.inputs[0]
        body._pb_graph.removeOutput(0)  # nothing loop-carried: the update is by reference
        info = ops.repeat_with_info(body, 3, acc)
        info.set_parent_input_modified(acc)
        (call,) = info._op.getCalledGraph().getOps()
    assert info._op.modifiesIndex(2) and call.modifiesIndex(0)
    assert info.parent_to_graph(acc) is g_in and info.graph_to_parent(g_in) is acc
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
        got = s.get_tensor_data(acc)
    np.testing.assert_allclose(got, 3.0)


def test_a_wrapper_with_other_ops_is_refused_by_the_session() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")
        body = ir.create_graph(lambda t: t + 1, x)
        loop = ops.repeat_with_info(body, 2, x)._op
        wrapper = popxl.Graph._from_pb(loop.getCalledGraph())
        with wrapper:
            ops.exp(wrapper.inputs[2])
    with pytest.raises(popart.popart_exception, match="exactly one Call"):
        popxl.Session(ir, "ipu_model")
