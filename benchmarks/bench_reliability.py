"""Reliability benchmarks (issue 15).

1. Refusing a program too big for the device: ``ops.init((65536, 65536))`` (16 GiB) and
   ``ops.init((16384, 16384))`` (1 GiB) on the Mk2 IPU Model (897 MiB), each in a fresh
   interpreter: the time from building the Ir to the refusal and the peak RSS, against the
   same interpreter building the Ir only (the RSS of Python + NumPy + Tremula) and against
   compiling a program that fits (a 16 MiB tensor). Goal: refused in under 1 s with under
   200 MB RSS.
2. autoReport in a loop: the time per run over ``--runs`` runs of the demo program on 64
   tiles with ``autoReport.all``, against the same runs without autoReport, and against
   what Tremula did before (every run recorded and the whole report rewritten after each
   run in place, reproduced here with ``executionProfileProgramRunCount`` = runs and the
   old writer after each run).

Run: ``python benchmarks/bench_reliability.py [--runs 1000]``. Figures measured in the same
run, the reference of each printed next to it; [2] gives wall-clock and this process's CPU
time (steadier on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
import popxl
from popxl import ops
imported = time.perf_counter()
side, session = int(sys.argv[1]), sys.argv[2] == "session"
ir = popxl.Ir()
with ir.main_graph:
    x = ops.init((side, side), popxl.float32, "big")
    ops.host_store(popxl.d2h_stream(x.shape, x.dtype, "out"), x)
outcome = "built"
if session:
    try:
        popxl.Session(ir, "ipu_model")
        outcome = "compiled"
    except MemoryError as exc:
        outcome = type(exc).__name__ + ": " + str(exc)[:160]
done = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": done - imported, "import": imported - t0, "rss": rss,
                  "outcome": outcome}))
"""


def _child(side: int, session: bool) -> dict:
    """Build (and compile) an Ir with one ``side x side`` float32 tensor in a fresh
    interpreter; its time after the imports, peak RSS and outcome."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(side), "session" if session else "ir"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
        timeout=600,
    )
    if done.returncode:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout)


def bench_refusal() -> None:
    base = _child(16, session=False)
    fits = _child(2048, session=True)
    mb = 1e6
    print("[1] a tensor too big for the Mk2 IPU Model (897 MiB), in a fresh interpreter")
    print(
        f"    reference: interpreter with the Ir built, no Session: {base['rss'] / mb:.0f} MB "
        f"RSS; a fitting 16 MiB tensor compiled in {fits['seconds']:.2f} s, "
        f"{fits['rss'] / mb:.0f} MB RSS ({fits['outcome']})"
    )
    for side in (65536, 16384):
        r = _child(side, session=True)
        gib = side * side * 4 / 2**30
        print(
            f"    ops.init(({side}, {side})) ({gib:.0f} GiB): refused in {r['seconds']:.3f} s "
            f"(goal < 1 s), {r['rss'] / mb:.0f} MB RSS (goal < 200 MB; "
            f"{r['rss'] / base['rss']:.2f}x the interpreter, "
            f"{r['seconds'] / fits['seconds']:.3f}x the fitting compile)"
        )
        print(f"      {r['outcome'][:150]}...")


def _demo_engine(options: dict[str, str] | None):
    from tremula import demo

    return demo.build_and_run(64, elements_per_worker=8, options=options).engine


def _old_write_report(engine, directory: Path) -> None:
    """What autoReport did after every run before: both profiles serialised and written in
    place (the old ``write_profile``: no temporary file, no fsync)."""
    from tremula.profile.io import dumps

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "graph.json").write_text(dumps(engine.get_graph_profile()))
    (directory / "execution.json").write_text(dumps(engine.get_execution_profile()))


def _timed_runs(engine, runs: int, after_each=None) -> np.ndarray:
    """``[run, (wall seconds, CPU seconds of this process)]`` of ``runs`` runs, each
    followed by ``after_each``."""
    times = np.zeros((runs, 2))
    for i in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        engine.run(0)
        if after_each is not None:
            after_each()
        times[i] = time.perf_counter() - wall, time.process_time() - cpu
    return times


def _clocked(fn) -> np.ndarray:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return np.array([time.perf_counter() - wall, time.process_time() - cpu])


def bench_auto_report(runs: int, rounds: int = 3) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plain, new, close = [], [], []
        for r in range(rounds):  # alternating, fresh engines (compiling is not timed)
            plain.append(_timed_runs(_demo_engine(None), runs).sum(axis=0))
            auto = _demo_engine({"autoReport.all": "true", "autoReport.directory": f"{tmp}/{r}"})
            new.append(_timed_runs(auto, runs).sum(axis=0))
            close.append(_clocked(auto.close))
        old_engine = _demo_engine({"autoReport.executionProfileProgramRunCount": str(runs + 1)})
        old_dir = Path(tmp) / "old"
        old = _timed_runs(old_engine, runs, lambda: _old_write_report(old_engine, old_dir))
        sizes = [(Path(tmp) / d / "execution.json").stat().st_size for d in ("0", "old")]
    base, now = np.min(plain, axis=0) / runs, np.min(new, axis=0) / runs
    at_close = np.min(close, axis=0)
    tenth = max(1, runs // 10)

    def ms(pair: np.ndarray) -> str:
        return f"{pair[0] * 1e3:.3f} ms wall / {pair[1] * 1e3:.3f} ms CPU"

    print(f"[2] autoReport over {runs} runs of the demo program on 64 tiles (best of {rounds})")
    print(f"    reference: a run without autoReport {ms(base)}")
    print(
        f"    now: a run with autoReport {ms(now)} (nothing written during the loop); the one "
        f"write, at close, {ms(at_close)} = {ms(at_close / runs)} per run "
        f"(execution.json {sizes[0] / 1e3:.0f} kB: the first 2 runs)"
    )
    first, last = old[:tenth].mean(axis=0) - base, old[-tenth:].mean(axis=0) - base
    print(
        f"    before (every run recorded, both files rewritten after each run): "
        f"{ms(old.mean(axis=0) - base)} of writing per run; first {tenth} runs {ms(first)}, "
        f"last {tenth} {ms(last)}; execution.json {sizes[1] / 1e6:.1f} MB at the end"
    )
    whole = old.sum(axis=0) / (np.min(new, axis=0) + at_close)
    print(f"    whole loop, before / now: {whole[0]:.0f}x wall, {whole[1]:.0f}x CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    bench_refusal()
    bench_auto_report(args.runs)


if __name__ == "__main__":
    main()
