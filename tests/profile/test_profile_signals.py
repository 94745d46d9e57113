"""autoReport's execution profile survives the signals that end a run loop (issue 30):
SIGINT (Python's exit), and SIGTERM and SIGHUP, whose default action ended the process
without writing it. The handler a program had is kept: with the default action the process
still ends by the signal; a program's own handler still runs and decides the exit."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tremula.profile import read_profile, validate

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = Path(__file__).with_name("programs") / "run_loop.py"


def _environment(folder: Path) -> dict[str, str]:
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])
    environ["POPLAR_ENGINE_OPTIONS"] = json.dumps(
        {"autoReport.all": "true", "autoReport.directory": str(folder)}
    )
    return environ


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[dict, dict]:
    """The profiles of the same program's first two runs, written at a normal exit."""
    folder = tmp_path_factory.mktemp("reference") / "report"
    subprocess.run(
        [sys.executable, str(PROGRAM), "exit"], env=_environment(folder), check=True, timeout=120
    )
    graph, execution = read_profile(folder)
    assert execution is not None
    return graph, execution


def _default_action(sig: int) -> None:
    """In the child before it runs the program: ``sig`` at its default action, whatever the
    test runner inherited (a job started under ``nohup`` ignores SIGHUP, and so would every
    program it starts)."""
    signal.signal(sig, signal.SIG_DFL)


def _run_until(sig: int, mode: str, folder: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [sys.executable, str(PROGRAM), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(folder),
        preexec_fn=functools.partial(_default_action, sig),
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first == "looping\n", first + proc.stderr.read() if proc.stderr else ""
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, first + out, err)


@pytest.mark.parametrize(
    ("sig", "mode", "returncode", "said"),
    [
        (signal.SIGTERM, "default", -signal.SIGTERM, ""),
        (signal.SIGHUP, "default", -signal.SIGHUP, ""),
        (signal.SIGINT, "default", -signal.SIGINT, "KeyboardInterrupt"),
        (signal.SIGTERM, "own", 7, "own handler: signal 15"),
    ],
    ids=["SIGTERM", "SIGHUP", "SIGINT", "SIGTERM-own-handler"],
)
def test_a_signal_that_ends_a_run_loop_writes_the_execution_profile(
    tmp_path, reference, sig, mode, returncode, said
) -> None:
    folder = tmp_path / "report"
    done = _run_until(sig, mode, folder)
    assert done.returncode == returncode, done.stderr[-2000:]
    assert said in done.stdout + done.stderr
    graph, execution = read_profile(folder)
    assert execution is not None, f"{sorted(p.name for p in folder.iterdir())}"
    validate(graph, execution)
    # the loop ran on past the run count, ended mid-run or between runs: its profile is
    # that of the first two runs, as a normal exit writes it
    assert (graph, execution) == reference
    assert execution["simulation"]["cycles"] > 0
