"""The binding op classes as PopART's class hierarchy gives them (``names.py``,
``op/classes.py``: made from the op registry), and the op and tensor methods PopXL's tests
read: ``RemoteLoadOp`` / ``RemoteLoadInplaceOp``, ``RemoteCodeLoadOp``, ``SubtractOp``,
``DetachInplaceOp``, ``MatMulPartialsType``, ``AccumulateBaseOp.getFactor``,
``Op.isOptimizerOp``, ``Tensor.isAliased``; the programs run against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import fetch

import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from tremula.popxl._ir.op.classes import class_named, classes_in
from tremula.popxl.ops.base import OPS


def _ops(g: popxl.Graph, cls: type) -> list:
    return [op for op in g._pb_graph.getOps() if isinstance(op, cls)]


def test_every_registry_op_has_a_class_in_its_namespace() -> None:
    """A class per op type of the registry, found by name in its module, and the bases
    PopART's in-place classes derive from."""
    from tremula.popxl._ir.names import DERIVED, op_name

    for op_type in [*OPS, *DERIVED.values()]:
        name = op_name(op_type)
        assert class_named(name.cls, name.namespace).__name__ == name.cls
    assert "RemoteLoadOp" in classes_in("exchange") and "SubOp" not in classes_in("")


def test_remote_load_is_a_remote_load_op_and_remote_load_inplace_derives_from_it() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g, popxl.in_sequence():
        buf = popxl.remote_buffer((2, 3), popxl.float32, 2)
        w = popxl.variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
        ops.remote_store(buf, 1, w)
        x = ops.remote_load(buf, 1, "x")
        y = popxl.variable(np.zeros((2, 3), np.float32), name="y")
        z = ops.remote_load_(buf, 1, y)
    (load,) = [op for op in _ops(g, _ir.op.exchange.RemoteLoadOp) if op.opType() == "RemoteLoad"]
    (inplace,) = _ops(g, _ir.op.exchange.RemoteLoadInplaceOp)
    assert issubclass(_ir.op.exchange.RemoteLoadInplaceOp, _ir.op.exchange.RemoteLoadOp)
    assert issubclass(_ir.op.exchange.RemoteLoadOp, _ir.op.exchange.ExchangeBaseOp)
    assert inplace.opType() == "RemoteLoadInplace" and inplace.modifiesIndex(0)
    assert not load.modifiesIndex(0) and load.outId(0) == x.id
    # RemoteLoad gives a new tensor; the init it loads "into" is not an alias of it
    assert not load.inTensor(0).isAliased() and y._pb_tensor.isAliased()
    got_x, got_z, got_y = fetch(ir, x, z, y)
    want = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(got_x, want)
    np.testing.assert_array_equal(got_z, want)
    np.testing.assert_array_equal(got_y, want)  # remote_load_ wrote y


