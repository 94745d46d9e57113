"""Tremula's host time against PyTorch eager on the same CPU (issue: simulation speed).

A user who moves a PopXL program onto Tremula compares it with what they would otherwise
run: the same model in PyTorch eager. Each case runs both sides interleaved, round by round,
in one process with one BLAS / intra-op thread for both, and prints the ratio of the best
rounds and the median of the per-round ratios:

- ``mlp``: one SGD training step of the digits MLP (64-256-256-10, batch 32: forward,
  softmax cross-entropy, backward, update) through ``session.run`` on ``ipu_model`` (Mk2)
  and ``cpu`` (targets: 0.8x and 0.6x);
- ``gru`` / ``lstm``: a recurrent layer over 100 time steps, forward and backward
  (``popxl.ops.rnn.gru`` through a PopXL session; popnn's ``lstm_fwd`` / ``lstm_bwd`` on the
  Poplar layer), batch 16, 64 inputs, 64 units, on ``ipu_model`` (target: 4x);
- ``char-gru``: one training iteration of ``examples/host_embedding/char_gru.py`` (batch
  16 x 2 replicas, 99 time steps, GRU 256 -> 32, dense 99*32 -> 256, momentum SGD) against
  ``nn.Embedding`` + ``nn.GRU`` + ``nn.Linear`` with the same batch (32 sequences) and
  optimiser (target: 4x).

The cells differ in detail (PyTorch's GRU resets after the recurrent product, PopLibs'
before it); the work per step is the same. Needs torch (``pip install torch``) and, for
``mlp``, scikit-learn.

Run: ``python benchmarks/bench_vs_torch.py [--only mlp,gru,lstm,char-gru] [--rounds 5]
[--clock wall|cpu]`` (``cpu``: both sides timed by this process's CPU time, for a machine
other work loads)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

T, B, I, H = 100, 16, 64, 64  # the recurrent layers' shape


#: the clock both sides are timed with (``--clock``): wall time, or this process's CPU time,
#: which other processes' load on a shared machine does not inflate (both sides run on
#: one thread, so their CPU time is their run time on an idle core)
CLOCK: Callable[[], float] = time.perf_counter


def interleaved(ours: Callable[[], None], theirs: Callable[[], None], reps: int, rounds: int):
    """Per-call seconds of both sides, best round each, and the median per-round ratio."""
    a, b = [], []
    for _ in range(2):  # warm both (Tremula's compiled runs are made on a run's second call)
        ours()
        theirs()
    for _ in range(rounds):
        start = CLOCK()
        for _ in range(reps):
            ours()
        a.append((CLOCK() - start) / reps)
        start = CLOCK()
        for _ in range(reps):
            theirs()
        b.append((CLOCK() - start) / reps)
    return min(a), min(b), float(np.median(np.array(a) / np.array(b)))


def report(name: str, ours: float, theirs: float, median: float, target: float) -> None:
    print(
        f"{name}: Tremula {ours * 1e3:.2f} ms, PyTorch eager {theirs * 1e3:.2f} ms, ratio "
        f"{ours / theirs:.2f}x (median round {median:.2f}x; target <= {target}x)",
        flush=True,
    )


# ---- the digits MLP ----
def mlp(rounds: int) -> None:
    import torch

    from tremula.digits import build_training, init_params, load_digits

    x, y, _, _ = load_digits()
    batches = [(x[i * 32 : (i + 1) * 32], y[i * 32 : (i + 1) * 32]) for i in range(20)]
    params = [torch.tensor(p, requires_grad=True) for p in init_params()]
    tb = [(torch.tensor(bx), torch.tensor(by.astype(np.int64))) for bx, by in batches]

    def torch_steps() -> None:
        for bx, by in tb:
            w0, b0, w1, b1, w2, b2 = params
            h = torch.relu(bx @ w0 + b0)
            h = torch.relu(h @ w1 + b1)
            loss = torch.nn.functional.cross_entropy(h @ w2 + b2, by)
            for p in params:
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p -= 0.05 * p.grad

    for device, target in (("ipu_model", 0.8), ("cpu", 0.6)):
        trainer = build_training(32, 0.05, device)
        with trainer.session as session:

            def steps(session=session, trainer=trainer) -> None:
                for bx, by in batches:
                    session.run({trainer.x: bx, trainer.labels: by})

            ours, theirs, median = interleaved(steps, torch_steps, 1, rounds)
        n = len(batches)
        report(f"mlp step ({device})", ours / n, theirs / n, median, target)


# ---- recurrent layers ----
def gru(rounds: int) -> None:
    import torch

    import popxl
    import popxl.ops as ops

    rng = np.random.default_rng(0)
    xs = rng.standard_normal((T, B, I)).astype(np.float32)
    ws = {
        "h0": np.zeros((B, H), np.float32),
        "wi": (rng.standard_normal((3, I, H)) * 0.1).astype(np.float32),
        "wo": (rng.standard_normal((3, H, H)) * 0.1).astype(np.float32),
        "b": np.zeros((3, H), np.float32),
    }
    ir = popxl.Ir()
    with ir.main_graph:
        x_in = popxl.h2d_stream((T, B, I), popxl.float32, "x")
        x = ops.host_load(x_in, "x")
        v = {k: popxl.variable(a, name=k) for k, a in ws.items()}

        def layer(x, h0, wi, wo, b):
            return ops.rnn.gru(x, h0, wi, wo, b)

        operands = (x, v["h0"], v["wi"], v["wo"], v["b"])
        specs = [popxl.TensorSpec(t.shape, t.dtype) for t in operands]
        fwd = ir.create_graph(layer, *specs)
        bwd = popxl.transforms.autodiff(fwd)
        site = ops.call_with_info(fwd, *operands)
        seed = popxl.constant(np.ones((T, B, H), np.float32), name="dy")
        grads = ops.call(bwd.graph, seed, inputs_dict=bwd.inputs_dict(site))
        outs = []
        for i, g in enumerate(grads):
            s = popxl.d2h_stream(g.shape, g.dtype, f"g{i}")
            ops.host_store(s, g)
            outs.append(s)
    session = popxl.Session(ir, "ipu_model")

    tg = torch.nn.GRU(I, H)
    tx = torch.tensor(xs, requires_grad=True)

    def torch_step() -> None:
        tg.zero_grad()
        y, _ = tg(tx)
        y.backward(torch.ones_like(y))

    with session:
        ours, theirs, median = interleaved(lambda: session.run({x_in: xs}), torch_step, 1, rounds)
    report("gru layer, 100 steps fwd+bwd (ipu_model)", ours, theirs, median, 4)


def lstm(rounds: int) -> None:
    import torch

    from tremula import poplar
    from tremula.libs.popnn import lstm as plstm

    device = poplar.IPUModel().create_device()
    graph = poplar.Graph(device.target)
    p = plstm.LstmParams(poplar.FLOAT, B, T, I, H)
    prog = poplar.Sequence()
    x = plstm.rnn.sequence_variable(graph, poplar.FLOAT, (T, B, I), "x")
    h0 = plstm.rnn.state_variable(graph, poplar.FLOAT, (B, H), "h0")
    c0 = plstm.rnn.state_variable(graph, poplar.FLOAT, (B, H), "c0")
    w = plstm.create_weights(graph, p, "w")
    state = plstm.LstmState(h0, c0)
    y, _, inter = plstm.lstm_fwd(graph, p, state, x, w, prog, "fwd")
    dy = plstm.rnn.sequence_variable(graph, poplar.FLOAT, (T, B, H), "dy")
    plstm.lstm_bwd(graph, p, prog, state, inter, w, x, y, dy, name="bwd")
    h2d = graph.add_host_to_device_fifo("x", poplar.FLOAT, T * B * I)
    prog = poplar.Sequence([poplar.Copy(h2d, x), prog])
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    xs = np.random.default_rng(0).standard_normal(T * B * I).astype(np.float32)
    engine.connect_stream("x", xs)

    tl = torch.nn.LSTM(I, H)
    tx = torch.tensor(xs.reshape(T, B, I), requires_grad=True)

    def torch_step() -> None:
        tl.zero_grad()
        out, _ = tl(tx)
        out.backward(torch.ones_like(out))

    ours, theirs, median = interleaved(lambda: engine.run(0), torch_step, 1, rounds)
    report("lstm layer, 100 steps fwd+bwd (ipu_model)", ours, theirs, median, 4)


# ---- the host-embedding char-GRU ----
def char_gru(rounds: int) -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "host_embedding"))
    import char_gru as cg

    cfg = cg.Config(iterations=1)
    trainer = cg.build(cfg)
    feed = cg.batches(cfg)
    text = next(feed).reshape(cfg.replicas, cfg.batch, cfg.sequence)

    n, t, h = cfg.batch * cfg.replicas, cfg.sequence - 1, cfg.hidden
    emb = torch.nn.Embedding(cg.TOKENS, cg.ENCODING)
    rnn = torch.nn.GRU(cg.ENCODING, h)
    dense = torch.nn.Linear(t * h, cg.TOKENS)
    params = [*rnn.parameters(), *dense.parameters()]
    opt = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum)
    emb_opt = torch.optim.SGD(emb.parameters(), lr=cfg.embedding_lr)
    tt = torch.tensor(text.reshape(n, cfg.sequence).astype(np.int64))

    def torch_step() -> None:
        opt.zero_grad()
        emb_opt.zero_grad()
        x = emb(tt[:, :t]).transpose(0, 1)
        y, _ = rnn(x)
        logits = dense(y.transpose(0, 1).reshape(n, t * h))
        loss = torch.nn.functional.cross_entropy(logits, tt[:, t])
        loss.backward()
        opt.step()
        emb_opt.step()

    session, e = trainer.session, trainer.emb
    with session, e.register(session):
        ours, theirs, median = interleaved(
            lambda: session.run({trainer.text: text}), torch_step, 1, rounds
        )
    report("char-gru training iteration (ipu_model, 2 replicas)", ours, theirs, median, 4)


CASES = {"mlp": mlp, "gru": gru, "lstm": lstm, "char-gru": char_gru}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time, or the process's CPU time (steadier on a loaded machine)",
    )
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    print(f"clock: {args.clock}", flush=True)
    import torch

    torch.set_num_threads(1)
    for name in args.only.split(","):
        CASES[name](args.rounds)


if __name__ == "__main__":
    main()
