"""Gradient sums as PopART makes them: ``autodiff`` sums the gradient contributions of a
tensor used more than once with one variadic ``Sum`` op (``GradGrowerSumOp``), whose
output is the gradient; ``decompose_sum`` turns each ``Sum`` of 3+ inputs into an
``Init`` and a chain of ``AddLhsInplace`` ops in schedule order (``DecomposeSum``). Op
counts and types before and after, and numbers against NumPy (values, and the bits of the
left fold)."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popart._internal import ir as _ir
from tremula.lowering import Lowerer

F32 = np.float32
X = np.array([0.5, -1.0, 2.0, 0.25], F32)
#: the functions of a tensor used 1, 2 and 3 times, and their derivatives in float64
USES = [ops.sin, ops.cos, ops.exp]
DERIVATIVES = [np.cos, lambda x: -np.sin(x), np.exp]


def _used(n: int) -> Callable[[popxl.Tensor], popxl.Tensor]:
    return lambda a: reduce(ops.add, [f(a) for f in USES[:n]])


def _types(graph: popxl.Graph) -> list[str]:
    """The op types PopART gives the graph's ops, in schedule order (the bindings')."""
    return [op.opType() for op in graph._pb_graph.getOpSchedule()]


def _program(fwd_fn, x, decompose, seed=None):
    """An Ir calling ``fwd_fn``'s graph and its grad graph on the variable ``x`` (the
    gradient seed ``seed``, default ones), the gradient of ``x`` streamed out."""
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(x)
        fwd = ir.create_graph(fwd_fn, v)
        info = popxl.transforms.autodiff(fwd)
        if decompose:
            assert popxl.transforms.decompose_sum(info.graph) is info.graph
        site = ops.call_with_info(fwd, v)
        g = np.ones(fwd.outputs[0].shape, x.dtype) if seed is None else seed
        (gx,) = ops.call(info.graph, g, inputs_dict=info.inputs_dict(site))
        out = popxl.d2h_stream(gx.shape, gx.dtype, name="gx")
        ops.host_store(out, gx)
    return ir, info, out


def _run(ir, out, device="ipu_model"):
    with popxl.Session(ir, device) as session:
        return session.run()[out]


@pytest.mark.parametrize("uses", [1, 2, 3])
def test_autodiff_sums_the_contributions_with_one_sum_op(uses):
    _, info, _ = _program(_used(uses), X, decompose=False)
    types = _types(info.graph)
    sums = [op for op in info.graph.ops if op.type == "Sum"]
    assert "Add" not in types  # no chains of two-input additions
    if uses == 1:
        assert sums == []
        return
    (s,) = sums
    assert types.count("Sum") == 1 and isinstance(s, _ir.op.SumOp)
    assert len(s.inputs) == uses
    (grad,) = info.graph.outputs
    assert s.outputs[0] is grad and grad.name == "Gradient___a"


@pytest.mark.parametrize("uses", [1, 2, 3])
def test_decompose_sum_makes_init_and_an_inplace_add_per_summand(uses):
    _, plain, _ = _program(_used(uses), X, decompose=False)
    ir, info, out = _program(_used(uses), X, decompose=True)
    types = _types(info.graph)
    if uses < 3:  # nothing to split: one op or one addition
        assert types == _types(plain.graph)
        return
    assert "Sum" not in types
    assert types.count("Init") == 1 and types.count("AddLhsInplace") == 3
    schedule = info.graph._pb_graph.getOpSchedule()
    adds = [i for i, op in enumerate(schedule) if op.opType() == "AddLhsInplace"]
    init = schedule[adds[0] - 1]
    assert init.opType() == "Init" and init.outputs[0].shape == X.shape
    for i in adds:  # each partial gradient is added right after it is made
        add = schedule[i]
        assert add.inputs[1].producer is schedule[i - 1] or i - 1 == adds[0] - 1
        assert isinstance(add, _ir.op.AddLhsInplaceOp)
    assert [schedule[i].inputs[0] for i in adds[1:]] == [schedule[i].outputs[0] for i in adds[:-1]]
    # the last addition makes the gradient tensor, same id, still the graph's output
    (grad,) = info.graph.outputs
    assert grad.name == "Gradient___a" and grad.producer is schedule[adds[-1]]
    expected = sum(d(X.astype(np.float64)) for d in DERIVATIVES[:uses])
    np.testing.assert_allclose(_run(ir, out), expected, rtol=1e-6)


#: summands whose sum rounds differently in another order, -0.0s and a tiny one
SUMMANDS = {
    "float32": [
        [1.0, 1e8, -0.0, 3.0, 2.0**-24],
        [1e8, 1.0, -0.0, -3.0, 1.0],
        [-1e8, -1e8, -0.0, 0.5, 1.0],
    ],
    "float16": [
        [1.0, 2048.0, -0.0, 3.0, 2.0**-11],
        [2048.0, 1.0, -0.0, -3.0, 1.0],
        [-2048.0, -2048.0, -0.0, 0.5, 1.0],
    ],
}


@pytest.mark.parametrize("dtype", sorted(SUMMANDS))
@pytest.mark.parametrize("device", ["cpu", "ipu_model"])
def test_the_sum_is_the_left_fold_of_the_contributions_bit_for_bit(dtype, device):
    """``a c1 + a c2 + a c3`` with the seed 1: the contributions are c3, c2, c1 (autodiff
    differentiates the last op first); the Sum adds them from the left, rounding after each
    addition, and the decomposed chain gives the same bits but for ``0 + (-0.0)``."""
    c = np.array(SUMMANDS[dtype], dtype)

    def fwd(a):
        return reduce(ops.add, [a * popxl.constant(row) for row in c])

    x = np.ones(5, dtype)
    left_fold = (c[2] + c[1]) + c[0]
    assert not np.array_equal(left_fold, (c[0] + c[1]) + c[2])  # the order shows
    ir, _, out = _program(fwd, x, decompose=False)
    got = _run(ir, out, device)
    assert got.dtype == dtype and got.tobytes() == left_fold.tobytes()  # -0.0 + -0.0: -0.0
    ir, _, out = _program(fwd, x, decompose=True)
    got = _run(ir, out, device)
    assert got.tobytes() == (np.zeros(5, dtype) + left_fold).tobytes()
    assert not np.signbit(got[2])


def test_a_program_with_and_without_decompose_sum_gives_the_same_numbers():
    """A two-layer net reusing its input and weight: every gradient sum, before and after
    the transform, on the IPU Model."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((6, 6)).astype(F32) * 0.5
    xs = rng.standard_normal((4, 6)).astype(F32)

    def fwd(a):
        wc = popxl.constant(w)
        h = ops.tanh(a @ wc) + a
        return ops.gelu(h @ wc) * a + h

    results = []
    for decompose in (False, True):
        ir, info, out = _program(fwd, xs, decompose)
        results.append(_run(ir, out))
        sizes = sorted(len(op.inputs) for op in info.graph.ops if op.type == "Sum")
        assert sizes == ([2] if decompose else [2, 3])  # h used twice, a three times
    np.testing.assert_array_equal(results[0], results[1])