def test_remote_load_into_a_tensor_that_is_read_again_does_not_write_it() -> None:
    """A RemoteLoad built through the bindings onto a tensor others read loads into a new
    tensor: the input keeps its value."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        buf = popxl.remote_buffer((3,), popxl.float32, 1)
        ops.remote_store(buf, 0, popxl.variable(np.array([7, 8, 9], np.float32)))
        x = ops.remote_load(buf, 0)
        (load,) = _ops(g, _ir.op.exchange.RemoteLoadOp)
        a = popxl.variable(np.array([1, 2, 3], np.float32), name="a")
        load.disconnectInTensor(0)
        load.connectInTensor(0, a.id)
        b = a + 0  # reads a after the load
    got_x, got_b = fetch(ir, x, b)
    np.testing.assert_array_equal(got_x, [7, 8, 9])
    np.testing.assert_array_equal(got_b, [1, 2, 3])


def test_remote_code_load_is_an_exchange_op() -> None:
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        g = ir.create_graph(lambda t: t + 1, popxl.TensorSpec((2,), popxl.float32))
        ops.remote_code_load(g, "executable")
    (op,) = _ops(main, _ir.op.exchange.RemoteCodeLoadOp)
    assert op.opType() == "RemoteCodeLoad" and isinstance(op, _ir.op.exchange.ExchangeBaseOp)


def test_subtract_op_class_names() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32))
        b = popxl.variable(np.ones(2, np.float32))
        ops.sub(a, b)
    (op,) = _ops(ir.main_graph, _ir.op.SubtractOp)
    assert op.opType() == "Sub" and type(op).__name__ == "SubtractOp"
    assert _ir.op.SubtractLhsInplaceOp.__name__ == "SubtractLhsInplaceOp"


def test_detach_inplace_aliases_its_input_and_stops_gradients() -> None:
    ir = popxl.Ir()
    main = ir.main_graph
    with main, popxl.in_sequence():
        a = popxl.variable(np.array([1, 2, 3], np.float32), name="a")
        d = ops.detach_(a)
        ops.add_(d, popxl.constant(np.array([10, 10, 10], np.float32)))  # writes a through d
    (op,) = _ops(main, _ir.op.DetachInplaceOp)
    assert op.opType() == "DetachInplace" and a._pb_tensor.isAliased()
    (got_a,) = fetch(ir, a)
    np.testing.assert_array_equal(got_a, [11, 12, 13])

    ir = popxl.Ir()
    g = ir.create_graph(lambda x: x * ops.detach_(x), popxl.TensorSpec((3,), popxl.float32))
    grad = popxl.transforms.autodiff(g)
    with ir.main_graph:
        x = popxl.variable(np.array([1, 2, 3], np.float32))
        seed = popxl.constant(np.ones(3, np.float32))
        info = ops.call_with_info(g, x)
        (dx,) = ops.call(grad.graph, seed, inputs_dict=grad.inputs_dict(info))
    (got,) = fetch(ir, dx)
    np.testing.assert_array_equal(got, [1, 2, 3])  # d(x * stop(x))/dx = stop(x)


@pytest.mark.parametrize(
    "partials, want", [(None, "FLOAT"), (popxl.float32, "FLOAT"), (popxl.float16, "HALF")]
)
def test_matmul_partials_type(partials, want) -> None:
    assert [(m.name, int(m)) for m in _ir.op.MatMulPartialsType] == [("HALF", 0), ("FLOAT", 1)]
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 2), np.float16))
        ops.matmul(a, a, partials_type=partials)
    (op,) = _ops(ir.main_graph, _ir.op.MatMulOp)
    assert op.getPartialsType() == getattr(_ir.op.MatMulPartialsType, want)
    op.setPartialsType(_ir.op.MatMulPartialsType.HALF)
    assert op.attrs["partials_type"] is popxl.float16


def test_accumulate_factor_as_popart_s_optimizer_value() -> None:
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        t = popxl.variable(np.ones(2, np.float32), name="t")
        x = popxl.variable(np.ones(2, np.float32), name="x")
        f = popxl.variable(np.array(0.5, np.float32), name="f")
        ops.var_updates.accumulator_scale_(t, 0.25)
        ops.var_updates.accumulator_scale_(t, f)
        ops.var_updates.accumulator_zero_(t)
        ops.var_updates.accumulate_(t, x)
        ops.var_updates.accumulate_(t, x, 3.0)
        ops.add(t, x)
    scales = _ops(main, _ir.op.AccumulatorScaleOp)
    assert [(s.getFactor().val(), s.getFactor().isConst()) for s in scales] == [
        (0.25, True),
        (0.0, False),  # a Tensor factor: input 2, OptimizerValue(0, False) on the op
        (0.0, True),
    ]
    accs = _ops(main, _ir.op.AccumulateOp)
    assert [a.getFactor() for a in accs] == [_ir.OptimizerValue(), _ir.OptimizerValue(3.0, True)]
    assert all(isinstance(a, _ir.op.AccumulateBaseOp) for a in [*scales, *accs])
    optimizer = [op.isOptimizerOp() for op in main._pb_graph.getOps()]
    assert optimizer == [True] * 5 + [False]


def test_is_aliased_by_views_and_in_place_ops() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 3), np.float32), name="a")
        b = popxl.variable(np.ones((2, 3), np.float32), name="b")
        c = popxl.variable(np.ones((2, 3), np.float32), name="c")
        ops.reshape_(a, (3, 2))  # a view of a
        ops.add_(b, c)  # writes b: its output aliases b, not c
        s = ops.reshape(c, (6,))  # a copy
    assert a._pb_tensor.isAliased() and b._pb_tensor.isAliased()
    assert not c._pb_tensor.isAliased() and not s._pb_tensor.isAliased()
