"""gcl benchmark: ``all_reduce`` ADD of 16M float32 elements over 4 and 16 replicas of the Mk2
model (the tensor spread linearly over its 1472 tiles), against ``numpy.sum`` over the
replica axis of the same ``[R, n]`` data.

Prints, per replica count: build + compile time, run time (best of several runs), the
ratio to NumPy, the simulated cycles, the simulated time on the IPU-links (GlobalExchange
steps) and the bytes each replica sent over the links against the ring's
``2 (R - 1) / R x N``.

Run: ``python benchmarks/bench_gcl.py [--elements N] [--replicas 4 16] [--repeat K]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tremula import poplar
from tremula.libs import gcl


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench(n: int, replicas: int, repeat: int) -> None:
    device = poplar.IPUModel().create_device()
    start = time.perf_counter()
    graph = poplar.Graph(device.target, replication_factor=replicas)
    x = graph.add_variable(poplar.FLOAT, (n,), "x", mapping="linear")
    graph.create_host_write("x", x)
    prog = poplar.Sequence()
    out = gcl.all_reduce(graph, x, gcl.CollectiveOperator.ADD, prog)
    graph.create_host_read("out", out)
    engine = poplar.Engine(graph, prog, {"debug.allowOutOfMemory": "true"})
    engine.load(device)
    build = time.perf_counter() - start

    data = np.random.default_rng(0).standard_normal((replicas, n), dtype=np.float32)
    engine.write_tensor("x", data)
    t_run = best(lambda: engine.run(0), repeat)
    t_ref = best(lambda: np.sum(data, axis=0), repeat)
    result = engine.read_tensor("out")
    want = np.sum(data, axis=0)
    err = float(np.max(np.abs(result - want[None])))
    del result

    execution = engine.get_execution_profile()
    steps = execution["simulation"]["steps"]
    # one run's steps: the profile holds the last run (or all; keep the first run's share)
    link_steps = [s for s in steps if s["type"] == "GlobalExchange"]
    per_run = 2 * (replicas - 1)
    link_cycles = sum(s["cycles"] for s in link_steps[:per_run])
    link_bytes = sum(s["totalData"] for s in link_steps[:per_run])
    clock = device.target.tile_clock_frequency
    total_cycles = execution["simulation"]["cycles"] // max(1, len(link_steps) // per_run)
    print(
        f"R={replicas:2d} n={n}: build+compile {build:6.2f} s, run {t_run:7.3f} s, "
        f"numpy.sum {t_ref:6.3f} s, ratio {t_run / t_ref:6.1f}x, max |err| {err:.1e}"
    )
    print(
        f"       simulated {total_cycles} cycles ({total_cycles / clock * 1e3:.3f} ms), "
        f"links {link_cycles} cycles ({link_cycles / clock * 1e3:.3f} ms), "
        f"{link_bytes} B sent per replica (ring: {2 * (replicas - 1) * 4 * n // replicas} B)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=16 * 2**20)
    parser.add_argument("--replicas", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for r in args.replicas:
        bench(args.elements, r, args.repeat)


if __name__ == "__main__":
    main()
