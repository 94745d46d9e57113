"""Probe round 8, graphs, transforms and contexts, written as PopXL's own tests
(``test_context.py``, ``ops/test_call.py``, ``ops/test_repeat.py``,
``ops/test_conditional.py``, ``transforms/test_autodiff*.py``) check them.

The mismatches found:

- ops made by ``popxl.ops`` functions had an empty ``op.name()``. PopXL's op functions make
  each op with ``ctx._get_op_settings("<function>")`` (``"add"`` for ``ops.add`` and
  ``t + 1``, ``"conditional"`` for ``ops.conditional``), the name under the current name
  scopes, so PopART's ``Op::getName()`` reads it back;
- autodiff of a graph that ``ops.repeat`` loops was refused when the backward pass read a
  forward intermediate. PopXL's repeat calls the graph through a ``CallOp`` in the loop's
  wrapper, and PopART's autodiff adds outputs to every ``CallOp`` of the graph.

The rest agreed with PopXL: ``GradGraphInfo``'s maps for a ``grads_required`` that names a
forward intermediate, a graph called twice inside the differentiated graph (differentiated
once), a forward output the backward pass also reads, dropout's gradient reusing the
forward mask, a TensorByRef accumulator beside a loop-carried value in ``repeat``, branches
of a conditional with different graphs and inputs, ``in_sequence(False)`` inside ``True``.
"""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import fetch

import popart
import popxl
import popxl.ops as ops
from popxl.transforms import ExpectedConnectionType, autodiff

Fwd, FwdGrad = ExpectedConnectionType.Fwd, ExpectedConnectionType.FwdGrad


# ---- op names (the mismatch) ----
def test_ops_are_named_after_the_popxl_function_under_the_name_scopes() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        b = a + 1
        c = ops.relu_(b)
        with popxl.name_scope("layer"), popxl.name_scope("ff"):
            d = ops.matmul(a.reshape((1, 2)), a.reshape((2, 1)))
    assert b.producer.name() == "add"
    assert c.producer.name() == "relu_inplace"
    assert d.producer.name() == "layer/ff/matmul"
    assert d.producer.getName() == d.producer.settings.name == "layer/ff/matmul"
    assert d.producer.settings.scope == "layer/ff"


def test_control_flow_ops_are_named_call_repeat_conditional() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        flag = popxl.variable(True, popxl.bool, name="flag")
        g = ir.create_graph(lambda t: t * 2, x)
        (called,) = ops.call(g, x)
        (looped,) = ops.repeat(g, 2, x)
        (branched,) = ops.conditional(flag, g, g, [x], [x])
    names = [t.producer.name() for t in (called, looped, branched)]
    assert names == ["call", "repeat", "conditional"]


def test_ops_made_through_the_bindings_keep_their_settings_name() -> None:
    import popart._internal.ir as _ir

    ir = popxl.Ir()
    pb = ir.main_graph._pb_graph
    opid = _ir.OperatorIdentifier("ai.onnx", "Relu", 6, _ir.NumInputs(1, 1), 1)
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        named = pb.createConnectedOp_ReluOp({0: x.id}, {0: "r"}, opid, _ir.Settings(pb, "mine"))
        unnamed = pb.createConnectedOp_ReluOp({0: x.id}, {0: "q"}, opid, _ir.Settings(pb, ""))
    assert (named.name(), unnamed.name()) == ("mine", "")


