"""popxl-addons' own test suite (its tests/ folder, not shipped with the package), written
again from its cases: ``testing_utils.run_module``, ``Module.from_list`` / ``call_module``,
``GraphWithNamedArgs`` helpers, ``NamedVariableFactories`` with replica groupings, remote
variables in ``named_variable_buffers`` loaded and stored by ``load_remote_graph`` /
``store_remote_graph`` (also on IO tiles with its RTS gather / reduce graphs),
``reduce_replica_sharded_tensor`` over groups, ``batch_serialise`` with remote buffers and
row offsets in its three IO modes, ``TaskSession`` state and checkpoint rotation, the
vocab-sharded ``Embedding`` and its gradient, ``fp8_amax_scale``, ``linear_layout``, the fc-pass
and available-memory transforms, its debugging prints, ``repeat_graph`` and ``GraphCache``
keys. Checked against NumPy and torch; rounds 1-8 (the other files here) cover the rest."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import popxl_addons as addons
import pytest
import torch
from popxl_addons import NamedTensors
from popxl_addons.graph_cache import GraphCache
from popxl_addons.layers import Embedding, LayerNorm, Linear
from popxl_addons.ops.fp8_amax_scale import fp8_amax_scale
from popxl_addons.ops.linear_layout import linear_layout
from popxl_addons.optimizers.adam import AdamOptimizerStep
from popxl_addons.remote import load_remote_graph, named_variable_buffers, store_remote_graph
from popxl_addons.rts import (
    all_gather_replica_sharded_graph,
    gather_replica_sharded_tensor,
    reduce_replica_sharded_graph,
    reduce_replica_sharded_tensor,
)
from popxl_addons.task_session import TaskSession
from popxl_addons.testing_utils import TensorInput, ops_of_type, run_module
from popxl_addons.transforms import disable_fc_pass, enable_fc_pass
from popxl_addons.transforms.available_memory_proportion import (
    set_graph_available_memory_proportion_by_ipu,
)
from popxl_addons.transforms.batch_serialisation import (
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)
from popxl_addons.transforms.repeat_graph import repeat_graph
from popxl_addons.variable_factory import NamedVariableFactories, VariableFactory

import popart._internal.ir as _ir
import popxl
from popxl import ops

RNG = np.random.default_rng(9)


def _store(t: popxl.Tensor) -> popxl.DeviceToHostStream:
    d2h = popxl.d2h_stream(t.shape, t.dtype)
    ops.host_store(d2h, t)
    return d2h


class _Scale(addons.Module):
    """``x * w``, ``w`` a variable of ``x``'s shape filled with ``value``."""

    def __init__(self, value: float = 2.0) -> None:
        super().__init__()
        self.value = value

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", lambda: np.full(x.shape, self.value, np.float32))
        return x * w


