"""PopART benchmarks (issue: PopART on Tremula), each against the equivalent PopXL program
measured in the same run on the same IPU Model:

1. building and preparing a training session of a 10-layer MLP (Builder -> ONNX ->
   ``TrainingSession`` -> ``prepareDevice``) against building the same PopXL program and its
   ``popxl.Session`` (target: at most 1.2x);
2. a training step (``session.run``) against the PopXL step (target: at most 1.1x);
3. importing an ONNX model of 1M parameters (``InferenceSession`` construction: parse the
   file, read the initialisers, build the PopXL IR; target: under 1 s).

Run: ``python benchmarks/bench_popart.py [--width 64] [--steps 20] [--rounds 5]``. BLAS runs
on one thread for both sides unless ``OPENBLAS_NUM_THREADS`` is set.
"""

from __future__ import annotations

import argparse
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import time  # noqa: E402

import numpy as np  # noqa: E402

import popart  # noqa: E402
import popxl  # noqa: E402
import popxl.ops as ops  # noqa: E402

LAYERS, BATCH, CLASSES, LR = 10, 32, 10, 0.01


def weights(width: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(LAYERS):
        n_out = CLASSES if i == LAYERS - 1 else width
        out.append((rng.standard_normal((width, n_out)) * np.sqrt(2 / width)).astype(np.float32))
        out.append(np.zeros(n_out, np.float32))
    return out


def device() -> popart.DeviceInfo:
    return popart.DeviceManager().createIpuModelDevice({"numIPUs": 1})


# ---- PopART ----
def popart_model(width: int) -> tuple[bytes, str, str, str]:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [BATCH, width]), "x")
    labels = b.addInputTensor(popart.TensorInfo("INT32", [BATCH]), "labels")
    h = x
    params = weights(width)
    for i in range(LAYERS):
        w = b.addInitializedInputTensor(params[2 * i], f"W{i}")
        bias = b.addInitializedInputTensor(params[2 * i + 1], f"b{i}")
        h = b.aiOnnx.add([b.aiOnnx.matmul([h, w]), bias])
        if i < LAYERS - 1:
            h = b.aiOnnx.relu([h])
    probs = b.aiOnnx.softmax([h], 1)
    loss = b.aiGraphcore.nllloss([probs, labels], popart.ReductionType.Mean)
    return b.getModelProto(), x, labels, loss


def popart_session(width: int) -> tuple[popart.TrainingSession, str, str, str]:
    model, x, labels, loss = popart_model(width)
    s = popart.TrainingSession(model, popart.DataFlow(1, [loss]), loss, popart.ConstSGD(LR),
                               device())  # fmt: skip
    s.prepareDevice()
    return s, x, labels, loss


# ---- the same program in PopXL ----
class MLP(popxl.Module):
    def __init__(self, width: int) -> None:
        self.width = width
        self.params: list[popxl.Tensor] = []

    def build(self, x: popxl.Tensor, labels: popxl.Tensor) -> tuple[popxl.Tensor]:
        h = x
        for i in range(LAYERS):
            n_out = CLASSES if i == LAYERS - 1 else self.width
            w = popxl.graph_input((self.width, n_out), popxl.float32, f"W{i}")
            b = popxl.graph_input((n_out,), popxl.float32, f"b{i}")
            self.params += [w, b]
            h = ops.add(ops.matmul(h, w), b)
            if i < LAYERS - 1:
                h = ops.relu(h)
        return (ops.nll_loss(ops.softmax(h, 1), labels),)


def popxl_session(width: int) -> tuple[popxl.Session, object, object, object]:
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((BATCH, width), popxl.float32, "x")
        ys = popxl.h2d_stream((BATCH,), popxl.int32, "labels")
        variables = [popxl.variable(p, name=f"p{i}") for i, p in enumerate(weights(width))]
        mlp = MLP(width)
        fwd = ir.create_graph(mlp, xs.spec, ys.spec)
        bwd = popxl.transforms.autodiff(fwd, grads_provided=fwd.outputs, grads_required=mlp.params)
        info = ops.call_with_info(fwd, ops.host_load(xs), ops.host_load(ys),
                                  inputs_dict=dict(zip(mlp.params, variables)))  # fmt: skip
        loss = info.parent_output(0)
        one = popxl.constant(np.ones((), np.float32))
        grads = ops.call(bwd.graph, one, inputs_dict=bwd.inputs_dict(info))
        for v, g in zip(variables, grads):
            ops.var_updates.accumulate_(v, g, -LR)
        out = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(out, loss)
    return popxl.Session(ir, device()), xs, ys, out


