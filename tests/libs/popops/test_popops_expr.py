"""Expressions: operators and named constructors, canonical strings, structural equality,
and type inference against the op table."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.libs.popops import expr as E
from tremula.libs.popops import ops
from tremula.libs.popops.expr import (
    BinaryOpType,
    Cast,
    Const,
    ExprError,
    PlaceHolder,
    TernaryOpType,
    UnaryOpType,
    _1,
    _2,
    _3,
)
from tremula.libs.popops.expr_eval import compile_run, evaluate, infer


def test_operators_build_the_poplibs_nodes():
    cases = {
        _1 + _2: "ADD(_1,_2)",
        _1 - 2: "SUBTRACT(_1,2)",
        2.5 * _1: "MULTIPLY(2.5,_1)",
        _1 / _2: "DIVIDE(_1,_2)",
        _1 % 3: "REMAINDER(_1,3)",
        _1**_2: "POWER(_1,_2)",
        1 - _1: "SUBTRACT(1,_1)",
        -_1: "NEGATE(_1)",
        abs(_1): "ABSOLUTE(_1)",
        ~_1: "BITWISE_NOT(_1)",
        _1 & _2: "BITWISE_AND(_1,_2)",
        _1 | 1: "BITWISE_OR(_1,1)",
        _1 ^ _2: "BITWISE_XOR(_1,_2)",
        _1 << 2: "SHIFT_LEFT(_1,2)",
        _1 >> 2: "SHIFT_RIGHT(_1,2)",
        _1 < _2: "LESS_THAN(_1,_2)",
        _1 <= 0: "LESS_THAN_EQUAL(_1,0)",
        _1 > _2: "GREATER_THAN(_1,_2)",
        _1 >= True: "GREATER_THAN_EQUAL(_1,true)",
    }
    for e, text in cases.items():
        assert e.canonical == text


def test_named_constructors_equal_operator_forms():
    assert E.Add(_1, E.Mul(_2, 3)) == _1 + _2 * 3
    assert E.Select(_1, _2, _3).canonical == "SELECT(_1,_2,_3)"
    assert E.Clamp(_1, 0, 1).canonical == "CLAMP(_1,0,1)"
    assert E.Exp(E.Neg(_1)) == E.Exp(-_1)
    assert E.Div is E.Divide and E.Equal(_1, _2).canonical == "EQUAL(_1,_2)"


def test_every_op_type_has_a_table_record_and_a_constructor():
    ctors = {
        getattr(E, n).__doc__.strip("`").split("(")[0]
        for n in dir(E)
        if n[:1].isupper() and callable(getattr(E, n)) and (getattr(E, n).__doc__ or "")[:2] == "``"
    }
    for kind in (UnaryOpType, BinaryOpType, TernaryOpType):
        for op in kind:
            assert op in ops.BY_OP, op
            assert op.name in ctors, op


def test_structural_equality_hash_and_truth_value():
    a, b = _1 * 2 + _2, E.Add(E.Mul(PlaceHolder(1), Const(2)), _2)
    assert a == b and hash(a) == hash(b) and a != _1 * 2
    assert {a: 1}[b] == 1
    with pytest.raises(ExprError, match="truth value"):
        bool(_1 < _2)
    assert repr(-_1) == "expr<NEGATE(_1)>"


def test_constants_canonical_forms():
    assert Const(3).canonical == "3" and Const(2.0).canonical == "2.0"
    assert Const(True).canonical == "true" and Const(float("nan")).canonical == "nan"
    assert Const(1.5, poplar.HALF).canonical == "half:1.5"
    assert Const(1, poplar.UNSIGNED_INT).canonical == "uint32:1"
    assert Cast(_1, "unsigned int").canonical == "CAST<uint32>(_1)"
    assert Const(3) != Const(3.0)


def test_bad_nodes():
    with pytest.raises(ExprError, match="index"):
        PlaceHolder(0)
    with pytest.raises(ExprError, match="dict"):
        _1 + {1: 2}
    with pytest.raises(ExprError, match="takes 2"):
        E.make(BinaryOpType.ADD, _1)
    with pytest.raises(ExprError, match="not a bool"):
        Const("x")


def test_helpers():
    e = E.Select(_3 + 1, _1, _2 < 0)
    assert E.placeholders(e) == {1, 2, 3}
    assert E.count_ops(e) == 3
    assert E.substitute(e, {3: 1, 1: 3}).canonical == "SELECT(ADD(_1,1),_3,LESS_THAN(_2,0))"


# ---- type inference ----

F, H, I, B, U = poplar.FLOAT, poplar.HALF, poplar.INT, poplar.BOOL, poplar.UNSIGNED_INT


@pytest.mark.parametrize(
    "e, types, want",
    [
        (_1 + _2, (F, F), F),
        (_1 + 1, (H,), H),
        (_1 < 0.5, (H,), B),
        (E.Select(_1, 0, _2), (I, B), I),
        (E.Select(1.5, 2, _1), (B,), F),
        (E.IsFinite(_1), (H,), B),
        (E.Cast(_1, H) * 2, (I,), H),
        (E.And(_1 < _2, E.Not(_3)), (F, F, B), B),
        (_1 >> 3, (U,), U),
        (Const(1) + Const(2), (), I),
    ],
)
def test_infer_result_types(e, types, want):
    assert infer(e, types).dtype is want


def test_constants_become_scalars_of_the_operand_type():
    typed = infer(_1 * 0.1, (H,))
    const = typed.args[1]
    assert const.value.dtype == H.numpy and float(const.value) == float(H.numpy.type(0.1))


@pytest.mark.parametrize(
    "e, types, match",
    [
        (_1 + _2, (F, H), "operand 2"),
        (E.Exp(_1), (I,), "not supported"),
        (E.Select(_1, _2, _3), (F, F, F), "condition is bool"),
        (_1 + 2.5, (I,), "2.5"),
        (_1 + 256, (poplar.UNSIGNED_CHAR,), "256"),
        (_1 + _3, (F, F), "_3"),
        (E.And(_1, _2), (F, F), "LOGICAL_AND"),
    ],
)
def test_infer_errors(e, types, match):
    with pytest.raises(ExprError, match=match):
        infer(e, types)


_COMPILED = [
    (E.Relu(E._1 + E._2), (poplar.FLOAT, poplar.FLOAT)),
    (E._3 * E.Cast(E.Gt(E._1, E._2), poplar.FLOAT), (poplar.FLOAT, poplar.FLOAT, poplar.FLOAT)),
    (E.Exp(E._1 - E._2) / 3.0, (poplar.HALF, poplar.HALF)),
    (E.Select(E._1, E.Sqrt(E.Abs(E._2)), E.Lt(E._1, 0.5)), (poplar.HALF, poplar.HALF)),
    (E.Cast(E._1 * 1.5, poplar.INT) + E._2, (poplar.FLOAT, poplar.INT)),
    (E.Cast(E._1, poplar.HALF), (poplar.FLOAT,)),
    (E._1, (poplar.FLOAT,)),
    (E.Equal(E._1, E._2), (poplar.INT, poplar.INT)),
]


@pytest.mark.parametrize("e, types", _COMPILED)
def test_compiled_runs_match_evaluate(e, types):
    """``compile_run`` (prepared once over fixed arrays, run after the arrays are refilled)
    gives exactly ``evaluate``'s numbers, broadcasting included, in place or not."""
    typed = infer(e, types)
    rng = np.random.default_rng(4)
    shapes = [(5, 8), (1, 8), (5, 1)]
    inputs = [np.empty(shapes[i % 3], dtype=t.numpy) for i, t in enumerate(types)]
    out = np.empty((5, 8), dtype=typed.dtype.numpy)
    run = compile_run(typed, inputs, out)
    for _ in range(3):
        for a in inputs:
            a[...] = rng.uniform(-4, 4, a.shape).astype(a.dtype)
        run()
        want = np.empty_like(out)
        evaluate(typed, inputs, want)
        np.testing.assert_array_equal(out, want)
    # in place: the output is the first input (same shape and type)
    if inputs[0].shape == out.shape and inputs[0].dtype == out.dtype:
        x = inputs[0]
        x[...] = rng.uniform(-4, 4, x.shape).astype(x.dtype)
        want = np.empty_like(out)
        evaluate(typed, inputs, want)
        compile_run(typed, inputs, x)()
        np.testing.assert_array_equal(x, want)