class _Affine(addons.Module):
    """``x * w + 1``, ``w`` a variable of ``x``'s last dimension filled with 3."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", lambda: np.full(x.shape[-1:], 3.0, np.float32))
        return x * w + 1


def test_run_module_and_ops_of_type() -> None:
    """testing_utils' helpers as its layer tests use them (``"ipu_hw"`` runs on the model)."""
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    lin, ln = torch.nn.Linear(8, 2), torch.nn.LayerNorm(8)
    with torch.no_grad():
        ln.weight.uniform_()
        ln.bias.uniform_()
    (y,) = run_module(
        Linear(2),
        TensorInput(x, popxl.float32),
        weights=lambda v: {v.weight: lin.weight.detach().numpy().T, v.bias: lin.bias.detach()},
    )
    np.testing.assert_allclose(y, lin(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    (y16,) = run_module(  # its torch_mapping: a WeightsDict of float16 arrays
        Linear(2),
        TensorInput(x, popxl.float16),
        weights=lambda v: Linear.torch_mapping(v, lin, popxl.float16),
    )
    assert y16.dtype == np.float16
    np.testing.assert_allclose(y16, y, rtol=1e-2, atol=1e-2)
    (z,) = run_module(
        LayerNorm(),
        TensorInput(x),
        weights=lambda v: {v.weight: ln.weight.detach().numpy(), v.bias: ln.bias.detach()},
    )
    np.testing.assert_allclose(z, ln(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32))
        b = a + a
        _ = b * a + b
    pb_ops = ir.main_graph._pb_graph.getOps()
    assert ops_of_type(pb_ops, _ir.op.AddOp) == 2
    assert ops_of_type(pb_ops, _ir.op.MulOp) == 1


class _Seq(addons.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = addons.Module.from_list([_Scale(2.0), _Scale(3.0)])

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class _Outer(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        (y,) = self.call_module(_Scale(), name="inner")(x)
        return y + 1


def test_module_from_list_and_call_module() -> None:
    """Sub-modules of a list are named by position; ``call_module`` outlines one (a
    ``Call`` of its graph) with its variables under the given name."""
    x0 = np.arange(3, dtype=np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x0)
        seq_f, seq = _Seq().create_graph(x)
        out_f, outer = _Outer().create_graph(x)
        assert seq_f.keys_flat() == ["layers.0.w", "layers.1.w"]
        assert out_f.keys_flat() == ["inner.w"]
        assert [op.opType() for op in outer.graph._pb_graph.getOps()] == ["Call", "Add"]
        (a,) = seq.bind(seq_f.init()).call(x)
        (b,) = outer.bind(out_f.init()).call(x)
        da, db = _store(a), _store(b)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
    np.testing.assert_allclose(out[da], x0 * 6)
    np.testing.assert_allclose(out[db], x0 * 2 + 1)


def test_graph_with_named_args_helpers() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(3, dtype=np.float32))
        facts, g = _Scale().create_graph(x)
        c = g.copy()
        assert c.graph is g.graph and c.args.keys_flat() == ["w"]
        with pytest.raises(AttributeError, match="Not a gradient graph"):
            g.grad_graph_info  # noqa: B018
        schedule = g.print_schedule().splitlines()
        assert schedule[0] == f"Graph : {g.graph.name}"
        assert schedule[1].strip() == "(%1, w=%2) -> (%3) {"
        assert schedule[2].strip().startswith("Mul.")
        assert (
            schedule[2]
            .strip()
            .endswith("(%1 [(3,) float32], %2 [(3,) float32]) -> (%3 [(3,) float32])")
        )
        dg = g.autodiff()
        assert dg.grad_graph_info.graph is dg.graph
        with pytest.raises(Exception, match="Autodiff has already been applied"):
            g.autodiff()
        info = g.bind(facts.init()).call_with_info(x)
        assert info.called_graph is g.graph


def test_named_variable_factories_with_replica_groupings() -> None:
    """A factory with two groups makes a variable of host shape ``(groups, *shape)``;
    ``init_zero`` / ``init_undef`` make ``ops.init`` tensors of the factory's shape."""
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=2)
        nvf = NamedVariableFactories(
            a=VariableFactory(lambda: np.ones((2, 3), np.float32), name="a", replica_grouping=rg),
            b=VariableFactory(lambda: np.ones(4, np.int32), name="b"),
        )
        vs = nvf.init(prefix="p")
        assert (vs.a.name, vs.b.name) == ("p.a", "p.b")
        assert vs.a.shape == (2, 3) and vs.b.dtype == popxl.int32
        zero, undef = nvf.init_zero(), nvf.init_undef()
        assert undef.a.shape == (2, 3)
        groups = nvf.replica_groupings.to_dict()
        assert (groups["a"].group_size, groups["a"].num_groups) == (2, 2)
        assert (groups["b"].group_size, groups["b"].num_groups) == (4, 1)
        da, db = _store(zero.a + vs.a), _store(zero.b)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
        assert s.get_tensor_data(vs.a).shape == (2, 2, 3)
    np.testing.assert_allclose(out[da], np.ones((4, 2, 3)))
    np.testing.assert_array_equal(out[db], np.zeros((4, 4)))


def test_variable_factory_rejects_bad_data() -> None:
    with popxl.Ir().main_graph:
        with pytest.raises(ValueError, match="throws error") as info:
            VariableFactory(lambda: 1 / 0)
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        with pytest.raises(ValueError, match="must be an iterable or callable"):
            VariableFactory(5)  # type: ignore[arg-type]


def test_remote_variables_in_named_buffers() -> None:
    """A sharded and a plain factory in two-entry buffers: entry 1 loaded by the load graph,
    plus one, stored to entry 0 by the store graph, read back into the remote variables."""
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        nvf = NamedVariableFactories(
            w=VariableFactory(lambda: data, name="w", shard_over=2),
            v=VariableFactory(lambda: data + 10, name="v"),
        )
        bufs = named_variable_buffers(nvf, entries=2, shard_over_dict={"w": 2, "v": 1})
        assert (bufs.w.tensor_shape, bufs.w.meta_shape, bufs.w.entries) == ((4,), (2, 4), 2)
        assert (bufs.v.tensor_shape, bufs.v.entries) == ((2, 4), 2)
        vars0, vars1 = nvf.init_remote(bufs, 0), nvf.init_remote(bufs, 1, prefix="e1")
        assert vars1.w.name == "e1.w"
        load, names = load_remote_graph(bufs, entries=2)
        assert names == ["v", "w"]
        loaded = NamedTensors.pack(names, load.call(1))
        assert loaded.w.shape == (4,) and loaded.v.shape == (2, 4)
        store_remote_graph(bufs, entries=2).bind(loaded.map(lambda t: t + 1)).call(0)
        again = NamedTensors.pack(names, load.call(0))
        dv = _store(again.v)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
        got = s.get_tensors_data([vars0.w, vars0.v, vars1.w])
    np.testing.assert_allclose(out[dv], np.stack([data + 11] * 2))
    np.testing.assert_allclose(got[vars0.w], data + 1)
    np.testing.assert_allclose(got[vars0.v], data + 11)
    np.testing.assert_allclose(got[vars1.w], data)


def test_remote_and_rts_graphs_on_io_tiles() -> None:
    """Load a sharded variable on IO tiles, gather it (to compute tiles), reduce-scatter
    twice it on IO tiles and store it back: the variable becomes 2 replicas * 2 * data."""
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    ir = popxl.Ir(replication=2)
    ir._pb_ir.getSessionOptions().numIOTiles = 32
    with ir.main_graph:
        nvf = NamedVariableFactories(w=VariableFactory(lambda: data, name="w", shard_over=2))
        bufs = named_variable_buffers(nvf)
        variables = nvf.init_remote(bufs)
        load, names = load_remote_graph(bufs, use_io_tiles=True)
        shards = NamedTensors.pack(names, load.call(0))
        assert shards.w.tile_set == "io"
        gather, gnames = all_gather_replica_sharded_graph(shards, use_io_tiles=True)
        full = NamedTensors.pack(gnames, gather.bind(shards).call())
        assert (full.w.shape, full.w.tile_set) == ((2, 4), "compute")
        grads = NamedTensors(w=full.w * 2)
        reduce, rnames = reduce_replica_sharded_graph(
            grads, use_io_tiles=True, shard_groups=nvf.replica_groupings
        )
        reduced = NamedTensors.pack(rnames, reduce.bind(grads).call())
        assert (reduced.w.shape, reduced.w.tile_set) == ((4,), "io")
        store_remote_graph(bufs, use_io_tiles=True).bind(reduced).call(0)
        d = _store(full.w)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
        got = s.get_tensor_data(variables.w)
    np.testing.assert_allclose(out[d][0], data)
    np.testing.assert_allclose(got, data * 4)


def test_reduce_replica_sharded_tensor_over_groups() -> None:
    """All four replicas reduced then sliced in pairs; reduced within pairs (a
    reduce-scatter) and gathered back in them."""
    data = RNG.standard_normal((4, 8)).astype(np.float32)
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        h2d = popxl.h2d_stream((8,), popxl.float32)
        x = ops.host_load(h2d)
        pairs = ir.replica_grouping(group_size=2)
        sliced = reduce_replica_sharded_tensor(x, "add", ir.replica_grouping(), shard_group=pairs)
        scattered = reduce_replica_sharded_tensor(x, "add", replica_group=pairs)
        assert (sliced.shape, sliced.meta_shape) == ((4,), (8,))
        assert (scattered.shape, scattered.meta_shape) == ((4,), (8,))
        gathered = gather_replica_sharded_tensor(scattered, replica_group=pairs)
        assert gathered.shape == (8,)
        ds = [_store(t) for t in (sliced, scattered, gathered)]
    with popxl.Session(ir, "ipu_model") as s:
        res = s.run({h2d: data})
    out = [res[d] for d in ds]
    total = data.sum(0)
    np.testing.assert_allclose(out[0], np.stack([total[:4], total[4:]] * 2), rtol=1e-5)
    p0, p1 = data[0] + data[1], data[2] + data[3]
    np.testing.assert_allclose(out[1], np.stack([p0[:4], p0[4:], p1[:4], p1[4:]]), rtol=1e-6)
    np.testing.assert_allclose(out[2], np.stack([p0, p0, p1, p1]), rtol=1e-6)


@pytest.mark.parametrize("io_mode", ["compute", "io", "io_overlapped"])
def test_batch_serialise_with_remote_buffers_and_rows(io_mode: str) -> None:
    """Inputs read from row 1 of a two-row ``batch_serial_buffer`` (``RemoteHandle(buf,
    1)``), outputs stored by ``(buffer, None)`` to the first ``steps`` entries. Overlapped,
    the stores after the loop take its outputs, on IO tiles as the loop body leaves them
    (PopART finds a loop output's tile set in the body)."""
    steps, rows = 3, 2
    data = RNG.standard_normal((rows * steps, 2, 4)).astype(np.float32)
    ir = popxl.Ir()
    if io_mode != "compute":
        ir._pb_ir.getSessionOptions().numIOTiles = 32
    with ir.main_graph, popxl.in_sequence(True):
        facts, g = _Affine().create_graph(popxl.TensorSpec((2, 4), popxl.float32))
        x_in, y_out = g.graph.inputs[0], g.graph.outputs[0]
        in_buf = batch_serial_buffer(x_in, steps=steps, rows=rows)
        out_buf = batch_serial_buffer(y_out, steps=steps, rows=rows)
        assert (in_buf.entries, in_buf.tensor_shape) == (6, (2, 4))
        result = batch_serialise(
            g,
            steps,
            load_handles={x_in: RemoteHandle(in_buf, 1)},
            store_streams={},
            store_buffers={y_out: (out_buf, None)},
            rows=rows,
            io_mode=io_mode,  # type: ignore[arg-type]
        )
        h2ds = [popxl.h2d_stream((2, 4), popxl.float32) for _ in range(rows * steps)]
        for e, h2d in enumerate(h2ds):
            ops.remote_store(in_buf, e, ops.host_load(h2d))
        result.graph.bind(facts.init()).call(0)
        ds = [_store(ops.remote_load(out_buf, e)) for e in range(rows * steps)]
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run(dict(zip(h2ds, data)))
    got = np.stack([out[d] for d in ds])
    np.testing.assert_allclose(got[:steps], data[steps:] * 3 + 1, rtol=1e-6)
    np.testing.assert_array_equal(got[steps:], 0)


# TaskSession.load_checkpoint reads session_info.json with json.load(open(...)) and leaves
# the file to the garbage collector
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_task_session_state_rotation_and_copy(tmp_path: Path) -> None:
    logging.getLogger().setLevel(logging.ERROR)  # "No dataloader set" on each save

    def program() -> tuple[
        popxl.Ir, popxl.HostToDeviceStream, popxl.DeviceToHostStream, NamedTensors
    ]:
        ir = popxl.Ir()
        with ir.main_graph:
            h2d = popxl.h2d_stream((2,), popxl.float32, "x")
            facts, g = _Affine().create_graph(popxl.TensorSpec((2,), popxl.float32))
            vs = facts.init()
            (y,) = g.bind(vs).call(ops.host_load(h2d))
            d2h = _store(y)
            ops.var_updates.accumulate_(vs.w, y)
        return ir, h2d, d2h, vs

    ir1, h1, d1, vs1 = program()
    s1 = TaskSession([h1], [d1], vs1, ir=ir1, device_desc="ipu_model", max_checkpoints=1)
    with s1:
        s1.run({h1: np.ones(2, np.float32)})  # w: 3 + (1 * 3 + 1)
        state = s1.get_named_tensors_data()
        np.testing.assert_allclose(state.w, [7, 7])
        assert s1.session_state["steps"] == 1
        for i in range(3):
            s1.save_checkpoint(str(tmp_path / f"c{i}"))
    assert sorted(os.listdir(tmp_path)) == ["c2"]
    assert os.listdir(tmp_path / "c2" / "model") == ["w.npz"]
    ir2, h2, d2, vs2 = program()
    s2 = TaskSession([h2], [d2], vs2, ir=ir2, device_desc="ipu_model")
    s2.load_from_session(s1, report_missing="error")
    with s2:
        out = s2.run({h2: np.ones(2, np.float32)})
    np.testing.assert_allclose(out[d2], [8, 8])
    os.remove(tmp_path / "c2" / "model" / "w.npz")
    with pytest.raises(ValueError, match="state keys not in checkpoint"):
        s2.load_checkpoint(str(tmp_path / "c2"), report_missing="error")


def test_vocab_sharded_embedding_and_its_gradient() -> None:
    """Two replicas, each holding a 16-row shard (vocab 20 padded to 16 per shard) of the
    table; indices offset per shard, out-of-range rows zero, the shards' lookups summed."""
    vocab, hidden, r = 20, 3, 2
    table = RNG.standard_normal((32, hidden)).astype(np.float32)
    idx = np.array([[1, 17, 5], [19, 0, 16]])
    ir = popxl.Ir(replication=r)
    with ir.main_graph:
        emb = Embedding(
            popxl.float32, vocab, hidden, replica_grouping=ir.replica_grouping(group_size=1)
        )
        assert emb.vocab_shard_size == 16
        np.testing.assert_array_equal(emb.offsets, [0, 16])
        h2d = popxl.h2d_stream(idx.shape, popxl.int32)
        i = ops.host_load(h2d)
        facts, g = emb.create_graph(i)
        vs = facts.init()
        dg = addons.autodiff(g)
        info = g.bind(vs).call_with_info(i)
        y = ops.collectives.replicated_all_reduce(info.outputs[0])
        seed = popxl.constant(np.ones((2, 3, hidden), np.float32))
        names = [e.fwd_tensor.name for e in dg.grad_graph_info.expected_outputs]
        grads = dg.call(seed, args=dg.grad_graph_info.inputs_dict(info))
        dy, dw = _store(y), _store(grads[names.index("weight")])
    with popxl.Session(ir, "ipu_model") as s:
        s.write_variable_data(vs.weight, table.reshape(r, 16, hidden))
        out = s.run({h2d: np.stack([idx - o for o in emb.offsets]).astype(np.int32)})
    np.testing.assert_allclose(out[dy], np.stack([table[idx]] * r), rtol=1e-6)
    ref = np.zeros((32, hidden), np.float32)
    np.add.at(ref, idx.reshape(-1), 1.0)
    np.testing.assert_allclose(out[dw].reshape(32, hidden), ref)


def test_fp8_amax_scale_and_linear_layout() -> None:
    x = RNG.standard_normal((4, 8)).astype(np.float32) * 3
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(x)
        a, b = fp8_amax_scale(t), fp8_amax_scale(t, popxl.float8_152)
        assert (a.dtype, a.shape) == (popxl.int32, ())
        laid = linear_layout(t, bs=2)
        ds = [_store(v) for v in (a, b, laid)]
    with popxl.Session(ir, "ipu_model") as s:
        res = s.run()
    amax = np.abs(x).max()
    assert res[ds[0]] == np.clip(np.floor(np.log2(240 / amax)), -31, 31)
    assert res[ds[1]] == np.clip(np.floor(np.log2(57344 / amax)), -31, 31)
    np.testing.assert_array_equal(res[ds[2]], x)


def test_fc_pass_and_available_memory_transforms_reach_subgraphs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 2), np.float32))
        g = ir.create_graph(lambda x: ops.matmul(x, x), a)
        ops.call(g, a)
        ops.matmul(a, a)
    matmuls = [
        op
        for pb_g in ir._pb_ir.getAllGraphs()
        for op in pb_g.getOps()
        if hasattr(op, "useFullyConnectedPass")
    ]
    assert len(matmuls) == 2
    disable_fc_pass(ir)
    assert not any(op.useFullyConnectedPass() for op in matmuls)
    enable_fc_pass(ir)
    assert all(op.useFullyConnectedPass() for op in matmuls)
    set_graph_available_memory_proportion_by_ipu(ir.main_graph, [0.3])
    assert [op.getAvailableMemoryProportion() for op in matmuls] == pytest.approx([0.3, 0.3])


