"""Tensor ids as PopXL makes them (``Graph._create_tensor_id``): an op's output is named
``<op>_out`` after the PopXL function that made it (``ops.relu`` -> ``relu_out``), under the
current name scopes and the graph's scope; an id already in the graph becomes
``<id>__t<n>`` by ``Ir.createIntermediateTensorId`` (PopART's, one counter per Ir); a
tensor's name is its id without the graph's scope. Names a program or PopXL gives
explicitly (variables, ``identity``'s output, ``host_load``, var updates, call outputs)
stay as given."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.popxl.ops.base import OPS

F = np.ones((2, 2), np.float32)


def _main(fn):
    """``fn(ir)`` run in a new Ir's main graph; returns (ir, what it returned)."""
    ir = popxl.Ir()
    with ir.main_graph:
        got = fn(ir)
    return ir, got


def test_op_outputs_are_named_op_out() -> None:
    def build(ir):
        x, w = popxl.variable(F, name="x"), popxl.variable(F, name="w")
        return {
            "relu_out": ops.relu(x),
            "add_out": ops.add(x, w),
            "matmul_out": ops.matmul(x, w),
            "gelu_out": ops.gelu(w),
            "softmax_out": ops.softmax(x, axis=1),
            "sum_out": ops.sum(x),
            "negate_out": -w,
            "cast_out": ops.cast(x, popxl.float16),
            "logical_not_out": ops.logical_not(ops.cast(x, popxl.bool)),
        }

    ir, got = _main(build)
    for name, t in got.items():
        assert (t.id, t.name) == (name, name)
        assert ir.main_graph.get_tensor(name) is t


def test_in_place_and_multi_output_forms() -> None:
    """An in-place form is ``<op>_inplace_out`` (PopART's ``ReluInplaceOp``), a binary one
    ``<op>_lhs_inplace_out`` (``AddLhsInplaceOp``); output ``k`` of an op with several is
    ``<op>_out_<k>``."""

    def build(ir):
        x, w = popxl.variable(F, name="x"), popxl.variable(F, name="w")
        return ops.relu_(x), ops.add_(w, x), ops.split(x, 2, axis=0)

    _, (relu_, add_, parts) = _main(build)
    assert relu_.id == "relu_inplace_out" and add_.id == "add_lhs_inplace_out"
    assert [t.id for t in parts] == ["split_out_0", "split_out_1"]


def test_clashes_take_the_irs_intermediate_suffix() -> None:
    """The second ``relu`` is ``relu_out__t0``; the suffix counter is the one of
    ``Ir.createIntermediateTensorId`` (each call takes the next number), and each Ir has
    its own."""

    def build(ir):
        x = popxl.variable(F, name="x")
        first, second = ops.relu(x), ops.relu(x)
        asked = ir._pb_ir.createIntermediateTensorId("mine")
        third = ops.relu(x)
        return first, second, asked, third, popxl.variable(F, name="x")

    ir, (first, second, asked, third, x2) = _main(build)
    assert [first.id, second.id, asked, third.id] == [
        "relu_out", "relu_out__t0", "mine__t1", "relu_out__t2"
    ]  # fmt: skip
    assert (x2.id, x2.name) == ("x__t3", "x__t3")
    assert ir._pb_ir.createIntermediateTensorId("next") == "next__t4"
    _, other = _main(lambda ir: [ops.relu(popxl.variable(F)), ops.relu(popxl.constant(F))])
    # a new Ir counts anew: its second ``t`` is ``t__t0``
    assert [t.id for t in other] == ["relu_out", "relu_out__t1"]


def test_a_suffixed_id_in_use_is_skipped() -> None:
    """An id a program chose that equals the next suffixed one: the counter is asked again
    (PopXL would make a duplicate id, which PopART refuses)."""
    _, (taken, a, b) = _main(
        lambda ir: (
            popxl.variable(F, name="relu_out__t0"),
            ops.relu(popxl.variable(F, name="x")),
            ops.relu(popxl.variable(F, name="y")),
        )
    )
    assert (taken.id, a.id, b.id) == ("relu_out__t0", "relu_out", "relu_out__t1")