# ---- GradGraphInfo in depth ----
def test_grads_required_naming_an_intermediate_maps_only_forward_inputs() -> None:
    """``fwd_graph_ins_to_grad_parent_outs`` maps forward-graph *inputs*: a required
    intermediate's gradient is an output of the grad graph but not in the map."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.array([-1.0, 2.0], np.float32), name="w")
        g = ir.create_graph(lambda a: ops.relu(a) * 3, w)
        (a,), hidden = g.inputs, g.ops[0].outputs[0]
        info = autodiff(g, grads_required=[hidden, a])
        assert [(c.fwd_tensor, c.connection_type) for c in info.expected_outputs] == [
            (hidden, FwdGrad),
            (a, FwdGrad),
        ]
        fwd = ops.call_with_info(g, w)
        seed = popxl.constant(np.ones(2, np.float32))
        grad = ops.call_with_info(info.graph, seed, inputs_dict=info.inputs_dict(fwd))
        by_graph = info.fwd_graph_ins_to_grad_parent_outs(grad)
        by_parent = info.fwd_parent_ins_to_grad_parent_outs(fwd, grad)
    assert list(by_graph) == [a] and list(by_parent) == [w]
    assert by_graph[a] is by_parent[w] is grad.outputs[1]
    d_hidden, d_w = fetch(ir, grad.outputs[0], by_parent[w])
    np.testing.assert_array_equal(d_hidden, [3.0, 3.0])
    np.testing.assert_array_equal(d_w, [0.0, 3.0])  # relu' is 0 at -1


def test_a_graph_called_twice_is_differentiated_once_and_both_calls_contribute() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.array([1.0, 2.0], np.float32), name="w")
        square = ir.create_graph(lambda a: a * a, w)

        def twice(a: popxl.Tensor) -> popxl.Tensor:
            (y,) = ops.call(square, a)
            (z,) = ops.call(square, y)
            return z

        g = ir.create_graph(twice, w)
        infos = autodiff(g, return_all_grad_graphs=True)
        assert set(infos) == {g, square}
        assert [op.type for op in infos[g].graph.ops] == ["Call", "Call"]
        assert {op.called_graphs[0] for op in infos[g].graph.ops} == {infos[square].graph}
        fwd = ops.call_with_info(g, w)
        seed = popxl.constant(np.ones(2, np.float32))
        (d_w,) = ops.call(infos[g].graph, seed, inputs_dict=infos[g].inputs_dict(fwd))
    (value,) = fetch(ir, d_w)
    np.testing.assert_array_equal(value, 4 * np.array([1.0, 2.0]) ** 3)  # d(w^4)/dw


def test_a_forward_output_the_backward_pass_reads_is_both_fwdgrad_and_fwd() -> None:
    """``(b, b*b)`` with ``b = 3a``: the gradients of both outputs come first, in output
    order; the grad of ``b*b`` reads ``b`` itself, an existing output, as a Fwd input."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.array([1.0, 2.0], np.float32), name="w")

        def fn(a: popxl.Tensor) -> tuple[popxl.Tensor, popxl.Tensor]:
            b = a * 3
            return b, b * b

        g = ir.create_graph(fn, w)
        b, bb = g.outputs
        info = autodiff(g)
        kinds = [(c.fwd_tensor, c.connection_type) for c in info.expected_inputs]
        assert kinds[:3] == [(b, FwdGrad), (bb, FwdGrad), (b, Fwd)]
        # b is an output already; only the constant 3 (read by the grad of a * 3) is added
        assert [t.name for t in g.outputs[2:]] == ["t"]
        fwd = ops.call_with_info(g, w)
        one = popxl.constant(np.ones(2, np.float32))
        (d_w,) = ops.call(info.graph, one, one, inputs_dict=info.inputs_dict(fwd))
    (value,) = fetch(ir, d_w)
    np.testing.assert_array_equal(value, 3 + 18 * np.array([1.0, 2.0]))


def test_dropout_gradient_reads_the_seed_and_reuses_the_forward_mask() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones((8, 8), np.float32), name="w")
        seed = popxl.variable(np.array([7, 11], np.uint32), popxl.uint32, name="seed")
        g = ir.create_graph(lambda a, s: ops.dropout(a, s, 0.5), w, seed)
        a, s = g.inputs
        info = autodiff(g, grads_required=[a])
        assert (s, Fwd) in [(c.fwd_tensor, c.connection_type) for c in info.expected_inputs]
        fwd = ops.call_with_info(g, w, seed)
        dy = popxl.constant(np.full((8, 8), 3.0, np.float32))
        (d_w,) = ops.call(info.graph, dy, inputs_dict=info.inputs_dict(fwd))
    y, grad = fetch(ir, fwd.outputs[0], d_w)
    kept = y != 0
    assert 0 < kept.sum() < kept.size
    np.testing.assert_array_equal(y[kept], 2.0)  # 1 / (1 - 0.5)
    np.testing.assert_array_equal(grad, np.where(kept, 6.0, 0.0))