def test_debug_prints_by_level(capfd: pytest.CaptureFixture[str]) -> None:
    """``MODEL_LOG_LEVEL`` is INFO: a DEBUG print is the tensor itself, no op."""
    from popxl_addons.debugging import print_tensor, print_text

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.array([1.0, 2.0], np.float32))
        assert print_tensor(a, "quiet", level="DEBUG") is a
        loud = print_tensor(a, "loud", level="WARN")
        print_text("hello", level="WARN")
        types = [op.opType() for op in ir.main_graph._pb_graph.getOps()]
        assert types == ["PrintTensor", "PrintTensor"]
        d = _store(loud)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
    np.testing.assert_allclose(out[d], [1, 2])
    err = capfd.readouterr()
    assert "loud" in err.out + err.err and "quiet" not in err.out + err.err


def test_repeat_graph_and_graph_cache_keys() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros(2, np.float32), name="v")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(2, np.float32)))
    repeat_graph(ir.main_graph, 5)
    assert [op.opType() for op in ir.main_graph._pb_graph.getOps()] == ["Loop"]
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
        np.testing.assert_allclose(s.get_tensor_data(v), [5, 5])

    cache = GraphCache()
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 2), np.float32))
        b = popxl.variable(np.zeros((2, 2), np.float32))

        def f(x: popxl.Tensor, k: int = 1) -> popxl.Tensor:
            return x * k

        g1 = cache.create_graph(f, a)
        assert cache.create_graph(f, b) is g1  # same shape and dtype
        assert cache.create_graph(f, a, k=2) is not g1
        assert cache.create_graph(f, popxl.variable(np.ones(3, np.float32))) is not g1
        assert cache.create_graph(f, popxl.variable(np.ones((2, 2), np.float16))) is not g1


