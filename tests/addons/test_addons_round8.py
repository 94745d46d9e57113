"""popxl-addons programs beyond GPT-J and BERT, written as its own test suite would write
them: its C++ custom ops (rotary embedding, grad reduce-square-add, 4-bit group
quantisation, static sparse matmul, distributed layer norm, sharded cross-entropy) forward
and through ``addons.autodiff``; modules with a hand-written gradient graph (``build_grad``,
its float8 Linear). Checked against torch and NumPy; its training programs are in
test_addons_round8_training.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import popxl_addons as addons
import pytest
import torch
from popxl_addons.layers import Linear
from popxl_addons.layers.linear_fp8 import LinearFP8
from popxl_addons.layers.linear_gq import LinearGQ
from popxl_addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from popxl_addons.ops.cross_entropy_sharded_wr_loss import cross_entropy_sharded_wr_loss
from popxl_addons.ops.grad_reduce_square_add import grad_reduce_square_add
from popxl_addons.ops.group_quantize_decompress import (
    group_quantize_compress_numpy,
    group_quantize_decompress,
    group_quantize_decompress_numpy,
)
from popxl_addons.ops.layer_norm_distributed import layer_norm_distributed
from popxl_addons.ops.rotary_pos_embed import rotary_pos_embed, trig_table_constants
from popxl_addons.ops.static_sparse_ops.dense_sparse_matmul import (
    dense_const_sparse_matmul,
    random_sparse,
)
from popxl_addons.transforms.autodiff import autodiff_with_accumulation
from popxl_addons.transforms.batch_serialisation import batch_serialise
from scipy.sparse import csr_matrix

import popxl
from popxl import ops

RNG = np.random.default_rng(8)
R = 2  # replicas of the tensor- and data-parallel programs


def _store(t: popxl.Tensor) -> popxl.DeviceToHostStream:
    d2h = popxl.d2h_stream(t.shape, t.dtype)
    ops.host_store(d2h, t)
    return d2h


def _run(ir: popxl.Ir, *streams: popxl.DeviceToHostStream) -> list[np.ndarray]:
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
    return [out[d] for d in streams]


def _loss_and_grad(
    ir: popxl.Ir, fn: Callable[..., popxl.Tensor], x: popxl.Tensor, *rest: popxl.Tensor
) -> tuple[popxl.DeviceToHostStream, popxl.DeviceToHostStream]:
    """Streams of ``fn(x, *rest)`` and of its gradient in ``x`` (seed ones), the graph
    differentiated by ``addons.autodiff`` as its users do."""
    fwd = ir.create_graph(fn, x.spec, *[t.spec for t in rest])
    bwd = addons.autodiff(fwd, grads_required=[fwd.inputs[0]])
    info = ops.call_with_info(fwd, x, *rest)
    y = info.outputs[0]  # autodiff added the activations the gradient needs as outputs
    seed = popxl.constant(np.ones(y.shape, y.dtype.as_numpy()), y.dtype)
    (dx,) = bwd.call(seed, args=bwd.grad_graph_info.inputs_dict(info))
    return _store(y), _store(dx)


def _per_replica(a: np.ndarray, ir: popxl.Ir, name: str) -> popxl.Tensor:
    """A variable holding ``a[r]`` on replica ``r``."""
    return popxl.variable(a, name=name, replica_grouping=ir.replica_grouping(group_size=1))


def _shards(a: np.ndarray) -> np.ndarray:
    return np.stack(np.split(a, R, axis=-1))


def test_rotary_pos_embed_forward_and_gradient_match_torch() -> None:
    """Layout [batch, seq, heads, head_dim]; only the first ``rotary_dim`` features rotate."""
    x0 = RNG.standard_normal((2, 4, 3, 8)).astype(np.float32)
    w0 = RNG.standard_normal(x0.shape).astype(np.float32)
    ir = popxl.Ir()

    def fn(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
        sin, cos = trig_table_constants(4, 6)
        return ops.sum(rotary_pos_embed(x, sin, cos, rotary_dim=6) * w)

    with ir.main_graph:
        y, dx = _loss_and_grad(ir, fn, popxl.variable(x0), popxl.variable(w0))
    got_y, got_dx = _run(ir, y, dx)
    xt = torch.tensor(x0, requires_grad=True)
    phi = torch.tensor(np.outer(np.arange(4), 10000.0 ** (-np.arange(0, 6, 2) / 6)))
    sin, cos = torch.sin(phi)[None, :, None].float(), torch.cos(phi)[None, :, None].float()
    re, im = xt[..., 0:6:2], xt[..., 1:6:2]
    rot = torch.stack([re * cos - im * sin, re * sin + im * cos], -1).flatten(-2)
    ref = (torch.cat([rot, xt[..., 6:]], -1) * torch.tensor(w0)).sum()
    ref.backward()
    np.testing.assert_allclose(got_y, ref.item(), rtol=1e-5)
    assert xt.grad is not None
    np.testing.assert_allclose(got_dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_grad_reduce_square_add_undoes_loss_scaling() -> None:
    g0 = RNG.standard_normal((3, 7)).astype(np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        out = _store(grad_reduce_square_add(popxl.variable(g0), loss_scaling=4))
    (got,) = _run(ir, out)
    assert got.dtype == np.float32 and got.shape == ()
    np.testing.assert_allclose(got, (g0.astype(np.float64) ** 2).sum() / 16, rtol=1e-6)


@pytest.mark.parametrize("dim", [-1, 0])
def test_group_quantised_linear_matches_torch(dim: int) -> None:
    """``LinearGQ`` with weights mapped from a torch ``nn.Linear`` (compressed to 4 bits in
    groups of 8 along the output or the input axis), and the decompression op alone: the op
    unpacks exactly as popxl-addons' NumPy decompression does, and the layer is torch's
    Linear with those weights."""
    lin = torch.nn.Linear(16, 32)
    x0 = RNG.standard_normal((3, 16)).astype(np.float16)
    w = lin.weight.detach().numpy().T  # what torch_mapping compresses
    packed, scale, bias = group_quantize_compress_numpy(w, 8, dim=dim)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x0, popxl.float16)
        facts, graph = LinearGQ(32, group_size=8, dim=dim).create_graph(x)
        state = facts.init()
        (y,) = graph.bind(state).call(x)
        tensors = [
            popxl.variable(packed, popxl.uint16),
            popxl.variable(scale),
            popxl.variable(bias),
        ]
        w_out = _store(group_quantize_decompress(*tensors, dim=dim))
        y_out = _store(y)
    with popxl.Session(ir, "ipu_model") as s:
        s.write_variables_data(
            LinearGQ.torch_mapping(state, lin, popxl.float16, group_size=8, dim=dim)
        )
        out = s.run()
    w_ref = group_quantize_decompress_numpy(packed, scale, bias, dim=dim)
    np.testing.assert_array_equal(out[w_out], w_ref)
    assert np.abs(w_ref - w).max() <= scale.max()  # within a 4-bit step of the weights
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(w_ref.T.astype(np.float32)))
        ref = lin(torch.tensor(x0.astype(np.float32))).numpy()
    np.testing.assert_allclose(out[y_out].astype(np.float32), ref, rtol=1e-2, atol=1e-2)


def test_dense_const_sparse_matmul() -> None:
    lhs = RNG.standard_normal((4, 8)).astype(np.float32)
    rhs = random_sparse(RNG.standard_normal((8, 6)).astype(np.float32), density=0.4)
    ir = popxl.Ir()
    with ir.main_graph:
        out = _store(dense_const_sparse_matmul(popxl.variable(lhs), csr_matrix(rhs), 6))
    (got,) = _run(ir, out)
    np.testing.assert_allclose(got, lhs @ rhs, rtol=1e-5, atol=1e-6)


def test_layer_norm_distributed_forward_and_gradient() -> None:
    """The hidden axis split over two replicas; the scale is 1 (as the layer starts), where
    the C++ gradient, which leaves the scale out, is the layer norm's."""
    x0 = RNG.standard_normal((3, 8)).astype(np.float32)
    w0 = RNG.standard_normal((3, 8)).astype(np.float32)
    b0 = RNG.standard_normal(8).astype(np.float32)
    ir = popxl.Ir(replication=R)
    group = ir.replica_grouping(group_size=R)
    with ir.main_graph:
        x, w = _per_replica(_shards(x0), ir, "x"), _per_replica(_shards(w0), ir, "w")
        gamma = _per_replica(np.ones((R, 4), np.float32), ir, "gamma")
        beta = _per_replica(_shards(b0), ir, "beta")

        def fn(x: popxl.Tensor, w: popxl.Tensor, g: popxl.Tensor, b: popxl.Tensor):
            return ops.sum(layer_norm_distributed(x, g, b, group=group) * w)

        y, dx = _loss_and_grad(ir, fn, x, w, gamma, beta)
    got_y, got_dx = _run(ir, y, dx)
    xt = torch.tensor(x0, requires_grad=True)
    ln = torch.nn.functional.layer_norm(xt, (8,), None, torch.tensor(b0), 1e-5)
    prod = ln * torch.tensor(w0)
    prod.sum().backward()
    parts = [prod[:, r * 4 : (r + 1) * 4].sum().item() for r in range(R)]
    np.testing.assert_allclose(got_y, parts, rtol=1e-5, atol=1e-5)
    assert xt.grad is not None
    np.testing.assert_allclose(np.concatenate(list(got_dx), -1), xt.grad.numpy(), atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_sharded_loss_and_gradient_match_torch(reduction: str) -> None:
    """Logits split over the classes on two replicas, labels offset to each shard."""
    logits = RNG.standard_normal((4, 10)).astype(np.float32)
    labels = np.array([1, 7, 4, 9])
    ir = popxl.Ir(replication=R)
    group = ir.replica_grouping(group_size=R)
    with ir.main_graph:
        x = _per_replica(_shards(logits), ir, "logits")
        local = np.stack([labels - 5 * r for r in range(R)]).astype(np.int32)
        idx = popxl.variable(
            local, popxl.int32, name="idx", replica_grouping=ir.replica_grouping(group_size=1)
        )
        y, dx = _loss_and_grad(
            ir,
            lambda a, b: cross_entropy_sharded_loss(
                a, b, replica_grouping=group, reduction=reduction
            ),
            x,
            idx,
        )
    got_y, got_dx = _run(ir, y, dx)
    xt = torch.tensor(logits, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(xt, torch.tensor(labels), reduction=reduction)
    loss.backward()
    np.testing.assert_allclose(got_y, [loss.item()] * R, rtol=1e-5)
    assert xt.grad is not None
    np.testing.assert_allclose(np.concatenate(list(got_dx), -1), xt.grad.numpy(), atol=1e-6)


def test_cross_entropy_sharded_within_replica_and_gradient_match_torch() -> None:
    """The within-replica variant: the class shards on IPUs 0 and 1 of one replica, the
    unreduced loss on IPU 0; labels are the global ones."""
    logits = RNG.standard_normal((4, 10)).astype(np.float32)
    labels = np.array([1, 7, 4, 9], np.int32)
    ir = popxl.Ir()
    with ir.main_graph:
        shards, idx = [], []
        for ipu in range(2):
            with popxl.ipu(ipu):
                part = logits[:, 5 * ipu : 5 * ipu + 5]
                shards.append(popxl.variable(part, name=f"logits{ipu}"))
                idx.append(popxl.variable(labels, popxl.int32, name=f"labels{ipu}"))
        fwd = ir.create_graph(
            lambda a, b, c, d: cross_entropy_sharded_wr_loss([a, b], [c, d], ipus=[0, 1]),
            *[t.spec for t in shards + idx],
        )
        bwd = addons.autodiff(fwd, grads_required=fwd.inputs[:2])
        info = ops.call_with_info(fwd, *shards, *idx)
        with popxl.ipu(0):
            ones = popxl.constant(np.ones(4, np.float32))
            grads = bwd.call(ones, args=bwd.grad_graph_info.inputs_dict(info))
        outs = [_store(t) for t in (info.outputs[0], *grads)]
    loss, d0, d1 = _run(ir, *outs)
    xt = torch.tensor(logits, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(xt, torch.tensor(labels).long(), reduction="none")
    ref.sum().backward()
    np.testing.assert_allclose(loss, ref.detach().numpy(), rtol=1e-6)
    assert xt.grad is not None
    np.testing.assert_allclose(np.concatenate([d0, d1], -1), xt.grad.numpy(), atol=1e-7)


class DoubledGradScale(addons.Module):
    """``y = x * w`` with a hand-written gradient graph (``build_grad``) that doubles the
    gradient of ``x``: it is seen to be used in place of autodiff's."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", lambda: np.full(x.shape[-1:], 3.0, np.float32), x.dtype)
        self.aux["x"], self.aux["w"] = x, w
        return x * w

    def build_grad(self, dy: popxl.Tensor) -> popxl.Tensor:
        self.var_grad["w"] = ops.sum(dy * self.aux["x"], 0)
        return dy * self.aux["w"] * 2.0


class CallsDoubledGradScale(addons.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = DoubledGradScale()

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        (y,) = self.call_module(self.inner)(x)
        return y * 5.0


@pytest.mark.parametrize("nested", [False, True])
def test_build_grad_gradient_graph_is_used_by_autodiff(nested: bool) -> None:
    """``GraphWithNamedArgs.autodiff`` takes the module's ``build_grad``; nested in a graph
    called through ``call_module``, ``addons.autodiff`` of the outer graph takes it too."""
    x0 = RNG.standard_normal((2, 3)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x0, name="x")
        module = CallsDoubledGradScale() if nested else DoubledGradScale()
        facts, fwd = module.create_graph(x.spec)
        bwd = addons.autodiff(fwd) if nested else fwd.autodiff()
        info = fwd.bind(facts.init()).call_with_info(x)
        ones = popxl.constant(np.ones((2, 3), np.float32))
        dx, dw = bwd.call(ones, args=bwd.grad_graph_info.inputs_dict(info))
        outs = _store(dx), _store(dw)
    got_dx, got_dw = _run(ir, *outs)
    outer = 5.0 if nested else 1.0
    np.testing.assert_array_equal(got_dx, np.full((2, 3), 2 * 3.0 * outer, np.float32))
    np.testing.assert_allclose(got_dw, outer * x0.sum(0), rtol=1e-6)


class ScaledLinear(addons.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = DoubledGradScale()
        self.fc = Linear(2)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        (h,) = self.call_module(self.scale)(x)
        return self.fc(h)


def test_accumulated_gradients_through_a_build_grad_module() -> None:
    """``autodiff_with_accumulation`` over a module calling one with ``build_grad``: three
    backward calls leave the running means of the weight gradients (the hand-written one
    for ``w``, which sees the unmodified ``dh``) and the count."""
    xs = RNG.standard_normal((3, 2, 3)).astype(np.float32)
    dys = RNG.standard_normal((3, 2, 2)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        facts, fwd = ScaledLinear().create_graph(popxl.TensorSpec((2, 3), popxl.float32))
        state = facts.init()
        acc_facts, bwd = autodiff_with_accumulation(fwd, fwd.args.tensors)
        acc = acc_facts.init()
        for x, dy in zip(xs, dys):
            info = fwd.bind(state).call_with_info(popxl.constant(x))
            bwd.bind(acc).call(popxl.constant(dy), args=bwd.grad_graph_info.inputs_dict(info))
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
        w = {k: s.get_tensor_data(t) for k, t in state.to_dict().items()}
        got = {k: s.get_tensor_data(t) for k, t in acc.to_dict().items()}
    assert sorted(got) == [
        "accum.DoubledGradScale.w",
        "accum.fc.bias",
        "accum.fc.weight",
        "mean_accum_counter",
    ]
    scale, weight = w["DoubledGradScale.w"], w["fc.weight"]
    d_weight = np.mean([(x * scale).T @ dy for x, dy in zip(xs, dys)], 0)
    d_scale = np.mean([((dy @ weight.T) * x).sum(0) for x, dy in zip(xs, dys)], 0)
    np.testing.assert_allclose(got["accum.fc.weight"], d_weight, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["accum.fc.bias"], dys.sum(1).mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["accum.DoubledGradScale.w"], d_scale, rtol=1e-5, atol=1e-6)
    assert got["mean_accum_counter"] == 3


@pytest.mark.parametrize("metric", ["amax", "mse", "manual_scale"])
def test_linear_fp8_forward_and_build_grad(metric: str) -> None:
    """The float8 Linear (weights and activations cast to float8 143 with a power-of-two
    scale, gradients to float8 152) against the float16 Linear, within float8 precision."""
    x0 = RNG.standard_normal((4, 16)).astype(np.float16)
    dy0 = RNG.standard_normal((4, 8)).astype(np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x0, popxl.float16, name="x")
        facts, fwd = LinearFP8(8, scale_metric=metric).create_graph(x.spec)
        bwd = fwd.autodiff()
        state = facts.init()
        info = fwd.bind(state).call_with_info(x)
        grads = bwd.call(popxl.constant(dy0), args=bwd.grad_graph_info.inputs_dict(info))
        outs = [_store(t) for t in (info.outputs[0], *grads)]
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()
        w = s.get_tensor_data(state.weight).astype(np.float32)
    y, dx, dw, db = (got[d].astype(np.float32) for d in outs)
    x32, dy32 = x0.astype(np.float32), dy0.astype(np.float32)
    # x, w in float8 143 (3 mantissa bits), dy in 152 (2): each factor is within half a
    # unit in the last place, so a product within the sum of the two, of |a| @ |b|
    for a, (lhs, m_l), (rhs, m_r) in [
        (y, (x32, 3), (w, 3)),
        (dx, (dy32, 2), (w.T, 3)),
        (dw, (x32.T, 3), (dy32, 2)),
    ]:
        bound = (2.0 ** -(m_l + 1) + 2.0 ** -(m_r + 1)) * (np.abs(lhs) @ np.abs(rhs))
        assert np.all(np.abs(a - lhs @ rhs) <= 1.1 * bound + 2e-3)
    np.testing.assert_allclose(db, dy32.sum(0), rtol=1e-2, atol=1e-2)


class DropoutLinear(addons.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = Linear(3)

    def build(self, x: popxl.Tensor, seed: popxl.Tensor) -> popxl.Tensor:
        return ops.dropout(self.fc(x), seed, p=0.5)


@pytest.mark.parametrize("io_mode", ["compute", "io", "io_overlapped"])
def test_batch_serialised_dropout_draws_a_seed_per_step(io_mode: str) -> None:
    """``batch_serialise`` with ``seed_input``: step ``i`` runs with the seed that
    ``split_random_seed`` gives the ``i``-th time from the loop's seed, as the same graph
    called once per step with those seeds does (a second program, same weights); the
    steps' masks differ."""
    steps, rows = 3, 2
    xs = RNG.standard_normal((steps, rows, 4)).astype(np.float32)
    seed0 = np.array([7, 11], np.uint32)
    seed_spec = popxl.TensorSpec((2,), popxl.uint32)
    ir = popxl.Ir()
    ir._pb_ir.getSessionOptions().numIOTiles = 32
    ir.num_host_transfers = steps
    with ir.main_graph:
        x_in = popxl.h2d_stream((rows, 4), popxl.float32, "x")
        y_out = popxl.d2h_stream((rows, 3), popxl.float32, "y")
        facts, graph = DropoutLinear().create_graph(x_in.spec, seed_spec)
        state = facts.init()
        x_t, seed_t = graph.graph.inputs[:2]
        serial = batch_serialise(
            graph, steps, {x_t: x_in}, {graph.graph.outputs[0]: y_out}, {}, seed_t, io_mode=io_mode
        )
        serial.graph.bind(state).call(0, popxl.variable(seed0, popxl.uint32, "seed"))
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run({x_in: xs})[y_out]
        weights = {k: s.get_tensor_data(t) for k, t in state.to_dict().items()}
    ref_ir = popxl.Ir()
    with ref_ir.main_graph:
        facts, graph = DropoutLinear().create_graph(
            popxl.TensorSpec((rows, 4), popxl.float32), seed_spec
        )
        ref_state = facts.init()
        seed, ys = popxl.constant(seed0, popxl.uint32), []
        for i in range(steps):
            step_seed, seed = ops.split_random_seed(seed)
            (y,) = graph.bind(ref_state).call(popxl.constant(xs[i]), step_seed)
            ys.append(y.reshape((1, rows, 3)))
        ref_out = _store(ops.concat(ys, 0))
    with popxl.Session(ref_ir, "ipu_model") as s:
        s.write_variables_data({t: weights[k] for k, t in ref_state.to_dict().items()})
        ref = s.run()[ref_out]
    np.testing.assert_array_equal(got, ref)
    kept = got != 0
    assert not (np.array_equal(kept[0], kept[1]) and np.array_equal(kept[1], kept[2]))