def test_sums_in_a_called_graph_and_across_calls():
    """``x`` goes into two calls of an inner graph that uses its input three times: the
    inner grad graph sums three contributions, the outer one the two calls' gradients;
    decompose_sum changes the graph it is given only."""
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(X)
        inner = ir.create_graph(_used(3), popxl.TensorSpec(X.shape, popxl.float32))
        outer = ir.create_graph(lambda a: ops.call(inner, a)[0] * ops.call(inner, a * 2.0)[0], v)
        infos = popxl.transforms.autodiff(outer, return_all_grad_graphs=True)
        grad_outer, grad_inner = infos[outer].graph, infos[inner].graph
        assert _types(grad_inner).count("Sum") == 1
        (s,) = [op for op in grad_outer.ops if op.type == "Sum"]
        assert sorted(t.producer.type for t in s.inputs) == ["Call", "Mul"]
        popxl.transforms.decompose_sum(grad_inner)
        assert "Sum" not in _types(grad_inner) and _types(grad_outer).count("Sum") == 1
        site = ops.call_with_info(outer, v)
        (gx,) = ops.call(
            infos[outer].graph, np.ones(4, F32), inputs_dict=infos[outer].inputs_dict(site)
        )
        out = popxl.d2h_stream(gx.shape, gx.dtype, name="gx")
        ops.host_store(out, gx)
    x = X.astype(np.float64)

    def f(t):
        return np.sin(t) + np.cos(t) + np.exp(t)

    def df(t):
        return np.cos(t) - np.sin(t) + np.exp(t)

    expected = df(x) * f(2 * x) + f(x) * df(2 * x) * 2
    np.testing.assert_allclose(_run(ir, out), expected, rtol=1e-5)


