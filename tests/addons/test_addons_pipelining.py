"""popxl-addons' pipelining (``addons.pipelined_execution``), used as its users use it: stages
on two IPUs, ``copy_to_ipu`` between them, activations stashed and restored for the backward
stage, gradients accumulated, an SGD step after the pipeline; checked against NumPy.

Its transform edits the loop PopXL's ``ops.repeat`` builds (a ``Loop`` op over a
``__loop_wrapper`` graph holding a ``CallOp`` of the repeated graph), so these also test that
Tremula's IR has that structure."""

from __future__ import annotations

import numpy as np
import popxl_addons as addons

import popart._internal.ir as _ir
import popxl
from popxl import ops

RNG = np.random.default_rng(11)
W0 = RNG.standard_normal((3, 4)).astype(np.float32)
W1 = RNG.standard_normal((4, 2)).astype(np.float32)
STEPS = 6  # micro-batches per run: at least twice the stages


class Affine(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", lambda: np.full(x.shape, 2.0, np.float32), x.dtype)
        return x * w + 1.0


class Hidden(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return ops.relu(x @ self.add_variable_input("w", W0.copy, x.dtype))


class Loss(addons.Module):
    def build(self, h: popxl.Tensor, t: popxl.Tensor) -> popxl.Tensor:
        d = h @ self.add_variable_input("w", W1.copy, h.dtype) - t
        return ops.mean(d * d)


def test_two_stage_inference_pipeline() -> None:
    ir = popxl.Ir()
    ir.num_host_transfers = STEPS
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((2, 3), popxl.float32, "x")
        y_d2h = popxl.d2h_stream((2, 3), popxl.float32, "y")
        stages = []
        for ipu in (0, 1):
            with popxl.ipu(ipu):
                facts, graph = Affine().create_graph(x_h2d.spec)
                stages.append(graph.bind(facts.init(f"s{ipu}")))
        with popxl.in_sequence(True), addons.pipelined_execution(STEPS) as p:
            with p.stage(0), popxl.ipu(0):
                (h,) = stages[0].call(ops.host_load(x_h2d, "x"))
                h = h.copy_to_ipu(1)
            with p.stage(1), popxl.ipu(1):
                (y,) = stages[1].call(h)
                ops.host_store(y_d2h, y)
    _check_loop_structure(ir, stages=2)
    xs = RNG.standard_normal((STEPS, 2, 3)).astype(np.float32)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run({x_h2d: xs})[y_d2h]
    np.testing.assert_allclose(out, (xs * 2 + 1) * 2 + 1, rtol=1e-6)


def _check_loop_structure(ir: popxl.Ir, stages: int) -> None:
    """The pipeline's main cycles are one Loop over PopXL's wrapper graph, which calls the
    cycle graph once, with the loop-carried IPU copies routed through it."""
    loops = [
        op for g in ir._pb_ir.getAllGraphs() for op in g.getOps() if isinstance(op, _ir.op.LoopOp)
    ]
    assert len(loops) == 1 and loops[0].getTripCountValue() == STEPS - (stages - 1)
    wrapper = loops[0].getCalledGraph()
    assert "__loop_wrapper" in wrapper.id.str()
    (call,) = wrapper.getOps()
    assert isinstance(call, _ir.op.CallOp)
    assert wrapper.getInputId(0).endswith("Iterator___")
    assert wrapper.getOutputId(0) == wrapper.getInputId(1)
    carried = wrapper.getOutputIds()[1:]
    assert carried and set(carried) <= {t.id for t in call.getOutputTensors()}


def _numpy_training(
    xs: np.ndarray, ts: np.ndarray, lr: float
) -> tuple[list, np.ndarray, np.ndarray]:
    """Per run: the mean gradient of the micro-batches' losses, then one SGD step."""
    w0, w1 = W0.astype(np.float64), W1.astype(np.float64)
    losses = []
    for x_run, t_run in zip(xs, ts):
        g0, g1, run_losses = np.zeros_like(w0), np.zeros_like(w1), []
        for x, t in zip(x_run, t_run):
            a = x @ w0
            h = np.maximum(a, 0)
            d = h @ w1 - t
            run_losses.append(np.mean(d * d))
            dy = 2 * d / d.size
            g1 += h.T @ dy / len(x_run)
            g0 += x.T @ ((dy @ w1.T) * (a > 0)) / len(x_run)
        w0, w1 = w0 - lr * g0, w1 - lr * g1
        losses.append(run_losses)
    return losses, w0, w1


def test_two_stage_pipelined_training_matches_numpy() -> None:
    """Stage 0 (IPU 0): the hidden layer; stage 1 (IPU 1): the loss and its gradient;
    stage 2 (IPU 0): the hidden layer's gradient from stashed activations."""
    lr, runs = 0.05, 3
    ir = popxl.Ir()
    ir.num_host_transfers = STEPS
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((2, 3), popxl.float32, "x")
        t_h2d = popxl.h2d_stream((2, 2), popxl.float32, "t")
        loss_d2h = popxl.d2h_stream((), popxl.float32, "loss")
        with popxl.ipu(0):
            f0, fwd0 = Hidden().create_graph(x_h2d.spec)
            a0, bwd0 = addons.autodiff_with_accumulation(fwd0, fwd0.args.tensors, grads_required=[])
            v0, acc0 = f0.init("s0"), a0.init("s0")
        with popxl.ipu(1):
            f1, fwd1 = Loss().create_graph(popxl.TensorSpec((2, 4), popxl.float32), t_h2d.spec)
            a1, bwd1 = addons.autodiff_with_accumulation(
                fwd1, fwd1.args.tensors, grads_required=fwd1.graph.inputs[:1]
            )
            v1, acc1 = f1.init("s1"), a1.init("s1")
        with popxl.in_sequence(True), addons.pipelined_execution(STEPS) as p:
            with p.stage(0), popxl.ipu(0):
                call0 = fwd0.bind(v0).call_with_info(ops.host_load(x_h2d, "x"))
                h = call0.parent_output(0).copy_to_ipu(1)
            with p.stage(1), popxl.ipu(1):
                call1 = fwd1.bind(v1).call_with_info(h, ops.host_load(t_h2d, "t"))
                ops.host_store(loss_d2h, call1.parent_output(0))
                seed = popxl.constant(1.0)
                (dh,) = bwd1.bind(acc1).call(seed, args=bwd1.grad_graph_info.inputs_dict(call1))
                dh = dh.copy_to_ipu(0)
            with p.stage(2), popxl.ipu(0):
                acts = p.stash_and_restore_activations(call0, bwd0.grad_graph_info)
                bwd0.bind(acc0).call(dh, args=acts)
        with popxl.in_sequence(True):  # after the pipeline, which writes the accumulators
            for ipu, (v, acc) in enumerate(((v0, acc0), (v1, acc1))):
                with popxl.ipu(ipu):
                    ops.scaled_add_(v.w, acc.accum.w, b=-lr)
                    for a in acc.tensors:
                        ops.var_updates.accumulator_scale_(a, 0.0)
    _check_loop_structure(ir, stages=3)
    xs = RNG.standard_normal((runs, STEPS, 2, 3)).astype(np.float32)
    ts = RNG.standard_normal((runs, STEPS, 2, 2)).astype(np.float32)
    with popxl.Session(ir, "ipu_model") as s:
        losses = [s.run({x_h2d: x, t_h2d: t})[loss_d2h] for x, t in zip(xs, ts)]
        got = s.get_tensors_data([v0.w, v1.w])
    ref_losses, w0, w1 = _numpy_training(xs, ts, lr)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got[v0.w], w0, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got[v1.w], w1, rtol=1e-4, atol=1e-6)
