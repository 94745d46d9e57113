"""PopXL benchmarks (issue: the PopXL frontend).

One SGD training step of the digits MLP (64-256-256-10, batch 32): forward, softmax + NLL,
backward (autodiff) and update, through ``session.run`` on the ``ipu_model`` (Mk2) and
``cpu`` devices, against the same step written directly in NumPy, in the same run (targets:
at most 3x on ipu_model, 1.5x on cpu); and Session creation (lowering + compile; target:
under 1 s, issue 17; it was 5 s), wall and CPU time, next to the start of a fresh
interpreter importing NumPy measured in the same run (how fast the host is right now); and
the CPU time of the first and the second session created in a fresh interpreter (the first
is what a user's script sees; issue 27's target: at most 0.5 s).

Run: ``python benchmarks/bench_popxl_mlp.py [--steps 200]`` (needs scikit-learn). BLAS runs
on one thread for both sides unless ``OPENBLAS_NUM_THREADS`` is set.
"""

from __future__ import annotations

import argparse
import os

# One BLAS thread for both sides (set before NumPy loads): the step's matrices are small,
# and on a shared host BLAS threads spinning against other work swamp both timings
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import tremula  # noqa: E402
from tremula.digits import build_training, init_params, load_digits  # noqa: E402


def numpy_step(params: list[np.ndarray], x: np.ndarray, y: np.ndarray, lr: float) -> float:
    """The same SGD step in NumPy (float32): returns the loss."""
    w0, b0, w1, b1, w2, b2 = params
    h0 = x @ w0 + b0
    a0 = np.maximum(h0, 0)
    h1 = a0 @ w1 + b1
    a1 = np.maximum(h1, 0)
    logits = a1 @ w2 + b2
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    probs = e / e.sum(axis=1, keepdims=True)
    n = len(y)
    loss = float(-np.log(probs[np.arange(n), y]).mean())
    d = probs
    d[np.arange(n), y] -= 1
    d /= n
    g_w2, g_b2 = a1.T @ d, d.sum(0)
    d1 = (d @ w2.T) * (h1 > 0)
    g_w1, g_b1 = a0.T @ d1, d1.sum(0)
    d0 = (d1 @ w1.T) * (h0 > 0)
    g_w0, g_b0 = x.T @ d0, d0.sum(0)
    for p, g in zip(params, (g_w0, g_b0, g_w1, g_b1, g_w2, g_b2)):
        p -= lr * g
    return loss


def interpreter_start(repeat: int = 3) -> float:
    """Wall time of ``python -c "import numpy"`` in a new process (best of ``repeat``): a
    reference for the session creation time on this host under its present load."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import numpy"], check=True)
        times.append(time.perf_counter() - start)
    return min(times)


#: a fresh interpreter creating the README MLP's session twice: CPU seconds of the first
#: (what a user's script sees, lazy imports included) and of the second
FIRST_IN_PROCESS = """
import time
from tremula.digits import build_training
times = []
for _ in range(2):
    start = time.process_time()
    build_training(32, 0.05, {device!r})
    times.append(time.process_time() - start)
print(*times)
"""


def session_creation(device: str, repeat: int = 3) -> tuple[float, float]:
    """CPU seconds of the first and the second session created in a fresh interpreter
    (best of ``repeat`` interpreters): the first pays the lazy imports of the engine,
    lowering and libraries."""
    # the child runs where this process's tremula is: a ``-c`` child puts its working
    # directory first on ``sys.path``, so both measure the same checkout
    root = Path(tremula.__file__).resolve().parents[1]
    firsts, seconds = [], []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", FIRST_IN_PROCESS.format(device=device)],
            check=True,
            capture_output=True,
            text=True,
            cwd=root,
        ).stdout.split()
        firsts.append(float(out[0]))
        seconds.append(float(out[1]))
    return min(firsts), min(seconds)


def bench(device: str, steps: int, rounds: int, x: np.ndarray, y: np.ndarray) -> None:
    """Rounds alternate ``steps`` Tremula steps and ``steps`` NumPy steps, so both sides see
    the same load; the figure is the ratio of their best rounds (and the median of the
    per-round ratios)."""
    start, cpu = time.perf_counter(), time.process_time()
    trainer = build_training(32, 0.05, device)
    created, created_cpu = time.perf_counter() - start, time.process_time() - cpu
    batches = [(x[i * 32 : (i + 1) * 32], y[i * 32 : (i + 1) * 32]) for i in range(steps)]
    params = init_params()
    ours, ref = [], []
    with trainer.session as session:
        session.run({trainer.x: batches[0][0], trainer.labels: batches[0][1]})
        for _ in range(rounds):
            start = time.perf_counter()
            for bx, by in batches:
                session.run({trainer.x: bx, trainer.labels: by})
            ours.append((time.perf_counter() - start) / steps)
            start = time.perf_counter()
            for bx, by in batches:
                numpy_step(params, bx, by, 0.05)
            ref.append((time.perf_counter() - start) / steps)
    target = 3.0 if device == "ipu_model" else 1.5
    first, second = session_creation(device)
    median = float(np.median(np.array(ours) / np.array(ref)))
    print(
        f"{device}: session creation {created:.2f} s (CPU {created_cpu:.2f} s; target < 1 s; "
        f"a fresh interpreter importing NumPy, same run: {interpreter_start():.2f} s; "
        f"in a fresh interpreter, CPU s: first session {first:.2f}, second {second:.2f}, "
        f"target <= 0.5); "
        f"step {min(ours) * 1e3:.2f} "
        f"ms, NumPy {min(ref) * 1e3:.3f} ms (best of {rounds} rounds), ratio "
        f"{min(ours) / min(ref):.2f}x, median round {median:.2f}x (target <= {target}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--only-sessions",
        type=int,
        metavar="N",
        help="only the session creation in N fresh interpreters (ipu_model), CPU s",
    )
    args = parser.parse_args()
    if args.only_sessions:
        for _ in range(args.only_sessions):
            first, second = session_creation("ipu_model", repeat=1)
            print(f"ipu_model session creation, CPU s: first {first:.3f}, second {second:.3f}")
        return
    x, y, _, _ = load_digits()
    steps = min(args.steps, len(y) // 32)
    for device in ("ipu_model", "cpu"):
        bench(device, steps, args.rounds, x, y)


if __name__ == "__main__":
    main()