def test_name_scopes_are_joined_in_front() -> None:
    def build(ir):
        x = popxl.variable(F, name="x")
        with popxl.name_scope("enc"), popxl.name_scope("layer0"):
            return ops.relu(x), ops.relu(x), popxl.variable(F), ops.relu(x)

    _, (a, b, v, c) = _main(build)
    assert [a.id, b.id, v.id, c.id] == [
        "enc/layer0/relu_out", "enc/layer0/relu_out__t0", "enc/layer0/t", "enc/layer0/relu_out__t1"
    ]  # fmt: skip
    assert [t.name for t in (a, b, v)] == [a.id, b.id, v.id]  # main graph: name == id


def test_subgraph_ids_carry_the_graph_scope_names_do_not() -> None:
    def body(x):
        with popxl.name_scope("s"):
            y = ops.relu(x)
        return ops.relu(x) + ops.relu(y) + popxl.graph_input((2, 2), popxl.float32)

    ir = popxl.Ir()
    with ir.main_graph:
        main_relu = ops.relu(popxl.variable(F, name="x"))
        g = ir.create_graph(body, popxl.TensorSpec((2, 2), popxl.float32))
    names = sorted(t.name for t in g.tensors)
    assert names == ["add_out", "add_out__t1", "relu_out", "relu_out__t0", "s/relu_out", "t", "x"]
    assert all(t.id == f"{g.name}/{t.name}" for t in g.tensors)
    assert main_relu.id == "relu_out"  # another graph: no clash


def test_explicit_names_stay_as_given() -> None:
    def build(ir):
        w = popxl.variable(F, name="w")
        kept = ops.identity(w, "kept")
        stream = popxl.h2d_stream((2, 2), popxl.float32, name="x_stream")
        loaded = ops.host_load(stream, "x")
        acc = ops.var_updates.accumulate_(w, loaded)
        g = ir.create_graph(lambda a: a * 2.0, w)
        (called,) = ops.call(g, w)
        return kept, loaded, acc, called

    _, (kept, loaded, acc, called) = _main(build)
    assert [kept.id, loaded.id, acc.id, called.id] == ["kept", "x", "accumulate__w", "mul_out"]


def test_a_refused_call_gives_back_its_suffix_numbers() -> None:
    """A trace that raises leaves no tensors behind, and no counts taken: the next clash
    gets the number it would have had."""

    def refused(x):
        ops.relu(x)
        ops.relu(x)  # takes __t0, then given back
        raise ValueError("refused")

    def build(ir):
        x = popxl.variable(F, name="x")
        with pytest.raises(ValueError, match="refused"):
            ir.create_graph(refused, x)
        return ops.relu(x), ops.relu(x)

    _, (a, b) = _main(build)
    assert (a.id, b.id) == ("relu_out", "relu_out__t0")


def test_every_op_type_names_its_output_op_out() -> None:
    """The registry's rule: every op type has an output name ending ``_out``; in-place
    forms ``..._inplace_out``."""
    for op_type, d in OPS.items():
        assert d.out.endswith("_out"), op_type
        if d.inplace_of:
            assert d.out.endswith("_inplace_out"), op_type
    assert OPS["ReduceSumSquare"].output_name(0, 1) == "sumsquare_out"
    assert OPS["TopK"].output_name(1, 2) == "topk_out_1"


def test_streams_are_main_graph_ids_by_the_same_rule() -> None:
    """``h2d_stream`` / ``d2h_stream`` name their tensor with the main graph's
    ``_create_tensor_id`` (default ``h2d_stream`` / ``d2h_stream``), wherever they are made."""

    def sub() -> None:
        popxl.h2d_stream((2,), popxl.float32, name="in_sub")

    def build(ir):
        x = popxl.variable(F, name="x")
        made = [popxl.h2d_stream((2,), popxl.float32), popxl.d2h_stream((2,), popxl.float32)]
        made.append(popxl.h2d_stream((2,), popxl.float32))
        made.append(popxl.h2d_stream((2, 2), popxl.float32, name="x"))  # x is a variable's
        with popxl.name_scope("io"):
            made.append(popxl.d2h_stream((2,), popxl.float32, name="y"))
        g = ir.create_graph(sub)
        return x, made, g

    ir, (x, made, g) = _main(build)
    ids = [s.tensor_id for s in made]
    assert x.id == "x"
    assert ids == ["h2d_stream", "d2h_stream", "h2d_stream__t0", "x__t1", "io/y"]
    assert all(ir.main_graph.get_tensor(i).id == i for i in [*ids, "in_sub"])
    assert not g.tensors  # a stream made in a subgraph is the main graph's
