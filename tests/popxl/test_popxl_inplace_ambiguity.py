"""PopART's inplacing-ambiguity check, which PopXL's Ir enables: a ``Session`` refuses a
graph where an op writes memory in place that another op uses, with neither ordered before
the other by data or topological constraints (``in_sequence``, ``TopoCons``)."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops
from tremula.popxl.ambiguity import find_ambiguity

AMBIGUOUS = "Inplacing ambiguity detected."


def _var(name: str = "a", n: int = 4) -> popxl.Tensor:
    return popxl.variable(np.arange(n, dtype=np.float32), name=name)


def _read_then_modify() -> None:
    a = _var()
    b = a + 1
    a += 1
    ops.host_store(popxl.d2h_stream(b.shape, b.dtype, "out"), b)


def _modify_then_read_old_tensor() -> None:
    a = _var()
    a += 1  # `a` stays the tensor before the write: reading it is unordered
    b = a * 2
    ops.host_store(popxl.d2h_stream(b.shape, b.dtype, "out"), b)


def _read_through_a_view() -> None:
    a = popxl.variable(np.ones((2, 3), np.float32), name="a")
    t = a.T_  # a view: nothing read yet
    c = t * 2
    ops.var_updates.accumulate_(a, popxl.constant(np.ones((2, 3), np.float32)))
    ops.host_store(popxl.d2h_stream(c.shape, c.dtype, "out"), c)


def _two_writers() -> None:
    a = _var()
    ops.add_(a, popxl.constant(np.ones(4, np.float32)))
    ops.mul_(a, popxl.constant(np.full(4, 2, np.float32)))


def _store_of_old_tensor() -> None:
    a = _var()
    ops.var_updates.copy_var_update_(a, popxl.constant(np.zeros(4, np.float32)))
    ops.host_store(popxl.d2h_stream(a.shape, a.dtype, "out"), a)


def _by_ref_call_and_a_reader() -> None:
    a = _var()
    ir = popxl.gir()

    def inc(x: popxl.TensorByRef) -> None:
        x += 1

    g = ir.create_graph(inc, a)
    b = a * 3
    ops.call(g, a)
    ops.host_store(popxl.d2h_stream(b.shape, b.dtype, "out"), b)


CASES: dict[str, Callable[[], None]] = {
    "read then modify": _read_then_modify,
    "modify then read the old tensor": _modify_then_read_old_tensor,
    "read through a view": _read_through_a_view,
    "two writers": _two_writers,
    "host_store of the old tensor": _store_of_old_tensor,
    "by-reference call and a reader": _by_ref_call_and_a_reader,
}


def _ir(build: Callable[[], None], mode: bool | str) -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(mode):
        build()
    return ir


@pytest.mark.parametrize("case", list(CASES))
def test_unordered_in_place_use_is_refused_when_the_session_is_made(case) -> None:
    ir = _ir(CASES[case], "pass")
    with pytest.raises(popart.popart_exception) as info:
        popxl.Session(ir, "ipu_model")
    assert info.value.args[0].startswith(AMBIGUOUS)
    assert not ir._pb_ir.isPrepared()


@pytest.mark.parametrize("case", list(CASES))
def test_in_sequence_orders_them(case) -> None:
    ir = _ir(CASES[case], True)
    assert find_ambiguity(ir.main_graph) is None
    popxl.Session(ir, "ipu_model")


def test_results_in_sequence_follow_creation_order() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        a = _var()
        b = a + 1  # before the write: 1..4
        a += 1
        c = a * 2  # after it: (1..4) * 2
        outs = [popxl.d2h_stream((4,), popxl.float32, n) for n in ("b", "c")]
        ops.host_store(outs[0], b)
        ops.host_store(outs[1], c)
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()
        final = s.get_tensor_data(a)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(got[outs[0]], x + 1)
    np.testing.assert_array_equal(got[outs[1]], (x + 1) * 2)
    np.testing.assert_array_equal(final, x + 1)


def test_message_names_the_ops_the_tensor_and_the_graph() -> None:
    ir = _ir(_read_then_modify, "pass")
    with pytest.raises(popart.popart_exception) as info:
        popxl.Session(ir, "ipu_model")
    msg = info.value.args[0]
    assert "In the main graph" in msg
    assert "AddInplace" in msg and "op Add 'Add'" in msg
    assert "modifies tensor 'a' in place" in msg and "in_sequence" in msg


def test_data_dependencies_order_them() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = _var()
        b = a * 2
        a1 = ops.var_updates.accumulate_(a, b)  # reads b, so runs after the read of a
        a2 = ops.add_(a1, popxl.constant(np.ones(4, np.float32)))  # writes a1 = a after
        c = a2 + 1  # reads the write's result
        ops.host_store(popxl.d2h_stream(c.shape, c.dtype, "out"), c)
    assert find_ambiguity(ir.main_graph) is None


def test_disjoint_in_place_slices_do_not_conflict() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = _var()
        lo = ops.slice_(a, start=0, stop=2, axis=0)
        hi = ops.slice_(a, start=2, stop=4, axis=0)
        b = hi * 2
        lo += 1
        ops.host_store(popxl.d2h_stream(b.shape, b.dtype, "out"), b)
    assert find_ambiguity(ir.main_graph) is None
    with ir.main_graph:
        whole = a * 3  # reads the slice being written
    found = find_ambiguity(ir.main_graph)
    assert found is not None and found.other.outputs[0] is whole


def test_subgraphs_are_not_searched_as_in_popart() -> None:
    """PopART grows its alias model from the main graph: a call is one op there."""
    ir = popxl.Ir()

    def body(x: popxl.Tensor) -> popxl.Tensor:
        y = x * 2
        x += 1
        return y

    with ir.main_graph:
        a = _var()
        g = ir.create_graph(body, a)
        (out,) = ops.call(g, a)
        ops.host_store(popxl.d2h_stream(out.shape, out.dtype, "out"), out)
    found = find_ambiguity(g)
    assert found is not None and found.message().startswith(AMBIGUOUS)
    assert re.search(re.escape(f"In graph {g.name!r}"), found.message())
    popxl.Session(ir, "ipu_model")


def test_in_sequence_false_inside_true_is_one_unit() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        a = _var()
        b = a + 1
        with popxl.in_sequence(False):
            c = a * 2
            d = a * 3
        a += 1  # after the whole False block
        e = a + b + c + d
        ops.host_store(popxl.d2h_stream(e.shape, e.dtype, "out"), e)
    assert find_ambiguity(ir.main_graph) is None
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        a = _var()
        with popxl.in_sequence(False):
            c = a * 2
            a += 1  # unordered with the read in the same False block
    assert find_ambiguity(ir.main_graph) is not None


def test_topocons_insert_orders_them_and_a_cycle_is_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = _var()
        b = a + 1
        a2 = ops.add_(a, popxl.constant(np.ones(4, np.float32)))
    reader, writer = b._pb_tensor.getProducer(), a2._pb_tensor.getProducer()
    topo = ir.main_graph._pb_graph.topoCons()
    assert find_ambiguity(ir.main_graph) is not None
    topo.insert(reader, writer)
    assert topo.contains(reader, writer) and topo.getAfters(reader) == [writer]
    assert find_ambiguity(ir.main_graph) is None
    with pytest.raises(popart.popart_exception, match="cycle"):
        topo.insert(writer, reader)
    assert topo.getBefores(reader) == []


def test_topocons_insert_reorders_the_graph() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = _var()
        a2 = ops.add_(a, popxl.constant(np.ones(4, np.float32)))
        b = a * 2  # made after the write, but reads the value before it
        out = popxl.d2h_stream(b.shape, b.dtype, "out")
        ops.host_store(out, b)
    g = ir.main_graph._pb_graph
    g.topoCons().insert(b._pb_tensor.getProducer(), a2._pb_tensor.getProducer())
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()[out]
    np.testing.assert_array_equal(got, np.arange(4, dtype=np.float32) * 2)


def test_merged_exchanges_keep_their_place_in_the_sequence() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        a = _var()
        buf = popxl.remote_buffer((4,), popxl.float32, 1)
        with popxl.transforms.merge_exchange(), popxl.in_sequence(False):
            ops.remote_store(buf, 0, a)
        a += 1  # after the store (now a MultiExchange)
        b = ops.remote_load(buf, 0)
        ops.host_store(popxl.d2h_stream(b.shape, b.dtype, "out"), b)
    assert [op.type for op in ir.main_graph.ops][:2] == ["MultiExchange", "AddInplace"]
    assert find_ambiguity(ir.main_graph) is None


def test_the_session_option_turns_the_check_off() -> None:
    ir = _ir(_read_then_modify, "pass")
    ir._pb_ir.getSessionOptions().enableInplaceAmbiguityChecking = False
    popxl.Session(ir, "ipu_model")


def test_the_session_binding_checks_again() -> None:
    ir = _ir(_read_then_modify, True)
    session = popxl.Session(ir, "ipu_model")
    session._pb_session.checkInplacingAmbiguity()


def test_undone_ops_keep_the_sequence() -> None:
    """A refused op call inside in_sequence leaves the order of the ops around it."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        a = _var()
        b = a + 1
        with pytest.raises(ValueError):
            ops.reshape(b, (3, 3))
        a += 1
    assert find_ambiguity(ir.main_graph) is None