@pytest.mark.parametrize("io_mode", ["compute", "io", "io_overlapped"])
def test_batch_serialise_with_callable_and_fixed_row_offsets(io_mode: str) -> None:
    """Two calls (rows 0 and 1) of a graph that loads row ``n + 1`` (a callable row offset:
    the index split by integer division and modulo) and stores to row ``n``."""
    steps, rows = 3, 3
    data = RNG.standard_normal((rows * steps, 2, 4)).astype(np.float32)
    ir = popxl.Ir()
    if io_mode != "compute":
        ir._pb_ir.getSessionOptions().numIOTiles = 32
    with ir.main_graph, popxl.in_sequence(True):
        facts, g = _Affine().create_graph(popxl.TensorSpec((2, 4), popxl.float32))
        x_in, y_out = g.graph.inputs[0], g.graph.outputs[0]
        in_buf = batch_serial_buffer(x_in, steps=steps, rows=rows)
        out_buf = batch_serial_buffer(y_out, steps=steps, rows=rows)
        result = batch_serialise(
            g,
            steps,
            load_handles={x_in: RemoteHandle(in_buf, lambda n: n + 1)},
            store_streams={},
            store_buffers={y_out: RemoteHandle(out_buf, 0)},
            rows=rows,
            io_mode=io_mode,  # type: ignore[arg-type]
        )
        h2ds = [popxl.h2d_stream((2, 4), popxl.float32) for _ in range(rows * steps)]
        for e, h2d in enumerate(h2ds):
            ops.remote_store(in_buf, e, ops.host_load(h2d))
        variables = facts.init()
        result.graph.bind(variables).call(0)
        result.graph.bind(variables).call(1)
        ds = [_store(ops.remote_load(out_buf, e)) for e in range(rows * steps)]
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run(dict(zip(h2ds, data)))
    got = np.stack([out[d] for d in ds])
    np.testing.assert_allclose(got[: 2 * steps], data[steps:] * 3 + 1, rtol=1e-6)
    np.testing.assert_array_equal(got[2 * steps :], 0)


