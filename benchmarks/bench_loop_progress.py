"""Progress bars on on-device loops cost nothing when off (issue: profile reports a person
can look at, "long ``Session.run`` shows progress").

A PopXL program whose ``ops.repeat`` runs 4000 iterations of a small step (``x * 0.5 + 1``
on 1024 floats) is run, in the same process and interleaved, by sessions whose engines
differ only in the loop:

* ``bare``: the engine's loop as it was before the hook (``for _ in range(count)``, no test);
* ``off``: ``progress=False``;
* ``auto``: the default, standard error not a terminal (the case of CI and pipes);
* ``on``: a tqdm bar, drawn into ``os.devnull``.

It prints the best process CPU time of 15 runs of each (steadier than wall time on a shared
machine) and the ratio to ``bare`` (target: ``off`` and ``auto`` within noise of 1.00), on
the CPU target (no timeline, so the loop's own cost shows most) and on the IPU Model.

Run: ``python benchmarks/bench_loop_progress.py`` (``tqdm`` for the ``on`` row).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from tremula.engine import run as engine_run

COUNT = 4000
ROUNDS = 15


def _ir() -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(1024, np.float32), name="x")
        step = ir.create_graph(lambda t: t * 0.5 + 1.0, x)
        (y,) = ops.repeat(step, COUNT, x)
        ops.host_store(popxl.d2h_stream((1024,), popxl.float32, name="y"), y)
    return ir


def _bare_loop(rt: Any, node: Any, body: list[Callable[[], None]]) -> None:
    """The loop of the engine before the progress hook."""
    for _ in range(node.count):
        for step in body:
            step()


def _session(device: str, setting: str) -> popxl.Session:
    progress = {"bare": False, "off": False, "auto": None, "on": True}[setting]
    session = popxl.Session(_ir(), device, progress=progress)
    session.__enter__()
    hooked = engine_run._loop
    if setting == "bare":  # the flattened plan binds the loop function when first made
        engine_run._loop = _bare_loop
    try:
        session.run()
    finally:
        engine_run._loop = hooked
    return session


def _time(session: popxl.Session) -> float:
    """The process's CPU time of one run (steadier than wall time on a shared machine)."""
    start = time.process_time()
    session.run()
    return time.process_time() - start


def main() -> None:
    settings = ("bare", "off", "auto", "on")
    stderr = sys.stderr
    with open(os.devnull, "w") as null:
        sys.stderr = null  # not a terminal: "auto" shows nothing; "on" draws here
        try:
            rows = {}
            for device in ("cpu", "ipu_model"):
                sessions = {s: _session(device, s) for s in settings}
                best = dict.fromkeys(settings, float("inf"))
                for _ in range(ROUNDS):
                    for s in settings:
                        best[s] = min(best[s], _time(sessions[s]))
                for session in sessions.values():
                    session.__exit__(None, None, None)
                rows[device] = best
        finally:
            sys.stderr = stderr
    print(f"ops.repeat of {COUNT} iterations, best CPU time of {ROUNDS} runs (ms); ratio to bare")
    print(f"{'device':10} " + " ".join(f"{s:>14}" for s in settings))
    for device, best in rows.items():
        cells = [f"{best[s] * 1e3:7.1f} x{best[s] / best['bare']:5.3f}" for s in settings]
        print(f"{device:10} " + " ".join(f"{c:>14}" for c in cells))
    print(f"load: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