def test_a_later_in_sequence_block_follows_the_last_one() -> None:
    """Two in_sequence(True) blocks of one graph run one after the other; ops made
    outside any block, or in "pass", are not ordered by them."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g, popxl.in_sequence(True):
        a = _var()
        b = a + 1
    with g:
        free = a * 5
    with g, popxl.in_sequence(True):
        with popxl.in_sequence("pass"):
            loose = a * 7
        a += 1
    topo = g._pb_graph.topoCons()
    write = g.ops[-1]
    assert write.type == "AddInplace"
    assert topo.contains(b.producer, write)
    assert not topo.contains(free.producer, write) and not topo.contains(loose.producer, write)
    found = find_ambiguity(g)
    assert found is not None and found.other in (free.producer, loose.producer)


def test_transfer_to_subgraph_passes_the_constraints_to_the_replacement() -> None:
    """An op moved into a called graph hands its place in the sequence to the call that
    replaces it (made last): the Session runs the call between the ops around the moved
    one, so the write it now does in place comes after the read before it."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g, popxl.in_sequence():
        a = _var()
        before = a * 2  # reads a before the write
        moved = ops.add_(a, popxl.constant(np.ones(4, np.float32)))
        after = a * 3  # reads a after the write
    moved_op = moved.producer

    def body(x: popxl.TensorByRef) -> None:
        ops.add_(x, popxl.constant(np.ones(4, np.float32)))

    sub = ir.create_graph(body, a)
    with g, popxl.in_sequence("pass"):
        call = ops.call_with_info(sub, a)._op
    topo = g._pb_graph.topoCons()
    topo.transferToSubgraph(call, {moved_op: [sub.ops[-1]]}, True)
    moved_op.disconnectAllInputs()
    moved_op.disconnectAllOutputs()
    g._pb_graph.eraseOp(moved_op.id)
    assert topo.contains(before.producer, call) and topo.contains(call, after.producer)
    with g, popxl.in_sequence():
        outs = [popxl.d2h_stream((4,), popxl.float32, n) for n in ("before", "after")]
        for s, t in zip(outs, (before, after)):
            ops.host_store(s, t)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()
    assert [op.type for op in g.ops].index("Call") < [op.type for op in g.ops].index("Mul", 2)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(got[outs[0]], x * 2)
    np.testing.assert_array_equal(got[outs[1]], (x + 1) * 3)
