"""Writing profiles: ``tremula.profile.io.dumps`` (the files' bytes) against
``json.dumps(sort_keys=True, indent=2)``, which lays them out identically with its
pure-Python encoder.

For the digits MLP's graph and execution profiles at 1472 tiles (one training step), prints
the size, the best of 3 times of each writer and their ratio, and checks the bytes agree.
Then autoReport's ``graph.json`` with its ``graphId``: ``identify`` (one serialisation, the
id spliced in) against hashing one serialisation and writing a second (what it did before).

Run: ``python benchmarks/bench_profile_write.py`` (needs scikit-learn for the digits).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from tremula import digits
from tremula.profile.io import _plain, dumps, graph_id, identify
from tremula.profile.schema import GRAPH_ID


def _best(fn: Callable[[], Any], rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    trainer = digits.build_training(32, 0.05)
    x, y, _, _ = digits.load_digits()
    with trainer.session as session:
        session.run({trainer.x: x[:32], trainer.labels: y[:32]})
    engine = trainer.session.engine
    profiles = {"graph": engine.get_graph_profile(), "execution": engine.get_execution_profile()}
    print(f"{'profile':10} {'MB':>7} {'dumps s':>8} {'json.dumps s':>12} {'ratio':>6}")
    for name, profile in profiles.items():

        def stdlib(p: Any = profile) -> str:
            return json.dumps(p, sort_keys=True, indent=2, allow_nan=False, default=_plain)

        assert dumps(profile) == stdlib() + "\n"
        fast, slow = _best(lambda p=profile: dumps(p)), _best(stdlib)
        size = len(dumps(profile)) / 1e6
        print(f"{name:10} {size:7.2f} {fast:8.3f} {slow:12.3f} {slow / fast:6.1f}")
    graph = profiles["graph"]

    def twice() -> str:
        return dumps({**graph, GRAPH_ID: graph_id(graph)})

    assert identify(graph)[1] == twice()
    once_s, twice_s = _best(lambda: identify(graph)), _best(twice)
    print(
        f"graph.json with graphId: identify {once_s:.3f} s, id then dumps {twice_s:.3f} s, "
        f"ratio {twice_s / once_s:.2f}"
    )
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
