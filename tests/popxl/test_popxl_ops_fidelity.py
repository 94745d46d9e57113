"""Op-level behaviour PopXL's own op tests check (tests/integration/popxl/ops/**): the op
types and binding classes a program finds in ``g._pb_graph.getOps()``, graph tensor counts,
op attributes read through the bindings, what an op accepts and refuses; the programs run
against NumPy or hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import fetch

import popart
import popart._internal.ir as _ir
import popxl
import popxl.ops as ops


def _types(g: popxl.Graph) -> list[tuple[str, str]]:
    return [(op.opType(), type(op).__name__) for op in g._pb_graph.getOps()]


# ---- logical ops cast their operands to bool (PopXL's cast_if_needed) ----


def test_logical_ops_cast_operands_that_are_not_bool() -> None:
    x = np.array([0.0, 1.5, -2.0, 0.0], np.float32)
    y = np.array([1, 0, 3, 0], np.int32)
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(x, name="a")
        b = popxl.variable(y, name="b")
        both = ops.logical_and(a, b)
    # two casts (one per operand) and the And: a, b, two bools and the result
    assert len(g.tensors) == 5
    assert [t for t, _ in _types(g)] == ["Cast", "Cast", "And"]
    assert both.dtype == popxl.bool
    with g:
        either = ops.logical_or(a, b)
        neither = ops.logical_not(a)
        masked = a & 1.0  # the constant is made float32 (a's dtype), then cast
    got = fetch(ir, both, either, neither, masked)
    np.testing.assert_array_equal(got[0], np.logical_and(x, y))
    np.testing.assert_array_equal(got[1], np.logical_or(x, y))
    np.testing.assert_array_equal(got[2], np.logical_not(x))
    np.testing.assert_array_equal(got[3], x != 0)


def test_logical_ops_on_bools_add_no_cast() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(True, popxl.bool)
        b = popxl.variable(False, popxl.bool)
        ops.logical_and(a, b)
        _ = a | b
        _ = ~a
    assert len(g.tensors) == 5
    assert _types(g) == [("And", "AndOp"), ("Or", "OrOp"), ("Not", "NotOp")]


# ---- op types and binding classes PopART names ----


def test_pools_are_popart_max_pool_and_average_pool_ops() -> None:
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = popxl.variable(x)
        avg = ops.average_pool(t, kernel_size=(2, 2), stride=(2, 2))
        mx = ops.max_pool(t, kernel_size=(2, 2), stride=(2, 2))
    assert _types(g) == [("AveragePool", "AveragePoolOp"), ("MaxPool", "MaxPoolOp")]
    assert isinstance(g._pb_graph.getOps()[0], _ir.op.AveragePoolOp)
    assert isinstance(g._pb_graph.getOps()[1], _ir.op.MaxPoolOp)
    got_avg, got_max = fetch(ir, avg, mx)
    windows = x.reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 2, 2, 2, 4)
    np.testing.assert_allclose(got_avg, windows.mean(-1))
    np.testing.assert_array_equal(got_max, windows.max(-1))


def test_nll_loss_with_softmax_grad_is_popart_nlll_with_softmax_grad_direct() -> None:
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]], np.float32)
    labels = np.array([0, 2], np.int32)
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        p = popxl.variable(probs)
        lab = popxl.variable(labels, popxl.int32)
        loss, dx = ops.nll_loss_with_softmax_grad(p, lab)
    assert len(g.tensors) == 5  # probs, labels, the loss_grad constant, loss, dx
    (op,) = g._pb_graph.getOps()
    assert op.opType() == "NlllWithSoftmaxGradDirect"
    assert isinstance(op, _ir.op.NlllWithSoftmaxGradDirectOp)
    got_loss, got_dx = fetch(ir, loss, dx)
    np.testing.assert_allclose(got_loss, -(np.log(0.7) + np.log(0.6)) / 2, rtol=1e-6)
    onehot = np.eye(3, dtype=np.float32)[labels]
    np.testing.assert_allclose(got_dx, (probs - onehot) / 2, rtol=1e-6)


def test_collectives_comm_group_is_the_bindings() -> None:
    from popxl.ops.collectives import CommGroup, CommGroupType

    assert CommGroup is _ir.CommGroup and CommGroupType is _ir.CommGroupType
    group = CommGroup(CommGroupType.Consecutive, 2)
    assert group.type == CommGroupType.Consecutive and group.replicaGroupSize == 2


# ---- var updates: PopART's accumulation type through the bindings ----


@pytest.mark.parametrize(
    "update, kind",
    [
        (lambda t, x: ops.var_updates.accumulate_(t, x), "Add"),
        (lambda t, x: ops.var_updates.accumulate_(t, x, 0.5), "DampenedAdd"),
        (lambda t, x: ops.var_updates.accumulate_square_(t, x, 0.5), "DampenedAddSquare"),
        (lambda t, x: ops.var_updates.accumulate_mean_(t, x, 3.0), "Mean"),
        (lambda t, x: ops.var_updates.accumulate_moving_average_(t, x, 0.5), "MovingAverage"),
        (
            lambda t, x: ops.var_updates.accumulate_moving_average_square_(t, x, 0.5),
            "MovingAverageSquare",
        ),
    ],
)
def test_accumulate_op_reports_its_accumulation_type(update, kind) -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = popxl.variable(np.ones((2, 2), np.float32))
        x = popxl.variable(np.full((2, 2), 3.0, np.float32))
        update(t, x)
    (op,) = [op for op in g._pb_graph.getOps() if op.opType() == "Accumulate"]
    assert isinstance(op, _ir.op.AccumulateOp)
    assert op.getAccumulationType() == getattr(_ir.AccumulationType, kind)
    # PopART's enum (op/accumulate.hpp), in its order
    assert [m.name for m in _ir.AccumulationType][:3] == ["Add", "DampenedAdd", "DampenedAddSquare"]
    assert int(_ir.AccumulationType.Mean) == 8


def test_accumulator_scale_has_no_accumulation_type_to_report() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = popxl.variable(np.ones((2, 2), np.float32))
        ops.var_updates.accumulator_scale_(t, 0.5)
    (op,) = g._pb_graph.getOps()
    assert op.getFactor().val() == 0.5
    with pytest.raises(popart.popart_exception, match="records no accumulation type"):
        op.getAccumulationType()


# ---- in_sequence: an unknown mode is refused at the first op, as PopXL's context does ----


def test_unknown_in_sequence_mode_raises_at_the_first_op_not_on_entry() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(1.0, name="a")
        with popxl.in_sequence("sometimes"):  # entering is fine
            with pytest.raises(ValueError, match="Unknown in_sequence mode: 'sometimes'"):
                _ = a + 1
            # the refused op and its constant are not in the graph
            assert [t.id for t in g.tensors] == ["a"] and g._pb_graph.getOps() == []
            with popxl.in_sequence(True):  # a valid block inside orders its ops
                b = a + 2
        c = b * 3
    (got,) = fetch(ir, c)
    assert got == 9.0
    with (
        pytest.raises(TypeError, match="`None` cannot be passed to in_sequence"),
        popxl.in_sequence(None),  # type: ignore[arg-type]
    ):
        pass


def test_class_hierarchy_follows_popart_for_tied_gather_detach_and_scaled_add() -> None:
    """PopART derives TiedGatherOp from GatherOp (op/tiedgather.hpp), DetachInplaceOp from
    DetachOp and ScaledAddLhsInplaceOp from ScaledAddOp; the op types stay their own."""
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    ir = popxl.Ir()
    g = ir.main_graph
    with g, popxl.in_sequence():
        t = popxl.variable(x)
        idx = popxl.variable(np.array([3, 0]), popxl.int32)
        tied = ops.tied_gather(t, idx)
        y = popxl.variable(np.ones(3, np.float32))
        ops.scaled_add_(y, popxl.constant(np.arange(3, dtype=np.float32)), 2.0, 0.5)
        d = ops.detach_(y)
    tied_op, scaled_op, detach_op = g._pb_graph.getOps()
    assert tied_op.opType() == "TiedGather" and isinstance(tied_op, _ir.op.GatherOp)
    assert issubclass(_ir.op.GroupedGatherOp, _ir.op.GatherOp)
    assert isinstance(scaled_op, _ir.op.ScaledAddOp) and scaled_op.opType() == "ScaledAddLhsInplace"
    assert isinstance(detach_op, _ir.op.DetachOp) and detach_op.opType() == "DetachInplace"
    got_tied, got_d = fetch(ir, tied, d)
    np.testing.assert_array_equal(got_tied, x[[3, 0]])
    np.testing.assert_allclose(got_d, 2.0 + 0.5 * np.arange(3))


def test_maximum_of_n_tensors_is_one_variadic_max_op_with_its_gradient() -> None:
    """PopXL's ``maximum(*ts)`` makes one ONNX ``Max`` op of all its tensors: 3 variables
    give 4 graph tensors. The gradient goes to every operand equal to the result (PopART's
    MaxArgGradOp)."""
    a0 = np.array([[1.0, 5.0, 3.0]], np.float32)
    b0 = np.array([[2.0], [4.0]], np.float32)
    c0 = np.array([3.0, 3.0, 3.0], np.float32)
    seed = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a, b, c = popxl.variable(a0), popxl.variable(b0), popxl.variable(c0)
        m = ops.maximum(a, b, c)
    assert len(g.tensors) == 4 and _types(g) == [("Max", "MaxOp")]
    with g:
        alone = ops.maximum(a)  # a Max of one input: a copy
        graph = ir.create_graph(lambda x, y, z: ops.maximum(x, y, z), a, b, c)
        grads = popxl.transforms.autodiff(graph)
        info = ops.call_with_info(graph, a, b, c)
        dm = popxl.constant(seed)
        ga, gb, gc = ops.call(grads.graph, dm, inputs_dict=grads.inputs_dict(info))
    got = fetch(ir, m, alone, ga, gb, gc)
    np.testing.assert_array_equal(got[0], np.maximum(np.maximum(a0, b0), c0))
    np.testing.assert_array_equal(got[1], a0)
    # by hand: row 0 takes c, a, a and c (a ties c at 3: both get it); row 1 takes b, a, b
    np.testing.assert_array_equal(got[2], [[0.0, 2.0 + 5.0, 3.0]])
    np.testing.assert_array_equal(got[3], [[0.0], [4.0 + 6.0]])
    np.testing.assert_array_equal(got[4], [1.0, 0.0, 3.0])


def test_call_outputs_are_named_like_the_callee_outputs() -> None:
    """PopXL's call names each output after the called graph's output (made unique in the
    calling graph)."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(2.0, name="a")
        b = popxl.variable(3.0, name="b")

        def sum_and_product(x, y):
            return x + y, x * y

        graph = ir.create_graph(sum_and_product, a, b)
        first = ops.call(graph, a, b)
        second = ops.call(graph, b, b)
    assert [t.name for t in graph.outputs] == ["add_out", "mul_out"]
    assert [t.id for t in first] == ["add_out", "mul_out"]
    assert [t.id for t in second] == ["add_out__t0", "mul_out__t1"]
    got = fetch(ir, *first, *second)
    assert [float(v) for v in got] == [5.0, 6.0, 6.0, 9.0]