def test_sum_lowers_as_one_compute_set_and_one_input_as_a_copy(monkeypatch):
    """PopART's SumOpx: one popops map of all the inputs (a two-input chain of additions
    would be two compute sets); of one input, a copy and no compute set."""
    monkeypatch.setattr(Lowerer, "fuse_elementwise", False)  # the Sum's own lowering
    from tremula.popxl.ops.base import create_op

    a, b, c = (np.full(8, k, F32) for k in (1.5, 2.25, -4.0))
    for inputs, expected in (((a, b, c), (a + b) + c), ((a,), a)):
        ir = popxl.Ir()
        with ir.main_graph:
            ts = [popxl.variable(x, name=f"v{k}") for k, x in enumerate(inputs)]
            (s,) = create_op("Sum", ts, names=["total"])
            out = popxl.d2h_stream(s.shape, s.dtype, name="out")
            ops.host_store(out, s)
        session = popxl.Session(ir, "ipu_model")
        with session:
            got = session.run()[out]
        np.testing.assert_array_equal(got, expected)
        names = session.engine.get_graph_profile()["computeSets"]["names"]
        assert len([n for n in names if "total" in n]) == (1 if len(inputs) > 1 else 0), names


def test_decompose_sum_adds_a_summand_after_it_is_written_in_place_and_keeps_the_order():
    """A summand doubled in place after it is made is added after the write; the sum's
    ``in_sequence`` constraints become the last addition's, and the result is the sum's."""
    from tremula.popxl.ops.base import create_op

    x = np.array([0.5, -1.0, 2.0, 0.25], F32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        a = popxl.variable(x, name="a")
        p1 = ops.sin(a)
        p2 = ops.cos(a)
        ops.mul_(p1, 2.0)  # p1's value for the sum is made here
        q = ops.exp(a)
        p3 = ops.tanh(a)
        (s,) = create_op("Sum", [p1, p2, p3], names=["s"])
        r = s * q
        out = popxl.d2h_stream(r.shape, r.dtype, name="out")
        ops.host_store(out, r)
    assert popxl.transforms.decompose_sum(ir.main_graph) is ir.main_graph
    types = [op.type for op in ir.main_graph.ops]
    assert types == [
        "Sin", "Cos", "Init", "AddInplace", "MulInplace", "AddInplace", "Exp", "Tanh",
        "AddInplace", "Mul", "HostStore",
    ]  # fmt: skip
    adds = [op for op in ir.main_graph.ops if op.type == "AddInplace"]
    assert [op.inputs[1] for op in adds] == [p2, p1, p3]  # in the order they are ready
    assert adds[-1].outputs[0] is s and s.producer is adds[-1]
    assert (ir.main_graph.ops[7], adds[-1]) in ir.main_graph.topocons()  # Tanh, then the add
    xd = x.astype(np.float64)
    expected = (2 * np.sin(xd) + np.cos(xd) + np.tanh(xd)) * np.exp(xd)
    np.testing.assert_allclose(_run(ir, out), expected, rtol=1e-6)
