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

3. A PopRun instance that ends early (issue 30): a 2-instance ``tremula poprun`` job of
   ``tests/popdist/programs/ending.py`` where instance 1 ends (normal exit, ``sys.exit(3)``,
   an exception, SIGKILL, ``os._exit(0)``) before its first PopDist call or after one, or
   (``tests/popdist/programs/startup``) before or during MPI's start-up, while instance 0
   waits for it: poprun's exit status, the seconds until the job ended (the default 300 s
   collective time-out, so an end that is seen takes seconds) and the first message naming
   the instance, against the same job when no instance ends early.
4. Signals and profiles, and refusals up front (issue 30): a PopXL run loop with autoReport
   ended by SIGTERM, SIGHUP and SIGINT (whether ``execution.json`` was written, and the
   process's exit), ``tremula demo --tiles`` one past its limit (the time to the refusal),
   and the message for a value a float stream cannot take.

Run: ``python benchmarks/bench_reliability.py [--runs 1000] [--only 1,2,3,4]``. Figures
measured in the same run, the reference of each printed next to it; [2] gives wall-clock and
this process's CPU time (steadier on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
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


PROGRAMS = ROOT / "tests" / "popdist" / "programs"
#: (how, when, TREMULA_TEST_END) of each ending: instance 1 ends so, instance 0 waits
ENDINGS = [
    ("none", "", ""),
    ("return", "first", ""),
    ("exit3", "first", ""),
    ("raise", "first", ""),
    ("kill", "first", ""),
    ("os._exit", "first", ""),
    ("return", "after", ""),
    ("raise", "after", ""),
    ("kill", "after", ""),
    ("os._exit", "after", ""),
    ("return", "never", "os._exit:start"),
    ("return", "never", "os._exit:mpi"),
    ("return", "never", "kill:mpi"),
]


def _ending_job(how: str, when: str, spec: str, limit: float = 120) -> tuple[int, float, str]:
    """One job; its exit status (None: still running after ``limit`` s, then killed), wall
    seconds and first line naming an instance's end."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    if spec:
        environ["TREMULA_TEST_END"] = spec
        environ["PYTHONPATH"] = os.pathsep.join([str(PROGRAMS / "startup"), str(ROOT)])
    cmd = [sys.executable, "-m", "tremula.cli", "poprun", "--num-instances", "2"]
    cmd += [str(PROGRAMS / "ending.py"), how, when or "never"]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ
    )
    try:
        out, _ = proc.communicate(timeout=limit)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        proc.terminate()  # poprun passes it on to mpirun, which stops the instances
        out, _ = proc.communicate()
        rc = None
    seconds = time.perf_counter() - start
    keys = ("PopDist: instance 0", "process rank", "exited on", "exiting")
    said = next((line for line in out.splitlines() if any(k in line for k in keys)), "")
    return rc, seconds, said.split(">:", 1)[-1].strip()[:110]


def bench_endings() -> None:
    print("[3] a 2-instance poprun job whose instance 1 ends early (default collective time-out)")
    for how, when, spec in ENDINGS:
        rc, seconds, said = _ending_job(how, when, spec)
        case = "none ends early (reference)" if how == "none" else f"{how} {spec or when}"
        status = "still running, killed" if rc is None else f"exit {rc}"
        print(f"    {case:<28} {status:<22} {seconds:6.1f} s  {said}")


_LOOP = """
import signal, sys, numpy as np, popxl
from popxl import ops
ir = popxl.Ir()
with ir.main_graph:
    x = popxl.variable(np.zeros(4, np.float32), name="x")
    ops.var_updates.accumulate_(x, popxl.constant(np.ones(4, np.float32)))
with popxl.Session(ir, "ipu_model") as session:
    session.run()
    print("looping", flush=True)
    while True:
        session.run()
"""


def bench_signals_and_refusals() -> None:
    import signal

    print("[4] a run loop with autoReport ended by a signal; refusals up front")
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        with tempfile.TemporaryDirectory() as tmp:
            options = {"autoReport.all": "true", "autoReport.directory": tmp}
            environ = {**os.environ, "PYTHONPATH": str(ROOT)}
            environ["POPLAR_ENGINE_OPTIONS"] = json.dumps(options)
            proc = subprocess.Popen(
                [sys.executable, "-c", _LOOP],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=environ,
            )
            assert proc.stdout is not None and proc.stdout.readline() == "looping\n"
            start = time.perf_counter()
            proc.send_signal(sig)
            rc = proc.wait(timeout=120)
            written = sorted(p.name for p in Path(tmp).iterdir())
        print(
            f"    {sig.name}: ended in {time.perf_counter() - start:.2f} s, status {rc}; "
            f"written: {', '.join(written)}"
        )
    from tremula import demo

    start = time.perf_counter()
    limit = demo.tile_limit()
    done = subprocess.run(
        [sys.executable, "-m", "tremula.cli", "demo", "--tiles", str(limit + 1)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    print(
        f"    tremula demo --tiles {limit + 1:,}: status {done.returncode} in "
        f"{time.perf_counter() - start:.1f} s: {done.stderr.strip().splitlines()[-1][:150]}"
    )
    from tremula import poplar
    from tremula.errors import StreamError
    from tremula.poplar.types import exact_cast

    try:
        exact_cast(np.array([0.1, 1e40]), poplar.FLOAT, "stream 'x'")
    except StreamError as exc:
        print(f"    float64 data for a float stream: {exc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--only", default="1,2,3,4", help="the sections to run, e.g. 3,4")
    args = parser.parse_args()
    only = {int(k) for k in args.only.split(",")}
    if 1 in only:
        bench_refusal()
    if 2 in only:
        bench_auto_report(args.runs)
    if 3 in only:
        bench_endings()
    if 4 in only:
        bench_signals_and_refusals()


if __name__ == "__main__":
    main()
