"""``Graph.topoCons()`` as PopART's ``TopoCons`` bindings: insert (tied or not), contains,
remove (one constraint or all of an op's), hasConstraint, getBefores / getAfters and their
tied forms, transfer and transferToMultiple; the graph's op order (what runs) keeps to the
constraints and a cycle is refused, leaving the constraints as they were."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.errors import PopartException

_ir = pytest.importorskip("popart._internal.ir")


def _ops(n: int):
    """A main graph with ``n`` unconnected Identity ops made through the bindings."""
    ir = _ir.Ir()
    main = ir.getMainGraph()
    opid = _ir.OperatorIdentifier("ai.onnx", "Identity", 1, _ir.NumInputs(1, 1), 1)
    return main, [main.createOp_IdentityOp(opid, _ir.Settings(main, f"op{i}")) for i in range(n)]


def test_insert_moves_ops_and_remove_takes_constraints_away() -> None:
    g, (a, b, c) = _ops(3)
    tc = g.topoCons()
    tc.insert(c, a)
    assert g.getOpSchedule(True) == [b, c, a]  # a moved after c, b kept where it was
    assert tc.contains(c, a) and not tc.contains(a, c)
    assert (tc.getBefores(a), tc.getAfters(c)) == ([c], [a])
    assert tc.hasConstraint(a) and not tc.hasConstraint(b)
    tc.remove(c, a)
    assert not tc.contains(c, a) and not tc.hasConstraint(c)
    tc.insert(a, b)
    tc.insert(c, b)
    tc.remove(b)
    assert not any(tc.hasConstraint(op) for op in (a, b, c))


def test_tied_constraints() -> None:
    g, (a, b, c) = _ops(3)
    tc = g.topoCons()
    tc.insert(a, b, True)
    tc.insert(a, c)
    assert tc.getAfters(a) == [b, c]
    assert (tc.getTiedAfters(a), tc.getTiedBefores(b), tc.getTiedBefores(c)) == ([b], [a], [])


def test_transfer_and_transfer_to_multiple() -> None:
    g, (a, b, c, d, e) = _ops(5)
    tc = g.topoCons()
    tc.insert(a, b, True)
    tc.insert(b, c)
    tc.transfer(b, d, False)  # keep b's
    assert tc.contains(a, d) and tc.contains(d, c) and tc.getTiedBefores(d) == [a]
    assert tc.contains(a, b)
    tc.transferToMultiple(b, [e])
    assert tc.contains(a, e) and tc.contains(e, c) and not tc.hasConstraint(b)


def test_a_cycle_is_refused_and_changes_nothing() -> None:
    g, (a, b, c) = _ops(3)
    tc = g.topoCons()
    tc.insert(a, b)
    tc.insert(c, a)
    with pytest.raises(PopartException, match="cycle"):
        tc.insert(b, c)
    assert not tc.contains(b, c) and g.getOpSchedule(True) == [c, a, b]
    tc.remove(c, a)
    tc.insert(b, c)
    with pytest.raises(PopartException, match="cycle"):
        tc.transfer(a, c)  # c would run before b, which runs before c
    assert tc.contains(a, b) and tc.contains(b, c) and not tc.contains(c, b)


def test_constraints_order_what_runs() -> None:
    """Two in-place writes to one variable, ordered through TopoCons: the result is the
    order the constraint says (x * 2 + 1 against (x + 1) * 2)."""
    for first in ("mul", "add"):
        ir = popxl.Ir()
        with ir.main_graph:
            x = popxl.variable(np.array([3.0], np.float32))
            added = ops.add_(x, popxl.constant(np.array([1.0], np.float32)))
            mul_src = popxl.constant(np.array([2.0], np.float32))
        pb = ir.main_graph._pb_graph
        add_op = added._pb_tensor.getProducer()
        # a second in-place write to x, made through the bindings: only a constraint
        # orders the two
        mul_op = pb.createConnectedOp_MulLhsInplaceOp(
            {0: x.id, 1: mul_src.id}, {0: "mul_out"}, _ir.Settings(pb, "mul")
        )
        if first == "mul":
            pb.topoCons().insert(mul_op, add_op)
        else:
            pb.topoCons().insert(add_op, mul_op)
        with popxl.Session(ir, "ipu_model") as session:
            session.run()
            got = session.get_tensor_data(x)
        expected = (3.0 * 2 + 1) if first == "mul" else (3.0 + 1) * 2
        np.testing.assert_allclose(got, [expected])
