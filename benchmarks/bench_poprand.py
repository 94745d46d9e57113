"""poprand on the Mk2 IPU Model: build and run time of generating N random values, as a
ratio to NumPy's own counter-based generator (``Generator(Philox)``) in the same run.

    python benchmarks/bench_poprand.py [--elements N] [--repeats K]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from tremula import poplar
from tremula.libs import poprand


def _best(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


CASES: dict[
    str, tuple[Callable[..., poplar.Tensor], Callable[[np.random.Generator, int], object]]
] = {
    "uniform float": (
        lambda g, r, p: poprand.uniform(g, None, 0, r, poplar.FLOAT, 0, 1, p),
        lambda rng, n: rng.random(n, dtype=np.float32),
    ),
    "normal float": (
        lambda g, r, p: poprand.normal(g, None, 0, r, poplar.FLOAT, 0, 1, p),
        lambda rng, n: rng.standard_normal(n, dtype=np.float32),
    ),
    "bernoulli half": (
        lambda g, r, p: poprand.bernoulli(g, None, 0, r, poplar.HALF, 0.5, p),
        lambda rng, n: (rng.random(n, dtype=np.float32) < 0.5).astype(np.float16),
    ),
    "truncated normal float": (
        lambda g, r, p: poprand.truncated_normal(g, None, 0, r, poplar.FLOAT, 0, 1, 2, p),
        lambda rng, n: rng.standard_normal(n, dtype=np.float32),
    ),
}


def bench(name: str, n: int, repeats: int) -> None:
    make, reference = CASES[name]
    device = poplar.IPUModel().create_device()
    graph = poplar.Graph(device.target)
    ref = graph.add_variable(poplar.FLOAT, (n,), "ref")
    poplar.map_tensor_linearly(graph, ref)
    prog = poplar.Sequence()
    t0 = time.perf_counter()
    make(graph, ref, prog)
    build = time.perf_counter() - t0
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    run = _best(lambda: engine.run(0), repeats)
    rng = np.random.Generator(np.random.Philox(0))
    ref_time = _best(lambda: reference(rng, n), repeats)
    engine.reset_execution_profile()
    engine.run(0)
    cycles = engine.get_execution_profile()["simulation"]["cycles"]  # one run
    micros = cycles / device.target.tile_clock_frequency * 1e6
    print(
        f"{name:24s} n={n}: build {build * 1e3:7.1f} ms, run {run * 1e3:7.1f} ms, "
        f"numpy {ref_time * 1e3:6.1f} ms, ratio {run / ref_time:5.2f}x; "
        f"{cycles} simulated cycles per run ({micros:.1f} us)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--elements", type=int, default=1 << 24)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name in CASES:
        bench(name, args.elements, args.repeats)


if __name__ == "__main__":
    main()
