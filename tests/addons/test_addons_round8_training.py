"""popxl-addons training programs beyond GPT-J and BERT, written as its own test suite
would write them: its Adam step with tensor learning rate and global-norm clipping; a
data-parallel Linear trained with it in a ``TaskSession`` (``InputStreams`` /
``OutputStreams``) that is checkpointed and resumed, on memory-mapped variables, and phased
with replica-sharded variables and optimizer state in remote buffers. Against torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import popxl_addons as addons
import pytest
import torch
from popxl_addons import NamedTensors
from popxl_addons.layers import Linear
from popxl_addons.optimizers.adam import AdamOptimizerStep
from popxl_addons.remote import load_remote_graph, named_variable_buffers, store_remote_graph
from popxl_addons.rts import all_gather_replica_sharded_graph, reduce_replica_sharded_graph
from popxl_addons.streams import InputStreams, OutputStreams
from popxl_addons.task_session import TaskSession

import popxl
from popxl import ops

RNG = np.random.default_rng(18)
R, B = 2, 3  # replicas, rows per replica


def test_adam_with_tensor_lr_and_global_norm_clipping_matches_torch() -> None:
    """As GPT-J's fine-tuning builds it: ``lr`` and ``global_norm`` are graph inputs
    (TensorSpecs), the gradient carries a loss scale of 8 and is clipped to norm 1."""
    w0 = RNG.standard_normal((3, 4)).astype(np.float32)
    g0 = 3 * RNG.standard_normal((3, 4)).astype(np.float32)
    scalar = popxl.TensorSpec((), popxl.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        var, grad = popxl.variable(w0, name="w"), popxl.variable(g0 * 8, name="g")
        lr = popxl.variable(np.float32(0.01), name="lr")
        norm = popxl.variable(np.float32(np.sqrt((g0.astype(np.float64) ** 2).sum())), name="n")
        facts, graph = AdamOptimizerStep().create_graph(
            var,
            grad.spec,
            lr=scalar,
            weight_decay=0.0,
            first_order_dtype=popxl.float32,
            loss_scaling=8,
            global_norm=scalar,
            global_norm_max=1.0,
        )
        graph.bind(facts.init()).call(var, grad, lr, norm)
    with popxl.Session(ir, "ipu_model") as s:
        for _ in range(2):
            s.run()
        got = s.get_tensor_data(var)
    p = torch.nn.Parameter(torch.tensor(w0))
    opt = torch.optim.Adam([p], lr=0.01, eps=1e-5)
    for _ in range(2):
        p.grad = torch.tensor(g0)
        torch.nn.utils.clip_grad_norm_([p], 1.0)
        opt.step()
    np.testing.assert_allclose(got, p.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_input_and_output_streams() -> None:
    a, b = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        ins = InputStreams(x=((2, 3), popxl.float32), y=((2, 3), popxl.float32))
        outs = OutputStreams(z=((2, 3), popxl.float32))
        ops.host_store(outs.z, ops.host_load(ins.x) * ops.host_load(ins[1]))
    assert [s.tensor_id for s in ins] == ["x", "y"]
    with pytest.raises(AttributeError, match="Available Keys"):
        ins.w  # noqa: B018
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run({ins.x: a, ins.y: b})[outs.z]
    np.testing.assert_allclose(got, a * b, rtol=1e-6)


def _data_parallel_program(memmap_dir: Path | None = None, loss_scaling: float = 1.0):
    """A Linear(4 -> 2) trained on the mean squared error, its gradients averaged over the
    replicas and applied by popxl-addons' Adam step (with ``loss_scaling``, the gradient
    scaled by it first)."""
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        ins = InputStreams(x=((B, 4), popxl.float32), t=((B, 2), popxl.float32))
        outs = OutputStreams(loss=((), popxl.float32))
        facts, fwd = Linear(2).create_graph(ins.x.spec)
        bwd = addons.autodiff(fwd)
        state = facts.init("lin", memmap_dir=None if memmap_dir is None else str(memmap_dir))
        info = fwd.bind(state).call_with_info(ops.host_load(ins.x))
        diff = info.outputs[0] - ops.host_load(ins.t)
        ops.host_store(outs.loss, ops.mean(diff * diff))
        dy = diff * (2.0 * loss_scaling / diff.nelms)
        grads = bwd.call(dy, args=bwd.grad_graph_info.inputs_dict(info))
        fwd_inputs = [a.fwd_tensor for a in bwd.grad_graph_info.expected_outputs]
        grad_of = {info.graph_to_parent(t): g for t, g in zip(fwd_inputs, grads)}
        for name, var in list(state.to_dict().items()):
            grad = ops.collectives.replicated_all_reduce(grad_of[var], op="mean")
            opt_facts, opt = AdamOptimizerStep().create_graph(
                var, grad.spec, lr=0.1, first_order_dtype=popxl.float32, loss_scaling=loss_scaling
            )
            opt_state = opt_facts.init(f"opt.{name}")
            opt.bind(opt_state).call(var, grad)
            state.insert(f"adam_{name}", opt_state)
    return ir, ins, outs, state


def _torch_adamw(xs: np.ndarray, ts: np.ndarray, w0: np.ndarray, b0: np.ndarray):
    """Each step's loss on each replica's rows, and the final weight and bias."""
    lin = torch.nn.Linear(4, 2)
    lin.weight.data, lin.bias.data = torch.tensor(w0.T.copy()), torch.tensor(b0.copy())
    opt = torch.optim.AdamW(lin.parameters(), lr=0.1, eps=1e-5, weight_decay=1e-2)
    losses = []
    for x, t in zip(xs, ts):
        opt.zero_grad()
        per_replica = [
            ((lin(torch.tensor(x[r])) - torch.tensor(t[r])) ** 2).mean() for r in range(R)
        ]
        (sum(per_replica) / R).backward()
        opt.step()
        losses.append([v.item() for v in per_replica])
    return np.array(losses), lin.weight.detach().numpy().T, lin.bias.detach().numpy()


# TaskSession.load_checkpoint reads session_info.json with json.load(open(...)) and leaves
# the file to the garbage collector
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_data_parallel_adam_training_resumes_from_a_checkpoint(tmp_path: Path) -> None:
    """Two steps, ``save_checkpoint``; a fresh session ``load_checkpoint``s and takes two more:
    the four steps are torch's AdamW (popxl-addons' Adam with decoupled weight decay)."""
    xs = RNG.standard_normal((4, R, B, 4)).astype(np.float32)
    ts = RNG.standard_normal((4, R, B, 2)).astype(np.float32)
    ir, ins, outs, state = _data_parallel_program()
    with TaskSession(ins, outs, state, ir=ir, device_desc="ipu_model") as s:
        start = {k: v.copy() for k, v in s.get_named_tensors_data().to_dict().items()}
        losses = [s.run({ins.x: xs[i], ins.t: ts[i]})[outs.loss] for i in range(2)]
        s.save_checkpoint(str(tmp_path))
    assert (tmp_path / "model" / "adam_weight.first_order.npz").exists()
    ir, ins, outs, state = _data_parallel_program()
    with TaskSession(ins, outs, state, ir=ir, device_desc="ipu_model") as s:
        s.load_checkpoint(str(tmp_path))
        assert s.session_state["steps"] == 2
        losses += [s.run({ins.x: xs[i], ins.t: ts[i]})[outs.loss] for i in range(2, 4)]
        end = s.get_named_tensors_data().to_dict()
    ref_losses, w, b = _torch_adamw(xs, ts, start["weight"], start["bias"])
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(end["weight"], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(end["bias"], b, rtol=1e-5, atol=1e-6)


def test_memory_mapped_variables_train_in_place(tmp_path: Path) -> None:
    """``facts.init(memmap_dir=...)`` backs the variables with raw memmap files that the
    session reads and writes back; with a loss scale the Adam step unscales the gradient."""
    xs = RNG.standard_normal((2, R, B, 4)).astype(np.float32)
    ts = RNG.standard_normal((2, R, B, 2)).astype(np.float32)
    ir, ins, outs, state = _data_parallel_program(tmp_path, loss_scaling=8.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lin.bias.npy", "lin.weight.npy"]
    with TaskSession(ins, outs, state, ir=ir, device_desc="ipu_model") as s:
        start = {k: v.copy() for k, v in s.get_named_tensors_data().to_dict().items()}
        losses = [s.run({ins.x: xs[i], ins.t: ts[i]})[outs.loss] for i in range(2)]
        s.get_named_tensors_data()  # weights to host: written to the files
    ref_losses, w, _ = _torch_adamw(xs, ts, start["weight"], start["bias"])
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    on_disk = np.memmap(tmp_path / "lin.weight.npy", np.float32, "r", shape=(4, 2))
    np.testing.assert_allclose(on_disk, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("io_tiles", [False, True])
def test_phased_training_with_replica_sharded_state_in_remote_buffers(io_tiles: bool) -> None:
    """BERT's phased pattern on a Linear: the weights (``init_remote``) and each Adam state
    live sharded over the replicas in remote buffers; a step loads the shards, all-gathers
    them, runs forward and backward, reduce-scatters the gradients (mean), updates the shards
    and stores them back. Three steps are torch's AdamW on the replicas' mean loss."""
    xs = RNG.standard_normal((3, R, B, 4)).astype(np.float32)
    ts = RNG.standard_normal((3, R, B, 2)).astype(np.float32)
    ir = popxl.Ir(replication=R)
    with ir.main_graph, popxl.in_sequence():
        ins = InputStreams(x=((B, 4), popxl.float32), t=((B, 2), popxl.float32))
        outs = OutputStreams(loss=((), popxl.float32))
        facts, fwd = Linear(2).create_graph(ins.x.spec)
        bwd = addons.autodiff(fwd)
        buffers = named_variable_buffers(facts)
        variables = facts.init_remote(buffers, 0, "lin")
        load, names = load_remote_graph(buffers, use_io_tiles=io_tiles)
        shards = NamedTensors.pack(names, load.call(0))
        assert shards.weight.shape == (4,) and shards.weight.meta_shape == (4, 2)
        gather, names = all_gather_replica_sharded_graph(shards, use_io_tiles=io_tiles)
        info = fwd.bind(NamedTensors.pack(names, gather.bind(shards).call())).call_with_info(
            ops.host_load(ins.x)
        )
        diff = info.outputs[0] - ops.host_load(ins.t)
        ops.host_store(outs.loss, ops.mean(diff * diff))
        dws = bwd.call(diff * (2.0 / diff.nelms), args=bwd.grad_graph_info.inputs_dict(info))
        of_input = {a.fwd_tensor: g for a, g in zip(bwd.grad_graph_info.expected_outputs, dws)}
        grads = NamedTensors.from_dict({n: of_input[t] for n, t in fwd.args.to_dict().items()})
        reduce, names = reduce_replica_sharded_graph(grads, op="mean", use_io_tiles=io_tiles)
        grad_shards = NamedTensors.pack(names, reduce.bind(grads).call())
        for name in names:
            var, grad = shards.get(name), grad_shards.get(name)
            opt_facts, opt = AdamOptimizerStep().create_graph(
                var, grad.spec, lr=0.1, first_order_dtype=popxl.float32
            )
            sharded = {"first_order": R, "second_order": R, "step": 1}
            opt_buffers = named_variable_buffers(opt_facts, shard_over_dict=sharded)
            opt_facts.init_remote(opt_buffers, 0, f"adam.{name}")
            load_opt, opt_names = load_remote_graph(opt_buffers, use_io_tiles=io_tiles)
            state = NamedTensors.pack(opt_names, load_opt.call(0))
            opt.bind(state).call(var, grad)
            store_remote_graph(opt_buffers, use_io_tiles=io_tiles).bind(state).call(0)
        store_remote_graph(buffers, use_io_tiles=io_tiles).bind(shards).call(0)
    with popxl.Session(ir, "ipu_model") as s:
        start = {n: s.get_tensor_data(t).copy() for n, t in variables.to_dict().items()}
        losses = [s.run({ins.x: xs[i], ins.t: ts[i]})[outs.loss] for i in range(3)]
        end = {n: s.get_tensor_data(t) for n, t in variables.to_dict().items()}
    ref_losses, w, b = _torch_adamw(xs, ts, start["weight"], start["bias"])
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(end["weight"], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(end["bias"], b, rtol=1e-5, atol=1e-6)


class ReluLinear(addons.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = Linear(4)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return ops.relu(self.fc(x))


class LinearMSE(addons.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = Linear(2)

    def build(self, h: popxl.Tensor, t: popxl.Tensor) -> popxl.Tensor:
        d = self.fc(h) - t
        return ops.mean(d * d)


def test_replicated_pipeline_trains_like_torch_sgd() -> None:
    """Two pipeline stages of popxl-addons Linear layers on IPUs 0 and 1, on two replicas:
    the gradients accumulated over the micro-batches are averaged over the replicas, then an
    SGD step; two runs are torch's SGD on the mean loss of all micro-batches and replicas."""
    steps, lr = 6, 0.05  # at least twice the stages
    ir = popxl.Ir(replication=R)
    ir.num_host_transfers = steps
    with ir.main_graph:
        ins = InputStreams(x=((2, 3), popxl.float32), t=((2, 2), popxl.float32))
        outs = OutputStreams(loss=((), popxl.float32))
        with popxl.ipu(0):
            facts0, fwd0 = ReluLinear().create_graph(ins.x.spec)
            acc_facts0, bwd0 = addons.autodiff_with_accumulation(
                fwd0, fwd0.args.tensors, grads_required=[]
            )
            v0, acc0 = facts0.init("s0"), acc_facts0.init("s0")
        with popxl.ipu(1):
            facts1, fwd1 = LinearMSE().create_graph(
                popxl.TensorSpec((2, 4), popxl.float32), ins.t.spec
            )
            acc_facts1, bwd1 = addons.autodiff_with_accumulation(
                fwd1, fwd1.args.tensors, grads_required=fwd1.graph.inputs[:1]
            )
            v1, acc1 = facts1.init("s1"), acc_facts1.init("s1")
        with popxl.in_sequence(True), addons.pipelined_execution(steps) as p:
            with p.stage(0), popxl.ipu(0):
                call0 = fwd0.bind(v0).call_with_info(ops.host_load(ins.x))
                h = call0.parent_output(0).copy_to_ipu(1)
            with p.stage(1), popxl.ipu(1):
                call1 = fwd1.bind(v1).call_with_info(h, ops.host_load(ins.t))
                ops.host_store(outs.loss, call1.parent_output(0))
                args = bwd1.grad_graph_info.inputs_dict(call1)
                (dh,) = bwd1.bind(acc1).call(popxl.constant(1.0), args=args)
                dh = dh.copy_to_ipu(0)
            with p.stage(2), popxl.ipu(0):
                acts = p.stash_and_restore_activations(call0, bwd0.grad_graph_info)
                bwd0.bind(acc0).call(dh, args=acts)
        with popxl.in_sequence(True):
            for ipu, (v, acc) in enumerate(((v0, acc0), (v1, acc1))):
                with popxl.ipu(ipu):
                    for name, var in v.to_dict().items():
                        mean = ops.collectives.replicated_all_reduce(acc.accum.get(name), "mean")
                        ops.scaled_add_(var, mean, b=-lr)
                    for a in acc.tensors:
                        ops.var_updates.accumulator_scale_(a, 0.0)
    xs = RNG.standard_normal((2, steps, R, 2, 3)).astype(np.float32)
    ts = RNG.standard_normal((2, steps, R, 2, 2)).astype(np.float32)
    with popxl.Session(ir, "ipu_model") as s:
        start = [s.get_tensors_data(v.tensors) for v in (v0, v1)]
        losses = [s.run({ins.x: x, ins.t: t})[outs.loss] for x, t in zip(xs, ts)]
        end = s.get_tensors_data([v0.fc.weight, v1.fc.weight, v1.fc.bias])
    fc0, fc1 = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)
    with torch.no_grad():
        for fc, v, data in zip((fc0, fc1), (v0, v1), start):
            fc.weight.copy_(torch.tensor(data[v.fc.weight].T))
            fc.bias.copy_(torch.tensor(data[v.fc.bias]))
    opt = torch.optim.SGD([*fc0.parameters(), *fc1.parameters()], lr=lr)
    ref_losses = []
    for x, t in zip(xs, ts):
        opt.zero_grad()
        per = ((fc1(torch.relu(fc0(torch.tensor(x)))) - torch.tensor(t)) ** 2).mean((-2, -1))
        per.mean().backward()
        opt.step()
        ref_losses.append(per.detach().numpy())
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(end[v0.fc.weight], fc0.weight.detach().numpy().T, atol=1e-6)
    np.testing.assert_allclose(end[v1.fc.weight], fc1.weight.detach().numpy().T, atol=1e-6)
    np.testing.assert_allclose(end[v1.fc.bias], fc1.bias.detach().numpy(), atol=1e-6)