_COMPARE_CASTS = [
    (E.Cast(E.Gt(E._1, E._2), poplar.FLOAT), (poplar.FLOAT, poplar.FLOAT)),
    (E._2 * E.Cast(E.Gt(E._1, 0.0), poplar.FLOAT), (poplar.FLOAT, poplar.FLOAT)),
    (E.Cast(E.Lt(E._1, 0.5), poplar.HALF) - E._2, (poplar.HALF, poplar.HALF)),
    (E.Cast(E.Equal(E._1, E._2), poplar.FLOAT), (poplar.INT, poplar.INT)),
    (E.Cast(E.Gte(E._1, E._2), poplar.FLOAT), (poplar.HALF, poplar.HALF)),
    (E.Cast(E.Lte(E._1, E._2), poplar.INT), (poplar.FLOAT, poplar.FLOAT)),
]


@pytest.mark.parametrize("e, types", _COMPARE_CASTS)
def test_a_comparison_cast_to_floats_keeps_the_bits_of_the_bool_temporary(e, types):
    """A comparison cast to floats is compiled as the comparison writing floats (issue 27:
    one NumPy call less, e.g. a ReLU's gradient mask): the bytes are ``evaluate``'s (which
    casts a bool temporary), NaNs and signed zeros included, in place or not."""
    typed = infer(e, types)
    rng = np.random.default_rng(7)
    inputs = [np.empty((6, 7), dtype=t.numpy) for t in types]
    out = np.empty((6, 7), dtype=typed.dtype.numpy)
    run = compile_run(typed, inputs, out)
    specials = np.array([np.nan, -0.0, 0.0, 0.5, -np.inf, np.inf, 1.0])
    for trial in range(3):
        for a in inputs:
            vals = rng.uniform(-2, 2, a.shape)
            if a.dtype.kind == "f":
                vals[trial] = specials
            a[...] = vals.astype(a.dtype) if a.dtype.kind == "f" else np.round(vals)
        inputs[-1][0, :3] = inputs[0][0, :3]  # some equal pairs
        run()
        want = np.empty_like(out)
        evaluate(typed, inputs, want)
        assert out.tobytes() == want.tobytes()
    x = inputs[0]
    if x.dtype == out.dtype:  # in place: the output is the first operand
        want = np.empty_like(out)
        evaluate(typed, inputs, want)
        compile_run(typed, inputs, x)()
        assert x.tobytes() == want.tobytes()


def test_a_comparison_cast_to_floats_is_one_call():
    from tremula.libs.popops.expr_eval import compile_steps

    typed = infer(E.Cast(E.Gt(E._1, E._2), poplar.FLOAT), (poplar.FLOAT, poplar.FLOAT))
    a, b = np.array([1.0, np.nan, -1.0], np.float32), np.array([0.0, 0.0, -0.0], np.float32)
    out = np.full(3, 7.0, np.float32)
    step = compile_steps(typed, [a, b], out)
    assert getattr(step, "func", None) is np.greater  # no bool temporary and cast
    step()
    assert out.tobytes() == np.array([1.0, 0.0, 0.0], np.float32).tobytes()
