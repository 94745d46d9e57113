"""popxl-addons' layers (Embedding, LayerNorm, Linear, Conv2D, GroupNorm), replica-sharded
variables gathered by its RTS helpers, its graph cache and TaskSession checkpoints, used as
its users use them, against NumPy."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import popxl_addons as addons
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from popxl_addons.layers import Conv2D, Embedding, GroupNorm, LayerNorm, Linear
from popxl_addons.remote import load_remote_graph, named_variable_buffers
from popxl_addons.rts import all_gather_replica_sharded_graph

import popxl
from popxl import ops

RNG = np.random.default_rng(5)


def _run(ir: popxl.Ir, out: popxl.Tensor, state: addons.NamedTensors):
    with ir.main_graph:
        d2h = popxl.d2h_stream(out.shape, out.dtype)
        ops.host_store(d2h, out)
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()[d2h]
        data = s.get_tensors_data(state.tensors)
    return got, {k: data[t] for k, t in state.to_dict().items()}


def _norm(x: np.ndarray, axes: tuple[int, ...], eps: float = 1e-5) -> np.ndarray:
    return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)


class EmbedNormProject(addons.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = Embedding(popxl.float32, 10, 4)
        self.ln = LayerNorm()
        self.fc = Linear(3)

    def build(self, idx: popxl.Tensor) -> popxl.Tensor:
        return self.fc(self.ln(self.emb(idx)))


def test_embedding_layer_norm_linear() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        idx = popxl.variable(np.array([1, 3, 7, 3], np.int32), popxl.int32, name="idx")
        facts, graph = EmbedNormProject().create_graph(idx)
        v = facts.init()
        (y,) = graph.bind(v).call(idx)
    got, w = _run(ir, y, v)
    h = _norm(w["emb.weight"][[1, 3, 7, 3]], (-1,)) * w["ln.weight"] + w["ln.bias"]
    np.testing.assert_allclose(got, h @ w["fc.weight"] + w["fc.bias"], rtol=1e-4, atol=1e-5)


class ConvGroupNorm(addons.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = Conv2D(4, 3, paddings=(1, 1, 1, 1))
        self.gn = GroupNorm(2)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return self.gn(self.conv(x))


def test_conv2d_group_norm() -> None:
    x0 = RNG.standard_normal((2, 2, 5, 5)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x0, name="x")
        facts, graph = ConvGroupNorm().create_graph(x)
        v = facts.init()
        (y,) = graph.bind(v).call(x)
    got, w = _run(ir, y, v)
    windows = sliding_window_view(np.pad(x0, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), (2, 3))
    conv = np.einsum("nchwij,ocij->nohw", windows, w["conv.weight"]) + w["conv.bias"]
    grouped = _norm(conv.reshape(2, 2, 2, 5, 5), (2, 3, 4)).reshape(conv.shape)
    ref = grouped * w["gn.weight"][:, None, None] + w["gn.bias"][:, None, None]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


class Sharded(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        self.add_variable_input("w", partial(np.arange, 8, dtype=np.float32), popxl.float32)
        return x


def test_replica_sharded_remote_variable_gathered() -> None:
    R = 2
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        facts, _ = Sharded().create_graph(x)
        buffers = named_variable_buffers(facts, shard_over_dict=True)
        v = facts.init_remote(buffers)
        load, names = load_remote_graph(buffers)
        (shard,) = load.call(0)
        gather, _ = all_gather_replica_sharded_graph(addons.NamedTensors.pack(names, [shard]))
        (full,) = gather.call(shard)
    assert shard.shape == (8 // R,)
    got, _ = _run(ir, full, v)
    np.testing.assert_array_equal(got, np.tile(np.arange(8, dtype=np.float32), (R, 1)))


def test_graph_cache_builds_a_function_once() -> None:
    built = []

    @addons.function
    def double(t: popxl.Tensor) -> popxl.Tensor:
        built.append(t.shape)
        return t * 2.0

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(3, dtype=np.float32))
        (y,) = double(x)
        (z,) = double(y)
    got, _ = _run(ir, z, addons.NamedTensors())
    assert built == [(3,)]
    np.testing.assert_array_equal(got, np.arange(3) * 4)


# popxl-addons reads session_info.json through an open() it never closes (not Tremula's)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_task_session_checkpoint_round_trip(tmp_path: Path) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((2, 3), popxl.float32, "x")
        y_d2h = popxl.d2h_stream((2, 2), popxl.float32, "y")
        facts, graph = Linear(2).create_graph(popxl.TensorSpec((2, 3), popxl.float32))
        v = facts.init()
        (y,) = graph.bind(v).call(ops.host_load(x_h2d))
        ops.host_store(y_d2h, y)
    x0 = RNG.standard_normal((2, 3)).astype(np.float32)
    session = addons.TaskSession([x_h2d], [y_d2h], v, ir=ir, device_desc="ipu_model")
    with session:
        before = session.get_named_tensors_data()
        session.save_checkpoint(str(tmp_path / "ckpt"))
        session.write_variables_data({v.weight: np.zeros((3, 2), np.float32)})
        session.load_checkpoint(str(tmp_path / "ckpt"))
        after = session.get_named_tensors_data()
        out = session.run({x_h2d: x0})[y_d2h]
    np.testing.assert_array_equal(after.weight, before.weight)
    np.testing.assert_allclose(out, x0 @ before.weight + before.bias, rtol=1e-5, atol=1e-6)
