"""PopRun / PopDist benchmark: three ratios, each against a reference measured in the same run.

1. All-reduce of 64 MiB float32 over 4 instances (one replica each): PopXL's in-place
   ``replicated_all_reduce_`` of a variable across the instances (gcl's ring: vertices on
   the IPU Model, cross-instance copies over MPI), timed inside the instances
   (``Session.run``, best of several), against raw ``mpi4py`` ``Allreduce`` of the same
   data in the same instances; the first run's result is checked against MPI's. The CPU
   time per instance is printed too (steadier than wall time on a shared machine).
2. Data-parallel training of the digits MLP (``examples/distributed/data_parallel.py``),
   2 instances x 2 replicas: steps per second next to the same 4 replicas in one process.
3. Start-up of a 4-instance job (``tremula poprun`` of a program that imports PopXL and
   initialises PopDist) against ``mpirun -n 4 python -c pass`` plus one single-process
   start of the same program; ``--breakdown`` also runs the job's pieces in the same rounds
   and prints where its CPU goes (``benchmarks/cpu_account.py`` does so exactly, process by
   process, from a scheduler trace).

Run: ``python benchmarks/bench_distributed.py [--elements N] [--steps K] [--repeat R]
[--only start-up all-reduce training] [--breakdown]``.
It launches its own jobs through ``tremula poprun`` (the ``distributed`` extra).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

ALLREDUCE = r"""
import json, sys, time
import numpy as np
import popdist, popxl
from popxl import ops
from mpi4py import MPI

n, repeat = int(sys.argv[1]), int(sys.argv[2])
ir = popxl.Ir(replication="popdist")
R, me = ir.replication_factor, popdist.getInstanceIndex()
rows = np.random.default_rng(0).standard_normal((R, n), dtype=np.float32)  # global host data
with ir.main_graph:  # one value per replica, all-reduced in place on the device
    v = popxl.variable(rows, name="v", replica_grouping=ir.replica_grouping(group_size=1))
    ops.collectives.replicated_all_reduce_(v)
comm = MPI.COMM_WORLD
session = popxl.Session(ir, "ipu_model")

def timed(fn):
    # (best wall time over the job, best CPU time of this instance)
    best, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        comm.Barrier()
        t, c = time.perf_counter(), time.process_time()
        fn()
        c = time.process_time() - c
        comm.Barrier()
        best, cpu = min(best, time.perf_counter() - t), min(cpu, c)
    return best, cpu

ref = np.empty(n, np.float32)
raw, raw_cpu = timed(lambda: comm.Allreduce(rows[me], ref, MPI.SUM))
with session:
    session.run()
    got = session.get_tensor_data(v)[me]
    tremula, tremula_cpu = timed(session.run)
err = float(np.max(np.abs(got - ref)))
cpu = comm.gather((tremula_cpu, raw_cpu))
if me == 0:
    tc, mc = max(c[0] for c in cpu), max(c[1] for c in cpu)
    out = {"tremula": tremula, "mpi": raw, "err": err, "tremula_cpu": tc, "mpi_cpu": mc}
    print("RESULT " + json.dumps(out), flush=True)