def test_by_ref_input_passed_to_a_called_graph_is_a_modification_autodiff_refuses() -> None:
    """A call marks its TensorByRef inputs modified, so the calling graph modifies its own
    input and autodiff refuses it (PopART's "contains a modifying op"), adding nothing."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones(2, np.float32), name="w")

        def reads(a: popxl.TensorByRef, b: popxl.Tensor) -> popxl.Tensor:
            return a * b

        inner = ir.create_graph(reads, w, w)
        g = ir.create_graph(lambda a, b: ops.call(inner, a, b)[0], w, w)
    graphs = ir.graphs
    with pytest.raises(popart.popart_exception, match="contains a modifying op Call"):
        autodiff(g)
    assert ir.graphs == graphs


# ---- call, repeat, conditional, in_sequence ----
def test_repeat_carries_the_first_inputs_and_updates_a_by_ref_accumulator() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        acc = popxl.variable(np.zeros(2, np.float32), name="acc")

        def body(t: popxl.Tensor, total: popxl.TensorByRef) -> popxl.Tensor:
            ops.var_updates.accumulate_(total, t)
            return t * 2

        g = ir.create_graph(body, x, acc)
        info = ops.repeat_with_info(g, 3, x, acc)
        (out,) = info.outputs
    value, total = fetch(ir, out, variables=[acc])
    np.testing.assert_array_equal(value, [8.0, 8.0])
    np.testing.assert_array_equal(total, [7.0, 7.0])  # 1 + 2 + 4


def test_conditional_branches_with_different_graphs_and_inputs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.array([1.0, 2.0], np.float32), name="w")
        v = popxl.variable(np.array([1.0, 2.0, 3.0], np.float32), name="v")
        flag = popxl.variable(False, popxl.bool, name="flag")
        then_g = ir.create_graph(lambda a: a * 2, w)
        else_g = ir.create_graph(lambda b, a: a + ops.sum(b), v, w)
        info = ops.conditional_with_info(flag, then_g, else_g, [w], [v, w])
        (out,) = info.outputs
        assert out.name == "mul_out_or_add_out"
        assert list(info._op.inputs) == [flag, w, v, w]
        assert info.graph_to_parent_input_index(0, then_branch=False) == 2
        assert info.parent_input(2) is v and not info.is_parent_index_in_then_branch(2)
    (value,) = fetch(ir, out)
    np.testing.assert_array_equal(value, [7.0, 8.0])  # the else branch: w + 6


def test_in_sequence_false_inside_true_acts_as_one_unit() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones(2, np.float32), name="w")
        with popxl.in_sequence(True):
            first = (w + 1).producer
            with popxl.in_sequence(False):
                left, right = (w + 2).producer, (w + 3).producer
            last = (w + 4).producer
    pairs = {(id(a), id(b)) for a, b in ir.main_graph.topocons()}
    expected = {(first, left), (first, right), (left, last), (right, last)}
    assert pairs == {(id(a), id(b)) for a, b in expected}


def test_autodiff_of_a_repeated_graph_exposes_what_the_backward_pass_reads() -> None:
    """Was refused ("cannot gain outputs"). PopXL's repeat calls the graph through a
    CallOp in the loop's wrapper, and PopART's autodiff (SafeAddFwdOutputs) adds the
    forward values the backward pass reads as outputs of the graph and of every CallOp
    calling it; the loop still carries only its own outputs."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([-1.0, 2.0], np.float32), name="x")
        body = ir.create_graph(lambda a: ops.relu(a * 2) * 3, x)
        (looped,) = ops.repeat(body, 2, x)
        info = autodiff(body)
        hidden = body.ops[1].outputs[0]  # relu's output, which relu's gradient reads
        assert hidden in body.outputs and (hidden, Fwd) in [
            (c.fwd_tensor, c.connection_type) for c in info.expected_inputs
        ]
        site = ops.call_with_info(body, x)
        seed = popxl.constant(np.ones(2, np.float32))
        (d_x,) = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(site))
    value, grad = fetch(ir, looped, d_x)
    np.testing.assert_array_equal(value, [0.0, 72.0])  # 2 -> 12 -> 72; -1 -> 0 -> 0
    np.testing.assert_array_equal(grad, [0.0, 6.0])