@pytest.mark.parametrize("bias_correction", [True, False])
def test_adam_step_on_a_float16_variable(bias_correction: bool) -> None:
    """The optimizer's defaults: a float16 first moment, float32 second moment and step."""
    w0 = RNG.standard_normal(4).astype(np.float16)
    grads = RNG.standard_normal((3, 4)).astype(np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        h2d = popxl.h2d_stream((4,), popxl.float16)
        var = popxl.variable(w0, popxl.float16, name="w")
        grad = ops.host_load(h2d)
        facts, opt = AdamOptimizerStep().create_graph(
            var, grad.spec, lr=0.1, bias_correction=bias_correction, weight_decay=0.0
        )
        kinds = {k: v.dtype for k, v in facts.to_dict().items()}
        expected = {"first_order": popxl.float16, "second_order": popxl.float32}
        if bias_correction:
            expected["step"] = popxl.float32
        assert kinds == expected
        opt.bind(facts.init()).call(var, grad)
    w, m, v = w0.astype(np.float32), np.zeros(4), np.zeros(4)
    with popxl.Session(ir, "ipu_model") as s:
        for t, g16 in enumerate(grads, 1):
            s.run({h2d: g16})
            g = g16.astype(np.float32)
            m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g**2
            if bias_correction:
                w = w - 0.1 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-5)
            else:
                w = w - 0.1 * m / (np.sqrt(v) + 1e-5)
        got = s.get_tensor_data(var)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), w, rtol=5e-3, atol=5e-3)