def best_of(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_prepare(width: int, rounds: int) -> None:
    popart_session(width)  # warm both paths (imports, codelet tables)
    popxl_session(width)
    ours, ref = [], []
    for _ in range(rounds):  # alternate, so both see the same load
        ours.append(best_of(lambda: popart_session(width), 1))
        ref.append(best_of(lambda: popxl_session(width), 1))
    print(
        f"build + prepare, {LAYERS}-layer MLP (width {width}): PopART {min(ours) * 1e3:.0f} ms, "
        f"PopXL {min(ref) * 1e3:.0f} ms, ratio {min(ours) / min(ref):.2f} (target <= 1.2)"
    )


def bench_step(width: int, steps: int, rounds: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((BATCH, width)).astype(np.float32)
    y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    s, xi, li, loss = popart_session(width)
    s.weightsFromHost()
    anchors = s.initAnchorArrays()
    stepio = popart.PyStepIO({xi: x, li: y}, anchors)
    ps, xs, ys, out = popxl_session(width)
    ours, ref = [], []

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    def ours_step() -> float:
        return timed(lambda: s.run(stepio))

    def ref_step() -> float:
        return timed(lambda: ps.run({xs: x, ys: y}))

    with ps:
        for _ in range(2):
            s.run(stepio)
            ps.run({xs: x, ys: y})
        pairs = []
        for _ in range(rounds):  # steps alternate (in both orders): both see the same load
            t_ours = t_ref = 0.0
            for i in range(steps):
                first, second = (ours_step, ref_step) if i % 2 else (ref_step, ours_step)
                a, b = first(), second()
                mine, theirs = (a, b) if i % 2 else (b, a)
                pairs.append(mine / theirs)
                t_ours, t_ref = t_ours + mine, t_ref + theirs
            ours.append(t_ours / steps)
            ref.append(t_ref / steps)
        s.engine.reset_execution_profile()
        ps.engine.reset_execution_profile()
        s.run(stepio)  # both have run the same steps: the same weights, the same loss
        same = np.allclose(anchors[loss], ps.run({xs: x, ys: y})[out], rtol=1e-5)
        cycles = [e.get_execution_profile()["simulation"]["cycles"] for e in (s.engine, ps.engine)]
    median = float(np.median(pairs))
    print(
        f"training step: PopART {min(ours) * 1e3:.2f} ms, PopXL {min(ref) * 1e3:.2f} ms, ratio "
        f"{min(ours) / min(ref):.2f} (median of per-step ratios {median:.2f}; target <= 1.1); "
        f"same losses: {same}; simulated cycles per step {cycles[0]} and {cycles[1]}"
    )


def bench_import(rounds: int) -> None:
    """A 1M-parameter MLP (4 layers of 500 x 500) written by the Builder, then imported."""
    b = popart.Builder()
    h = b.addInputTensor(popart.TensorInfo("FLOAT", [BATCH, 500]), "x")
    rng = np.random.default_rng(2)
    for i in range(4):
        w = b.addInitializedInputTensor(rng.standard_normal((500, 500)).astype(np.float32), f"W{i}")
        bias = b.addInitializedInputTensor(np.zeros(500, np.float32), f"b{i}")
        h = b.aiOnnx.relu([b.aiOnnx.add([b.aiOnnx.matmul([h, w]), bias])])
    loss = b.aiGraphcore.l1loss([h], 0.1)
    model = b.getModelProto()
    params = 4 * (500 * 500 + 500)

    def infer() -> None:
        popart.InferenceSession(model, popart.DataFlow(1, [h]), device())

    def train() -> None:
        sgd = popart.ConstSGD(0.1)
        popart.TrainingSession(model, popart.DataFlow(1, [loss]), loss, sgd, device())

    print(
        f"ONNX import, {params / 1e6:.2f}M parameters ({len(model) / 1e6:.1f} MB): inference "
        f"session {best_of(infer, rounds) * 1e3:.0f} ms, training session (autodiff, "
        f"optimizer) {best_of(train, rounds) * 1e3:.0f} ms (target < 1000 ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    bench_prepare(args.width, args.rounds)
    bench_step(args.width, args.steps, args.rounds)
    bench_import(args.rounds)


if __name__ == "__main__":
    main()