def test_collective_ops_give_their_grouping_and_operator_through_the_bindings() -> None:
    from tremula.popxl.ops.collectives.collectives import CollectiveOperator

    ir = popxl.Ir(replication=4)
    g = ir.main_graph
    with g:
        v = popxl.variable(np.ones(4, np.float32))
        ops.collectives.replicated_all_reduce(v, op="max", group=ir.replica_grouping(1, 2))
        ops.collectives.replicated_reduce_scatter(v)
    reduce_op, scatter_op = [
        op for op in g._pb_graph.getOps() if isinstance(op, _ir.op.collectives.CollectivesBaseOp)
    ]
    grouping = reduce_op.getReplicaGrouping()
    assert (grouping.getNumReplicas(), grouping.getStride(), grouping.getGroupSize()) == (4, 1, 2)
    group = reduce_op.getGCLCommGroup()
    assert group.type == _ir.CommGroupType.Consecutive and group.replicaGroupSize == 2
    assert reduce_op.getCollectiveOp() is CollectiveOperator.Max
    assert scatter_op.getCollectiveOp() is CollectiveOperator.Add
    assert scatter_op.getGCLCommGroup().type == _ir.CommGroupType.All


def test_cumsum_takes_its_axis_as_a_constant_tensor() -> None:
    """PopART's CumSumOp reads the axis from input 1 (ONNX CumSum), so PopXL's cumsum adds a
    constant: 3 graph tensors. The gradient is the reversed running sum."""
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = popxl.variable(x, name="t")
        c = ops.cumsum(t, -1)
    assert len(g.tensors) == 3 and len(g.constants) == 1
    (op,) = g._pb_graph.getOps()
    assert op.opType() == "CumSum" and isinstance(op, _ir.op.CumSumOp)
    assert op.inTensor(1).id == g.constants[0].id
    with g:
        graph = ir.create_graph(lambda v: ops.cumsum(v, 1), t)
        grads = popxl.transforms.autodiff(graph, grads_required=[graph.inputs[0]])
        info = ops.call_with_info(graph, t)
        seed = popxl.constant(np.array([[1, 2, 3], [4, 5, 6]], np.float32))
        (dt,) = ops.call(grads.graph, seed, inputs_dict=grads.inputs_dict(info))
    got, got_dt = fetch(ir, c, dt)
    np.testing.assert_array_equal(got, [[1, 3, 6], [4, 9, 15]])
    np.testing.assert_array_equal(got_dt, [[6, 5, 3], [15, 11, 6]])