"""

# the start-up program; it prints its CPU time (ms) when it starts (Python, the site's .pth
# files, the runner), after NumPy, after PopXL and PopDist, and after MPI's initialisation
START = (
    "import time\n"
    "cpu = [time.process_time()]\n"
    "import numpy\n"
    "cpu.append(time.process_time())\n"
    "import popdist, popxl\n"
    "cpu.append(time.process_time())\n"
    "popdist.init()\n"
    "cpu.append(time.process_time())\n"
    "print('up, CPU ms: ' + ' '.join(f'{c * 1e3:.1f}' for c in cpu), flush=True)\n"
)
PHASES = ("Python's start", "NumPy", "PopXL + PopDist", "MPI's initialisation")


def _env() -> dict[str, str]:
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [environ.get("PYTHONPATH")])])
    environ.pop("PYTHONDONTWRITEBYTECODE", None)
    return environ


def _poprun(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tremula.cli", "poprun", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return proc


def _result(text: str) -> dict:
    line = next(ln for ln in text.splitlines() if "RESULT " in ln)
    return json.loads(line.split("RESULT ", 1)[1])


def all_reduce(elements: int, repeat: int, folder: Path) -> None:
    prog = folder / "allreduce.py"
    prog.write_text(ALLREDUCE)
    res = _result(
        _poprun("--num-instances", "4", "python", str(prog), str(elements), str(repeat)).stdout
    )
    mib = elements * 4 / 2**20
    print(
        f"all-reduce {mib:.0f} MiB float32, 4 instances x 1 replica: "
        f"Tremula {res['tremula']:.3f} s, "
        f"mpi4py Allreduce {res['mpi']:.3f} s, ratio {res['tremula'] / res['mpi']:.2f}x "
        f"(max |difference| {res['err']:.1e}); CPU per instance (the busiest, best run): "
        f"Tremula {res['tremula_cpu'] * 1e3:.0f} ms, mpi4py {res['mpi_cpu'] * 1e3:.0f} ms, "
        f"ratio {res['tremula_cpu'] / res['mpi_cpu']:.2f}x"
    )


def training(steps: int, batch: int) -> None:
    code = (
        "import sys, time, json\n"
        f"sys.path.insert(0, {str(ROOT / 'examples' / 'distributed')!r})\n"
        "import popdist, data_parallel as dp\n"
        "from tremula.digits import load_digits\n"
        "steps, batch = int(sys.argv[1]), int(sys.argv[2])\n"
        "rep = 'popdist' if popdist.isPopdistEnvSet() else dp.REPLICAS\n"
        "x, y, _, _ = load_digits()\n"
        "s, xs, ys, _ = dp.build(rep, batch, 0.05, 'ipu_model')\n"
        "first, count = s.ir._replica_offset, s.ir.instance_replication_factor\n"
        "def feed(k):\n"
        "    return {xs: dp.shard(x, k, batch, first, count),\n"
        "            ys: dp.shard(y, k, batch, first, count)}\n"
        "with s:\n"
        "    s.run(feed(0))\n"
        "    t = time.perf_counter()\n"
        "    for k in range(1, steps + 1):\n"
        "        s.run(feed(k))\n"
        "    dt = time.perf_counter() - t\n"
        "if popdist.getInstanceIndex() == 0:\n"
        "    print('RESULT ' + json.dumps({'rate': steps / dt}), flush=True)\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        prog = Path(tmp) / "train.py"
        prog.write_text(code)
        one = subprocess.run(
            [sys.executable, str(prog), str(steps), str(batch)],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=ROOT,
            check=True,
        )
        single = _result(one.stdout)["rate"]
        multi = _result(
            _poprun(
                "--num-instances",
                "2",
                "--num-replicas",
                "4",
                "python",
                str(prog),
                str(steps),
                str(batch),
            ).stdout
        )["rate"]
    print(
        f"data-parallel MLP (4 replicas x batch {batch}), 2 instances x 2 replicas: "
        f"{multi:.2f} steps/s; 4 replicas in one process: {single:.2f} steps/s; ratio "
        f"{multi / single:.2f}x"
    )


def _seconds(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the command and all its processes, its output)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env or _env(), cwd=ROOT, check=True
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, proc.stdout


Run = tuple[list[str], "dict[str, str] | None"]


def _interleaved(cmds: list[Run], repeat: int) -> list[list[tuple[float, float, str]]]:
    """``repeat`` rounds, each running every (command, environment) once in turn (a slow
    spell of the shared machine then hits all of them alike): ``runs[i][r]`` is command
    ``i``'s (wall, CPU, output) in round ``r``."""
    runs: list[list[tuple[float, float, str]]] = [[] for _ in cmds]
    for _ in range(repeat):
        for i, (cmd, env) in enumerate(cmds):
            runs[i].append(_seconds(cmd, env))
    return runs