class _Nested(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        (y,) = self.call_module(_Scale(), name="inner", autodiff="autodiff")(x)
        (z,) = self.call_module(_Scale(), name="inner2", autodiff="none")(y)
        return ops.sin(z)


def test_autodiff_through_called_modules() -> None:
    """One called module differentiated where it is called (its grad graph handed to the
    outer autodiff), one left to the outer autodiff: d sin(4 x) in x and both scales."""
    x0 = np.array([0.1, 0.2, 0.3], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x0)
        facts, g = _Nested().create_graph(x)
        assert len(g.called_graphs_grad_info) == 1
        dg = addons.autodiff(g)
        info = g.bind(facts.init()).call_with_info(x)
        seed = popxl.constant(np.ones(3, np.float32))
        grads = dg.call(seed, args=dg.grad_graph_info.inputs_dict(info))
        fwd_inputs = [e.fwd_tensor for e in dg.grad_graph_info.expected_outputs]
        # the variables' graph inputs are named after their factories ("w", then "w__t1")
        by_arg = {g.args.to_dict()[k]: k for k in g.args.keys_flat()}
        names = [by_arg.get(t, "x") for t in fwd_inputs]
        ds = [_store(t) for t in grads]
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
    got = {n: out[d] for n, d in zip(names, ds)}
    c = np.cos(4 * x0)
    assert sorted(got) == ["inner.w", "inner2.w", "x"]
    np.testing.assert_allclose(got["x"], 4 * c, rtol=1e-5)
    np.testing.assert_allclose(got["inner.w"], 2 * x0 * c, rtol=1e-5)
    np.testing.assert_allclose(got["inner2.w"], 2 * x0 * c, rtol=1e-5)


class _SinScale(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", lambda: np.full(x.shape[-1:], 0.5, np.float32))
        return ops.sin(x * w)


@pytest.mark.parametrize("io_mode", ["compute", "io", "io_overlapped"])
def test_batch_serialised_gradient_with_replica_sharded_activations(io_mode: str) -> None:
    """``batch_serialise_fwd_and_grad`` told to shard the stored activations over both
    replicas (a ``ReplicaGrouping`` in ``store_buffers``): each replica keeps its slice of
    its own activations, the gradient graph gathers the slices back. With different data
    per replica, replica 0's gradient sees slice 0 from itself and slice 1 from replica 1."""
    b, steps, r, h = 2, 3, 2, 4
    ir = popxl.Ir(replication=r)
    ir.num_host_transfers = steps
    if io_mode != "compute":
        ir._pb_ir.getSessionOptions().numIOTiles = 32
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((b, h), popxl.float32, "x")
        dy_h2d = popxl.h2d_stream((b, h), popxl.float32, "dy")
        facts, fwd = _SinScale().create_graph(popxl.TensorSpec((b, h), popxl.float32))
        accum_facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
        acts = [
            ec.fwd_tensor
            for ec in bwd.grad_graph_info.expected_inputs
            if ec.connection_type.name == "Fwd" and ec.fwd_tensor not in fwd.args.tensors
        ]
        assert sorted(a.name for a in acts) == ["mul_out", "x"]
        fwd_bs, bwd_bs = batch_serialise_fwd_and_grad(
            fwd,
            bwd,
            fwd.args,
            steps,
            load_handles={fwd.graph.inputs[0]: x_h2d, bwd.graph.inputs[0]: dy_h2d},
            store_streams={},
            store_buffers={a: ir.replica_grouping() for a in acts},
            io_mode=io_mode,  # type: ignore[arg-type]
        )
        for handle in fwd_bs.stored_buffers.values():
            assert (handle.buffer.tensor_shape, handle.buffer.meta_shape) == ((4,), (b, h))
        v, acc = facts.init(), accum_facts.init()
        fwd_bs.graph.bind(v).call(0)
        bwd_vars = acc.copy()
        bwd_vars.update(v)
        bwd_bs.graph.bind(bwd_vars).call(0)
    xs = RNG.standard_normal((steps, r, b, h)).astype(np.float32)
    dys = RNG.standard_normal((steps, r, b, h)).astype(np.float32)
    with popxl.Session(ir, "ipu_model") as s:
        s.run({x_h2d: xs, dy_h2d: dys})
        got = s.get_tensor_data(acc.to_dict()["accum.w"])  # replica 0's
    flat = xs.reshape(steps, r, b * h)
    gathered = np.concatenate([flat[:, 0, :4], flat[:, 1, 4:]], axis=1).reshape(steps, b, h)
    ref = (dys[:, 0] * np.cos(gathered * 0.5) * gathered).sum(1).mean(0)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [popxl.float32, popxl.float16])
def test_cross_entropy_with_ignore_index_and_loss_scaling(
    reduction: str, dtype: popxl.dtype
) -> None:
    """``cross_entropy`` and ``cross_entropy_with_grad`` (gradient scaled by the loss
    scaling, not the loss), label 2 ignored, against torch."""
    from popxl_addons.ops.cross_entropy import cross_entropy

    x0 = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    labels = np.array([[0, 3, 2], [2, 4, 1]], np.int32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x0, dtype)
        lab = popxl.variable(labels, popxl.int32)
        loss, dx = addons.cross_entropy_with_grad(
            x,
            lab,
            loss_scaling=4.0,
            ignore_index=2,
            reduction=reduction,  # type: ignore[arg-type]
        )
        plain = cross_entropy(x, lab, ignore_index=2, reduction=reduction)  # type: ignore[arg-type]
        ds = [_store(t) for t in (loss, dx, plain)]
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
    xt = torch.tensor(x0, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(
        xt.reshape(-1, 5),
        torch.tensor(labels.reshape(-1)).long(),
        ignore_index=2,
        reduction=reduction,
    )
    (ref.sum() * 4).backward()
    assert out[ds[0]].dtype == dtype.as_numpy() and out[ds[1]].dtype == dtype.as_numpy()
    assert out[ds[0]].shape == (() if reduction != "none" else (2, 3))
    tol = 1e-5 if dtype == popxl.float32 else 1e-2
    want = ref.detach().numpy().reshape(out[ds[0]].shape)
    np.testing.assert_allclose(out[ds[0]].astype(np.float32), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(out[ds[2]].astype(np.float32), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(out[ds[1]].astype(np.float32), xt.grad.numpy(), rtol=tol, atol=tol)