def test_var_update_inputs_have_popart_indices() -> None:
    """PopART indexes the var updates' operands by role (spec 1.1-1.3): adam_updater's
    weight is input 0, m 1, v 2, the time step 3 (which it increments in place), weight
    decay 4; accumulator_scale_'s factor tensor is input 2; absent operands leave gaps."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        m = popxl.variable(np.ones(3, np.float32), name="m")
        v = popxl.variable(np.ones(3, np.float32), name="v")
        w = popxl.variable(np.ones(3, np.float32), name="w")
        step = popxl.variable(1.0, name="step")
        wd = popxl.variable(0.1, name="wd")
        ops.var_updates.adam_updater(m, v, w, step, wd, 0.9, 0.99)
        ops.var_updates.accumulator_scale_(w, popxl.variable(0.5, name="f"))
        ops.var_updates.adamax_updater(m, v, time_step=step)
    adam, scale, adamax = g._pb_graph.getOps()
    ids = {i: t.id for i, t in adam.getInputIndexMap().items()}
    assert ids == {0: "w", 1: "m", 2: "v", 3: "step", 4: "wd"}
    assert adam.modifiesIndex(3) and not adam.modifiesIndex(0)
    assert adam.inTensor(1).id == "m" and not adam.hasInput(5)
    assert {i: t.id for i, t in scale.getInputIndexMap().items()} == {0: "w", 2: "f"}
    assert {i: t.id for i, t in adamax.getInputIndexMap().items()} == {1: "m", 2: "v", 3: "step"}


def test_histogram_sorts_its_levels_as_popart_does() -> None:
    x = np.array([0.1, 0.5, 0.9, -0.6, 0.3], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(x)
        h = ops.histogram(t, [0.7, 0.3], absolute_of_input=False)
        ha = ops.histogram(t, [0.7, 0.3], absolute_of_input=True)
    assert h.producer.attrs["levels"] == (0.3, 0.7)
    got, got_abs = fetch(ir, h, ha)
    # bins (-inf, 0.3), [0.3, 0.7), [0.7, inf): by hand
    np.testing.assert_array_equal(got, [2, 2, 1])
    np.testing.assert_array_equal(got_abs, [1, 3, 1])


def test_matmul_partials_type_defaults_to_the_session_option() -> None:
    """PopXL's matmul takes ``partialsTypeMatMuls`` from the Ir's session options when no
    partials type is given; 'float' / 'half' are accepted as the option spells them."""
    x = np.arange(6, dtype=np.float16).reshape(2, 3)
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(x, popxl.float16)
        plain = ops.matmul(a, a.T)
        ir._pb_ir.getSessionOptions().partialsTypeMatMuls = "half"
        from_option = ops.matmul(a, a.T)
        given = ops.matmul(a, a.T, partials_type="float")
        with pytest.raises(ValueError, match="partials_type must be 'float' or 'half'"):
            ops.matmul(a, a.T, partials_type="int")
    kinds = [op.getPartialsType() for op in g._pb_graph.getOps() if op.opType() == "MatMul"]
    half, flt = _ir.op.MatMulPartialsType.HALF, _ir.op.MatMulPartialsType.FLOAT
    assert kinds == [flt, half, flt]
    want = x.astype(np.float64) @ x.T.astype(np.float64)
    for got in fetch(ir, plain, from_option, given):
        np.testing.assert_allclose(got, want)


def test_variadic_max_in_fused_element_wise_chains() -> None:
    """The lowering fuses chains of element-wise ops into one popops map: a Max of three
    inputs folds pairwise there, a Max of one is not fused (a copy), unary ops keep theirs."""
    rng = np.random.default_rng(1)
    a0, b0, c0 = (rng.uniform(-0.5, 0.5, 4).astype(np.float32) for _ in range(3))
    ir = popxl.Ir()
    with ir.main_graph:
        a, b, c = (popxl.variable(x) for x in (a0, b0, c0))
        three = ops.relu(ops.maximum(a, b, c)) * 2 + 1
        one = ops.maximum(a) * 3
        unary = ops.relu(a + b) * 2 + 1
    got = fetch(ir, three, one, unary)
    np.testing.assert_allclose(got[0], np.maximum(np.maximum(np.maximum(a0, b0), c0), 0) * 2 + 1)
    np.testing.assert_allclose(got[1], a0 * 3)
    np.testing.assert_allclose(got[2], np.maximum(a0 + b0, 0) * 2 + 1)