def _phases(outputs: list[str]) -> list[float]:
    """Median CPU ms of each of START's phases over the instances of all ``outputs``."""
    marks = [
        [float(x) for x in line.split("CPU ms: ", 1)[1].split()]
        for text in outputs
        for line in text.splitlines()
        if "CPU ms: " in line
    ]
    steps = [[m[0]] + [b - a for a, b in itertools.pairwise(m)] for m in marks]
    return [sorted(col)[len(col) // 2] for col in zip(*steps)]


def start_up(repeat: int, folder: Path, breakdown: bool) -> None:
    from tremula.popdist import poprun as pr

    prog = folder / "start.py"
    prog.write_text(START)
    _seconds([sys.executable, str(prog)])  # bytecode compiled once, for every run below
    mpirun = [pr.find_mpirun(), "--allow-run-as-root", "--map-by", "slot:OVERSUBSCRIBE", "-n", "4"]
    # the job runs the references' interpreter (a PATH shim such as pyenv's would add its
    # own start to every instance)
    poprun = [sys.executable, "-m", "tremula.cli", "poprun", "--num-instances", "4"]
    cmds: list[Run] = [
        ([*poprun, sys.executable, str(prog)], None),
        ([*mpirun, sys.executable, "-c", "pass"], None),
        ([sys.executable, str(prog)], None),
    ]
    if breakdown:
        cmds += _pieces(pr, mpirun, prog)
    runs = _interleaved(cmds, repeat)
    best = [min(w for w, _, _ in r) for r in runs]
    cpu = [min(c for _, c, _ in r) for r in runs]
    (job, bare, one), (job_cpu, bare_cpu, one_cpu) = best[:3], cpu[:3]
    per_round = sorted(j[0] / (b[0] + o[0]) for j, b, o in zip(*runs[:3]))
    print(
        f"start-up of 4 instances: tremula poprun {job:.2f} s; mpirun -n 4 python -c pass "
        f"{bare:.2f} s + one Tremula start {one:.2f} s = {bare + one:.2f} s; ratio of the "
        f"bests {job / (bare + one):.2f}x, median of {repeat} interleaved rounds "
        f"{per_round[len(per_round) // 2]:.2f}x; CPU time (all processes, best run): job "
        f"{job_cpu:.2f} s, references {bare_cpu:.2f} s + {one_cpu:.2f} s "
        f"(on {os.cpu_count()} cores)"
    )
    if breakdown:
        _print_breakdown(runs)


def _pieces(pr: Any, mpirun: list[str], prog: Path) -> list[Run]:
    """The job taken apart, for ``--breakdown``: the mpirun command poprun runs, run
    directly in poprun's environment; the same with every instance running ``python -c
    pass``; ``mpirun -n 4 true``; one instance's program alone in an instance's environment
    (``OMP_NUM_THREADS``, Open MPI's components) under mpi4py's runner."""
    args = pr.parser().parse_args(["--num-instances", "4", sys.executable, str(prog)])
    args.num_replicas = 4
    direct = pr.mpirun_command(args, pr.find_mpirun())
    args.program = [sys.executable, "-c", "pass"]
    empty = pr.mpirun_command(args, pr.find_mpirun())
    environ = pr.environment(_env(), 4)
    alone = [sys.executable, "-m", "mpi4py", str(prog)]
    return [(direct, environ), (empty, environ), ([*mpirun, "true"], None), (alone, environ)]


def _print_breakdown(runs: list[list[tuple[float, float, str]]]) -> None:
    """Each piece's CPU as the median over the rounds of a difference within the round
    (steadier on a shared machine than a difference of bests)."""

    def median(values: Any) -> float:
        ordered = sorted(values)
        return ordered[len(ordered) // 2] * 1e3

    job, bare, one, direct, empty, true, alone = ([c for _, c, _ in r] for r in runs)
    rounds = range(len(job))
    python = median((bare[r] - true[r]) / 4 for r in rounds)
    in_job = _phases([out for _, _, out in runs[0]])
    by_itself = _phases([out for _, _, out in runs[6]])
    print(
        "CPU breakdown (ms, median over the rounds of differences within a round):\n"
        f"  launcher (python -m tremula.cli poprun): "
        f"{median(job[r] - direct[r] for r in rounds):.0f}\n"
        f"  mpirun -n 4 true: {median(true):.0f}; with poprun's 4 contexts, tags and -x, each "
        f"instance running python -c pass: {median(empty):.0f} (a Python start {python:.0f})\n"
        f"  each instance's program beyond python -c pass: "
        f"{median((direct[r] - empty[r]) / 4 for r in rounds):.0f}; the same program alone in "
        f"an instance's environment: {median(alone):.0f} (the reference's single start, "
        f"without OMP_NUM_THREADS: {median(one):.0f})\n"
        "  START's phases (median ms of CPU, in the job / alone): "
        + "; ".join(f"{name} {a:.0f} / {b:.0f}" for name, a, b in zip(PHASES, in_job, by_itself))
    )


PARTS = ("start-up", "all-reduce", "training")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=16 * 2**20, help="all-reduce size")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps")
    parser.add_argument("--batch", type=int, default=8, help="rows per replica and step")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--only", nargs="+", choices=PARTS, default=list(PARTS), help="the parts to run"
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="start-up: also run the job's pieces and print where its CPU time goes",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "start-up" in args.only:
            start_up(args.repeat, folder, args.breakdown)
        if "all-reduce" in args.only:
            all_reduce(args.elements, args.repeat, folder)
    if "training" in args.only:
        training(args.steps, args.batch)


if __name__ == "__main__":
    main()
