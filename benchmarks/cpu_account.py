"""Exact CPU accounting of a command and every process it starts, from the kernel's scheduler.

``python benchmarks/cpu_account.py [--repeat N] -- command [args]`` runs the command under a
system-wide ``perf`` trace of the scheduler's context switches, forks, execs and exits
(``perf record -a -e sched:...``; Linux, root or ``perf_event_paranoid`` <= -1), and prints
for each run:

* the command's wall time and how the host's cores spent it: on the command's processes, on
  other processes (a shared machine's load) and idle;
* each process of the command's tree (threads counted in their process), in start order: the
  programs it ran (``mpirun>ompirun_wrapper>prterun``), its CPU time and when it lived.

Each switch is timed by the kernel, so the CPU figures are exact rather than sampled, and a
benchmark on a loaded machine can tell its own CPU from its neighbours'. Used for the
start-up figures of ``tremula/popdist/OVERVIEW.md`` (``bench_distributed.py --only
start-up`` measures the ratio; this says where the job's CPU goes, process by process).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

EVENTS = ("sched_switch", "sched_process_exec", "sched_process_exit", "sched_process_fork")
_LINE = re.compile(r"^\s*(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s*(.*)$")
_FIELD = re.compile(r"(\w+)=(\S+)")


@dataclass
class Process:
    """One process of the command's tree: the programs it exec'd and its CPU seconds."""

    pid: int
    programs: list[str] = field(default_factory=list)
    cpu: float = 0.0
    first: float = 0.0
    last: float = 0.0


@dataclass
class Account:
    """One run: wall seconds, the cores' seconds by use, and the command's processes."""

    wall: float
    cores: int
    command: float
    other: float
    idle: float
    processes: list[Process]


def trace(cmd: list[str], folder: Path) -> str:
    """``perf script`` text of a system-wide scheduler trace of one run of ``cmd``."""
    data = folder / "sched.data"
    record = ["perf", "record", "-q", "-a", "-o", str(data)]
    for name in EVENTS:
        record += ["-e", f"sched:{name}"]
    subprocess.run([*record, "--", *cmd], check=True, stdout=subprocess.DEVNULL)
    fields = "pid,tid,cpu,time,event,trace"
    return subprocess.run(
        ["perf", "script", "-i", str(data), "-F", fields],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def account(text: str, cores: int) -> Account:
    """The :class:`Account` of one trace: the command is the first process that perf
    exec'd; its tree follows forks (threads join their process's count)."""
    procs: dict[int, Process] = {}
    members: dict[int, int] = {}  # thread id -> process id, for the command's tree
    on_cpu: dict[int, tuple[int, float]] = {}  # cpu -> (thread running, since)
    other = idle = 0.0
    start = end = None
    perf_children: set[int] = set()  # threads seen as "perf-exec": perf's child, before exec
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        pid, tid, cpu, t = int(m[1]), int(m[2]), int(m[3]), float(m[4])
        event, f = m[5], dict(_FIELD.findall(m[6]))
        if event == "sched_switch":
            for side in ("prev", "next"):
                if f.get(f"{side}_comm") == "perf-exec":
                    perf_children.add(int(f[f"{side}_pid"]))
        if event == "sched_process_exec" and start is None and tid in perf_children:
            start, members[pid] = t, pid  # perf's child exec'ing the command
        if event == "sched_process_fork" and int(f["pid"]) in members:
            child = int(f["child_pid"])
            members[child] = child  # a thread: its own events name its process
            procs.setdefault(child, Process(child, first=t))  # alive from its fork
        if tid in members:
            members[tid] = pid  # a thread's events carry its process id
            p = procs.setdefault(pid, Process(pid, first=t))
            p.last = t
            if event == "sched_process_exec":
                p.programs.append(f["filename"].rsplit("/", 1)[-1])
            if event == "sched_process_exit" and tid == next(iter(members)):
                end = t
        if event != "sched_switch" or start is None or end is not None:
            if event == "sched_switch":
                on_cpu[cpu] = (int(f["next_pid"]), t)
            continue
        who, since = on_cpu.get(cpu, (-1, start))
        dt = t - max(since, start)
        if who in members:
            owner = members[who]
            procs.setdefault(owner, Process(owner, first=since)).cpu += dt
        elif who == 0:
            idle += dt
        elif who > 0:
            other += dt
        on_cpu[cpu] = (int(f["next_pid"]), t)
        if who == next(iter(members)) and f["prev_state"][:1] in ("Z", "X"):
            end = t  # the command's last switch-out, dead (its exit event may be lost)
    if start is None or end is None:
        raise SystemExit("the trace holds no start or no end of the command")
    tree = sorted((p for p in procs.values() if p.cpu > 0), key=lambda p: p.first)
    for p in tree:
        p.first, p.last = p.first - start, p.last - start
    mine = sum(p.cpu for p in tree)
    return Account(end - start, cores, mine, other, idle, tree)


def show(acc: Account) -> str:
    unseen = acc.cores * acc.wall - acc.command - acc.other - acc.idle
    out = [
        f"wall {acc.wall * 1e3:.0f} ms; {acc.cores} cores x wall = "
        f"{acc.cores * acc.wall * 1e3:.0f} ms: the command {acc.command * 1e3:.0f}, "
        f"other processes {acc.other * 1e3:.0f}, idle {acc.idle * 1e3:.0f} "
        f"(not seen: {unseen * 1e3:.0f})"
    ]
    for p in acc.processes:
        name = ">".join(p.programs) or "(forked)"
        out.append(
            f"  {p.pid:>8} {name[:44]:44} CPU {p.cpu * 1e3:6.1f} ms, "
            f"alive {p.first * 1e3:5.0f} to {p.last * 1e3:5.0f} ms"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        parser.error("no command")
    if shutil.which("perf") is None:
        raise SystemExit("needs Linux perf (apt-get install linux-perf)")
    cores = len(os.sched_getaffinity(0))
    totals: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            acc = account(trace(cmd, Path(tmp)), cores)
            print(show(acc), flush=True)
            totals["command"] += acc.command
    if args.repeat > 1:
        print(f"mean CPU of the command: {totals['command'] / args.repeat * 1e3:.0f} ms")


if __name__ == "__main__":
    sys.exit(main())
