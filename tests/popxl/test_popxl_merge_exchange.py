"""``merge_exchange`` / ``io_tile_exchange`` merge the exchanges made inside into one
``MultiExchange`` op, as PopXL does (spec/popxl.md 1.12, spec/popxl-fidelity.md): PopXL-style
IR checks through ``popart._internal.ir``, and results against NumPy."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import numpy as np
import pytest

import popart
import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from tremula.profile import validate

X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)
W = np.full((2, 3), 3.0, np.float32)
CONTEXTS = [popxl.transforms.merge_exchange, popxl.transforms.io_tile_exchange]


def _multi(graph: popxl.Graph) -> list:
    return [
        op for op in graph._pb_graph.getOps() if isinstance(op, _ir.op.exchange.MultiExchangeOp)
    ]


def _five_exchanges(context: Callable[[], AbstractContextManager]) -> tuple:
    """Two host loads, a host store, a remote store and a remote load in one context."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(W, name="w")
        x_in = popxl.h2d_stream((2, 3), popxl.float32, name="x_in")
        y_in = popxl.h2d_stream((2, 3), popxl.float32, name="y_in")
        w_out = popxl.d2h_stream((2, 3), popxl.float32, name="w_out")
        buffer = popxl.remote_buffer((2, 3), popxl.float32, 2)
        with context():
            x = ops.host_load(x_in, "x")
            y = ops.host_load(y_in, "y")
            ops.host_store(w_out, w)
            ops.remote_store(buffer, 1, w)
            r = ops.remote_load(buffer, 0, "r")
        out = popxl.d2h_stream((2, 3), popxl.float32, name="out")
        if context is popxl.transforms.io_tile_exchange:  # binary ops take one tile set
            xc, yc, rc = (ops.io_tile_copy(t) for t in (x, y, r))
        else:
            xc, yc, rc = x, y, r
        ops.host_store(out, xc * yc + rc)
    return ir, (x, y, r), (x_in, y_in, w_out, out)


@pytest.mark.parametrize("context", CONTEXTS, ids=["merge_exchange", "io_tile_exchange"])
def test_the_exchanges_become_one_multi_exchange_op(context) -> None:
    ir, (x, y, r), _ = _five_exchanges(context)
    main = ir.main_graph
    (multi,) = _multi(main)
    assert multi.opType() == "MultiExchange"
    assert isinstance(multi, _ir.op.exchange.ExchangeBaseOp)
    # inputs in the order of the merged ops: x's init, y's init, w, w and its offset, r's
    # init and its offset; outputs: x, y, r (their ids kept, produced by the merged op)
    assert multi.inTensorCount() == 7 and multi.outTensorCount() == 3
    ins = [multi.inTensor(i).id for i in range(7)]
    assert ins[2:4] == ["w", "w"] and ins[0].startswith("x_init") and ins[5].startswith("r_init")
    assert [multi.outTensor(i).id for i in range(3)] == [x.id, y.id, r.id]
    for t in (x, y, r):
        assert t._pb_tensor.getProducer() is multi
    types = [op.opType() for op in main._pb_graph.getOps()]
    assert types.count("MultiExchange") == 1
    assert not {"HostLoad", "RemoteStore", "RemoteLoad"} & set(types)
    assert types.count("HostStore") == 1  # the store made outside the context
    parts = [d.type for d in multi.attrs["descriptors"]]
    assert parts == ["HostLoad", "HostLoad", "HostStore", "RemoteStore", "RemoteLoad"]
    tile_set = "io" if context is popxl.transforms.io_tile_exchange else "compute"
    assert multi.tile_set == tile_set and x.tile_set == tile_set


@pytest.mark.parametrize("context", CONTEXTS, ids=["merge_exchange", "io_tile_exchange"])
def test_merged_exchanges_compute_as_numpy(context) -> None:
    ir, _, (x_in, y_in, w_out, out) = _five_exchanges(context)
    with popxl.Session(ir, "ipu_model") as session:
        first = session.run({x_in: X, y_in: Y})
        second = session.run({x_in: Y, y_in: X})
    np.testing.assert_array_equal(first[w_out], W)
    # entry 0 of the buffer is never written: the first run reads what the device holds
    # there (zeros); entry 1 holds w
    np.testing.assert_allclose(first[out], X * Y, rtol=1e-6)
    np.testing.assert_allclose(second[out], Y * X, rtol=1e-6)


def test_an_exchange_reading_a_merged_load_starts_a_new_op() -> None:
    """A store of what a load in the same context made cannot run in the same exchange:
    it becomes a second MultiExchange op, after the ops in between."""
    ir = popxl.Ir()
    with ir.main_graph:
        x_in = popxl.h2d_stream((2, 3), popxl.float32, name="x_in")
        out = popxl.d2h_stream((2, 3), popxl.float32, name="out")
        raw = popxl.d2h_stream((2, 3), popxl.float32, name="raw")
        with popxl.transforms.merge_exchange():
            x = ops.host_load(x_in, "x")
            ops.host_store(raw, x)
            ops.host_store(out, x * 2.0)
    main = ir.main_graph
    types = [op.type for op in main.ops]
    assert types.count("MultiExchange") == 2
    first, second = _multi(main)
    assert first.outTensorCount() == 1 and second.inTensorCount() == 2
    assert types.index("Mul") < types.index("MultiExchange", types.index("MultiExchange") + 1)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run({x_in: X})
    np.testing.assert_array_equal(got[raw], X)
    np.testing.assert_array_equal(got[out], X * 2.0)


