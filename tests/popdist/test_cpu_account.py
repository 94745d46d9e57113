"""benchmarks/cpu_account.py: the CPU of a command's processes from a scheduler trace,
checked on a hand-written trace (two cores; the command forks mpirun, which starts a
thread; another process and idle time share the cores)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_account.py"
_SPEC = importlib.util.spec_from_file_location("tremula_bench_cpu_account", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
cpu_account = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = cpu_account  # its dataclasses look their module up
_SPEC.loader.exec_module(cpu_account)


def _switch(pid: int, tid: int, cpu: int, t: float, prev: tuple, nxt: tuple) -> str:
    (pc, pp, state), (nc, np_) = prev, nxt
    return (
        f"{pid}/{tid} [{cpu:03d}] {t:.6f}:       sched:sched_switch: prev_comm={pc} "
        f"prev_pid={pp} prev_prio=120 prev_state={state} ==> next_comm={nc} next_pid={np_} "
        f"next_prio=120"
    )


TRACE = "\n".join(
    [
        # before the command: perf hands cpu 0 to its child, cpu 1 runs someone else's 50
        _switch(10, 10, 0, 1.000, ("perf", 10, "S"), ("perf-exec", 11)),
        _switch(0, 0, 1, 1.000, ("swapper/1", 0, "R"), ("python", 50)),
        "11/11 [000] 1.001000: sched:sched_process_exec: filename=/usr/bin/python pid=11 "
        "old_pid=11",
        "11/11 [000] 1.011000: sched:sched_process_fork: comm=python pid=11 "
        "child_comm=python child_pid=12",
        _switch(11, 11, 0, 1.021, ("python", 11, "S"), ("python", 12)),  # 11: 20 ms
        "12/12 [000] 1.022000: sched:sched_process_exec: filename=/usr/bin/mpirun pid=12 "
        "old_pid=12",
        "12/12 [000] 1.025000: sched:sched_process_fork: comm=mpirun pid=12 "
        "child_comm=mpirun child_pid=13",
        _switch(50, 50, 1, 1.031, ("python", 50, "R"), ("mpirun", 13)),  # other: 30 ms
        _switch(12, 13, 1, 1.036, ("mpirun", 13, "S"), ("swapper/1", 0)),  # 12's thread: 5
        _switch(12, 12, 0, 1.041, ("mpirun", 12, "Z"), ("python", 11)),  # 12: 20 ms
        _switch(0, 0, 1, 1.051, ("swapper/1", 0, "R"), ("python", 50)),  # idle: 15 ms
        _switch(11, 11, 0, 1.061, ("python", 11, "Z"), ("swapper/0", 0)),  # 11: 20 ms, ends
        _switch(0, 0, 0, 1.070, ("swapper/0", 0, "R"), ("python", 50)),  # after: not counted
    ]
)


def test_hand_written_trace() -> None:
    acc = cpu_account.account(TRACE, cores=2)
    assert acc.wall == pytest.approx(0.060)
    assert acc.other == pytest.approx(0.030)
    assert acc.idle == pytest.approx(0.015)
    assert acc.command == pytest.approx(0.065)
    by_pid = {p.pid: p for p in acc.processes}
    assert sorted(by_pid) == [11, 12]
    assert by_pid[11].programs == ["python"] and by_pid[11].cpu == pytest.approx(0.040)
    assert by_pid[12].programs == ["mpirun"] and by_pid[12].cpu == pytest.approx(0.025)
    assert by_pid[12].first == pytest.approx(0.010)  # from its fork, 10 ms after the start
    assert "the command 65, other processes 30, idle 15 (not seen: 10)" in cpu_account.show(acc)


def test_a_trace_without_the_command_is_refused() -> None:
    with pytest.raises(SystemExit, match="no start or no end"):
        cpu_account.account(TRACE.split("\n", 2)[0], cores=2)
