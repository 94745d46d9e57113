"""What PopXL's ops accept when made and refuse, and where (tests/integration/popxl/ops/**
build ops they never run): PopART's op setups take any dtype, Poplar refuses one when the
session is built; shape errors of the C++ setups are popart_exception; input checks in
PopXL's words. See also test_popxl_ops_fidelity.py (op types, classes, counts)."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import fetch

import popart
import popxl
import popxl.ops as ops


def _types(g: popxl.Graph) -> list[tuple[str, str]]:
    return [(op.opType(), type(op).__name__) for op in g._pb_graph.getOps()]


# ---- dtypes: PopART's element-wise ops take any dtype when made; Poplar refuses at build ----


@pytest.mark.parametrize(
    "build, op_type",
    [
        (ops.exp, "Exp"),
        (ops.gelu_, "GeluInplace"),
        (ops.isnan, "IsNaN"),
        (lambda a: ops.pow(a, a), "Pow"),
        (lambda a: ops.scaled_add(a, a, 0.5, 0.8), "ScaledAdd"),
    ],
)
def test_ops_on_dtypes_poplar_refuses_are_built_and_refused_by_the_session(build, op_type) -> None:
    """``popxl.variable(1)`` is int32: the op is made (as PopART makes it, its setup copying
    the input's info) and counted; the session refuses it, naming the op."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(1, name="a")
        out = build(a)
    assert len(g.tensors) == 2 and out.dtype == (popxl.bool if op_type == "IsNaN" else a.dtype)
    assert [t for t, _ in _types(g)] == [op_type]
    with pytest.raises((TypeError, ValueError), match=rf"lowering op {op_type} .*int32"):
        fetch(ir, out)


def test_scaled_add_of_integers_with_whole_scales_runs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1, -2, 3]), popxl.int32)
        y = popxl.variable(np.array([4, 5, -6]), popxl.int32)
        out = ops.scaled_add(x, y, 2, 3)
    (got,) = fetch(ir, out)
    np.testing.assert_array_equal(got, [14, 11, -12])


@pytest.mark.parametrize(
    "build, op_type",
    [
        (lambda t: ops.softmax(t, 1), "Softmax"),
        (lambda t: ops.max_pool(t, (2, 2)), "MaxPool"),
        (lambda t: ops.logsumexp(t), "ReduceLogSumExp"),
        (lambda t: ops.dropout(t, popxl.variable(np.array([1, 2]), popxl.uint32), 0.5), "Dropout"),
    ],
)
def test_float_only_ops_of_integers_are_made_and_refused_when_lowered(build, op_type) -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = popxl.variable(np.ones((1, 2, 4, 4), np.int32), name="ints")
        out = build(t)
    assert op_type in [ty for ty, _ in _types(g)] and out.dtype == popxl.int32
    with pytest.raises(
        TypeError, match=rf"lowering op {op_type} .*input 0 'ints' must be float16 or float32"
    ):
        fetch(ir, out)


# ---- input checks in PopXL's words (check_in_graph) ----


@pytest.mark.parametrize(
    "call",
    [
        lambda buf: ops.reshape([1.0, 2.0], (2,)),
        lambda buf: ops.flatten_([1.0, 2.0]),
        lambda buf: ops.transpose([1.0, 2.0]),
        lambda buf: ops.remote_store(buf, 0, [1.0, 2.0]),
        lambda buf: ops.host_store(popxl.d2h_stream((2,), popxl.float32), [1.0, 2.0]),
    ],
)
def test_an_input_that_is_not_a_tensor_is_a_type_error_in_popxls_words(call) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((2,), popxl.float32, 1)
        with pytest.raises(
            TypeError, match=r"The input `t` is not a Tensor\. Type: <class 'list'>\. Value"
        ):
            call(buf)


def test_a_tensor_of_another_graph_is_refused_in_popxls_words() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(1.0, name="a")
    sub = ir.create_empty_graph("sub")
    with sub, pytest.raises(ValueError, match=r"The input tensor `t` is not in the current Graph"):
        ops.exp(a)
    assert sub._pb_graph.getOps() == []


@pytest.mark.parametrize(
    "update, match",
    [
        (lambda t, row: ops.var_updates.accumulate_(t, row, 2.0), r"accumulate: 'row'"),
        (lambda t, row: ops.var_updates.copy_var_update_(t, row), r"copy_var_update_: 'row'"),
    ],
)
def test_var_update_operand_of_another_shape_is_made_and_refused_when_lowered(
    update, match
) -> None:
    """PopART's VarUpdateOp::setup copies input 0's info: no shape check when made (spec
    1.0); Poplar's scaled add and copy refuse the mismatch when the session is built."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = popxl.variable(np.zeros((2, 3), np.float32), name="t")
        row = popxl.variable(np.ones(3, np.float32), name="row")
        out = update(t, row)
    assert out.shape == (2, 3) and len(g.tensors) == 3
    with pytest.raises(ValueError, match=match + r" .*\(3,\)\) does not match 't'"):
        popxl.Session(ir, "ipu_model")


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda t, i, s: ops.reshape(t, (4,)), r"cannot become \(4,\)"),
        (lambda t, i, s: ops.transpose(t, (0, 0)), "is not a permutation"),
        (lambda t, i, s: ops.gather(t, i, axis=3), "axis 3 is out of range"),
        (lambda t, i, s: ops.softmax(t, 2), "axis 2 is out of range"),
        (lambda t, i, s: ops.sum(t, 2), "axis 2 is out of range"),
        (lambda t, i, s: ops.concat([t, t], 2), "axis 2 is out of range"),
        (lambda t, i, s: ops.topk(t, 5, 1), "k=5 must lie in"),
        (lambda t, i, s: ops.matmul(s, t), "at least one dimension"),
    ],
)
def test_shape_errors_of_op_setup_are_popart_exceptions_and_value_errors(build, match) -> None:
    """PopART's C++ op setups refuse these with popart_exception; Tremula's error is that and
    a ValueError (PopXL programs catch either), and the graph keeps nothing of the call."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = popxl.variable(np.ones((2, 3), np.float32))
        i = popxl.variable(np.array([0]), popxl.int32)
        s = popxl.variable(1.0)
        before = len(g.tensors)
        with pytest.raises(popart.popart_exception, match=match) as refused:
            build(t, i, s)
    assert isinstance(refused.value, ValueError)
    assert len(g.tensors) == before and g._pb_graph.getOps() == []


def test_a_drop_probability_out_of_range_is_a_popart_exception() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.ones(4, np.float32))
        seed = popxl.variable(np.array([1, 2]), popxl.uint32)
        for p in (1.0, -0.1):
            with pytest.raises(popart.popart_exception, match=r"must lie in \[0, 1\)") as e:
                ops.dropout(t, seed, p)
            assert isinstance(e.value, ValueError)