def test_merged_remote_exchanges_in_a_repeated_and_a_called_subgraph() -> None:
    """A subgraph that loads entry ``i`` of a remote buffer, adds to it and stores it back,
    its load and its store each merged; repeated over the entries, then called once more."""
    entries = 3
    init = np.arange(entries * 4, dtype=np.float32).reshape(entries, 4)
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((4,), popxl.float32, entries)
        step_in = popxl.h2d_stream((4,), popxl.float32, name="step")
        outs = [popxl.d2h_stream((4,), popxl.float32, name=f"out{k}") for k in range(entries)]

        def body(i: popxl.Tensor, step: popxl.Tensor) -> popxl.Tensor:
            with popxl.transforms.merge_exchange():
                row = ops.remote_load(buffer, i, "row")
            row = row + step
            with popxl.transforms.merge_exchange():
                ops.remote_store(buffer, i, row)
            return i + 1

        with popxl.transforms.merge_exchange():
            step = ops.host_load(step_in, "step")
            for k in range(entries):
                ops.remote_store(buffer, k, popxl.variable(init[k], name=f"init{k}"))
        graph = ir.create_graph(body, popxl.constant(0, popxl.uint32), step)
        assert [op.type for op in graph.ops].count("MultiExchange") == 2
        ops.repeat(graph, entries, popxl.constant(0, popxl.uint32, "start"), step)
        ops.call(graph, popxl.constant(1, popxl.uint32, "again"), step)
        with popxl.transforms.merge_exchange():
            rows = [ops.remote_load(buffer, k, f"row{k}") for k in range(entries)]
        with popxl.transforms.merge_exchange():
            for k in range(entries):
                ops.host_store(outs[k], rows[k])
    assert [len(op.attrs["descriptors"]) for op in _multi(ir.main_graph)] == [4, 3, 3]
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run({step_in: np.full(4, 0.5, np.float32)})
    expected = init + 0.5
    expected[1] += 0.5
    np.testing.assert_array_equal(np.stack([got[o] for o in outs]), expected)


def test_merging_keeps_the_cycles_and_the_profiles_validate() -> None:
    """The merged op does its exchanges as the unmerged ops did: the same cycles, and
    profiles that validate."""
    cycles = []
    for context in (nullcontext, popxl.transforms.merge_exchange):
        ir, _, (x_in, y_in, _w_out, out) = _five_exchanges(context)
        with popxl.Session(ir, "ipu_model") as session:
            got = session.run({x_in: X, y_in: Y})[out]
            graph = session.engine.get_graph_profile()
            execution = session.engine.get_execution_profile()
        np.testing.assert_allclose(got, X * Y, rtol=1e-6)
        validate(graph, execution)
        cycles.append(execution["simulation"]["cycles"])
    assert cycles[0] == cycles[1] > 0


def test_the_multi_exchange_binding_maps_exchanges_to_inputs_and_outputs() -> None:
    ir, _, _ = _five_exchanges(popxl.transforms.merge_exchange)
    (multi,) = _multi(ir.main_graph)
    assert type(multi).__module__ == "popart._internal.ir.op.exchange"
    assert multi.getNumExchanges() == 5
    ins = [multi.descriptorIndexToInIndices(k) for k in range(5)]
    outs = [multi.descriptorIndexToOutIndices(k) for k in range(5)]
    assert ins == [[0], [1], [2], [3, 4], [5, 6]]
    assert outs == [[0], [1], [], [], [2]]
    assert not multi.modifiesIndex(5) and not multi.modifiesIndex(2)  # remote_load: out of place
    with pytest.raises(popart.popart_exception, match="no exchange 5"):
        multi.descriptorIndexToInIndices(5)

    # an edit that would give it inputs or outputs no exchange owns is refused, unchanged
    before = (list(multi.inputs), list(multi.outputs))
    some_input = multi.inputs[0].id
    for edit in (
        lambda: multi.connectInTensor(7, some_input),
        lambda: multi.connectOutTensor(3, some_input),
        lambda: multi.createAndConnectOutTensor(3, "extra"),
    ):
        with pytest.raises(popart.popart_exception, match="not one of its exchanges'"):
            edit()
    assert (list(multi.inputs), list(multi.outputs)) == before
    multi.connectInTensor(0, some_input)  # within: reconnecting is allowed
    assert multi.inputs[0].id == some_input


def test_in_place_ops_between_the_exchanges_keep_their_order() -> None:
    """An op made between merged exchanges that writes what an earlier exchange read runs
    after the merged op; one that reads what a later exchange writes runs before it."""
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(X, name="t")
        u = popxl.variable(Y, name="u")
        buffer = popxl.remote_buffer((2, 3), popxl.float32, 1)
        outs = {k: popxl.d2h_stream((2, 3), popxl.float32, name=k) for k in "sabu"}
        with popxl.transforms.merge_exchange():
            ops.remote_store(buffer, 0, t)  # stores X
            t += 1.0  # after the store: t is X + 1
            before = u * 1.0  # before the load into u: Y
            ops.remote_load_(buffer, 0, u)
        stored = ops.remote_load(buffer, 0, "stored")
        for k, v in zip("sabu", (stored, t, before, u)):
            ops.host_store(outs[k], v)
    assert [op.type for op in ir.main_graph.ops].count("MultiExchange") == 1
    # the program means creation order without saying so (no in_sequence): PopART would
    # refuse it as ambiguous; with the check off, Tremula's order is the creation order
    ir._pb_ir.getSessionOptions().enableInplaceAmbiguityChecking = False
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()
    np.testing.assert_array_equal(got[outs["s"]], X)
    np.testing.assert_array_equal(got[outs["a"]], X + 1.0)
    np.testing.assert_array_equal(got[outs["b"]], Y)
    np.testing.assert_array_equal(got[outs["u"]], X)
