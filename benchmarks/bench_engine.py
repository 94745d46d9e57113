"""Engine benchmarks (issue: the Poplar layer and the IPU Model engine).

1. An element-wise codelet over a 16M-element float32 tensor spread over all 1472 tiles of
   the Mk2 model, one vertex per worker context per tile: one ``Execute`` against the same
   NumPy expression on the whole array (target: at most 3x), and the compile time (target:
   under 2 s).
2. The same data on 4, 64 and 1472 tiles: run time growth from 4 to 1472 tiles (target: at
   most 1.5x).
3. ``Repeat(10000, Execute(tiny))``: program steps per second (target: at least 20,000).

Run: ``python benchmarks/bench_engine.py [--elements N]``. Wall-clock figures, best of
several runs; the reference is measured in the same run.
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

from tremula import poplar


class AXPY(poplar.Codelet):
    """y += a * x, a worker vertex over one vector."""

    name = "bench::AXPY"
    x = poplar.Input(poplar.FLOAT)
    y = poplar.InOut(poplar.FLOAT)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        v.y = v.y + 2.0 * v.x

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return 20 + 3 * np.ceil(v.lengths("x") / v.vector_width("x"))


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def elementwise_engine(n: int, tiles: int) -> tuple[poplar.Engine, float]:
    """An AXPY over ``n`` elements on ``tiles`` tiles, one vertex per worker; returns the
    loaded engine and the compile time in seconds."""
    # tiles enough memory for the data however few they are (the memory is not what is
    # measured; a variable larger than the whole target is refused when it is added)
    per_tile = max(poplar.IPUModel().memory_bytes_per_tile, -(-4 * n * 2 // tiles) + 2**16)
    device = poplar.IPUModel(tiles_per_ipu=tiles, memory_bytes_per_tile=per_tile).create_device()
    graph = poplar.Graph(device.target)
    graph.add_codelets(AXPY)
    x = graph.add_variable(poplar.FLOAT, (n,), "x")
    y = graph.add_variable(poplar.FLOAT, (n,), "y")
    poplar.map_tensor_linearly(graph, x)
    poplar.map_tensor_linearly(graph, y)
    workers = device.target.num_worker_contexts
    xs, ys, vtiles = [], [], []
    for tile, intervals in enumerate(graph.get_tile_mapping(x)):
        for begin, end in intervals:
            cuts = np.linspace(begin, end, workers + 1).astype(int)
            for lo, hi in itertools.pairwise(cuts):
                xs.append(x[lo:hi])
                ys.append(y[lo:hi])
                vtiles.append(tile)
    cs = graph.add_compute_set("axpy")
    graph.add_vertices(cs, "bench::AXPY", {"x": xs, "y": ys}, vtiles)
    start = time.perf_counter()
    engine = poplar.Engine(graph, poplar.Execute(cs), {"debug.allowOutOfMemory": "true"})
    compile_s = time.perf_counter() - start
    engine.load(device)
    return engine, compile_s


def bench_elementwise(n: int) -> dict[str, float]:
    engine, compile_s = elementwise_engine(n, 1472)
    engine.run(0)
    run_s = best(lambda: engine.run(0))
    rng = np.random.default_rng(0)
    xa = rng.standard_normal(n).astype(np.float32)
    ya = rng.standard_normal(n).astype(np.float32)

    def numpy_step() -> None:
        nonlocal ya
        ya = ya + 2.0 * xa

    numpy_s = best(numpy_step)
    engine.reset_execution_profile()
    engine.run(0)
    cycles = engine.get_execution_profile()["simulation"]["cycles"]
    print(
        f"[1] element-wise, {n:,} float32 on 1472 tiles x 6 workers "
        f"({engine.state.num_vertices:,} vertices)"
    )
    print(f"    compile {compile_s:.2f} s (target < 2 s)")
    print(
        f"    Execute {run_s * 1e3:.1f} ms, NumPy {numpy_s * 1e3:.1f} ms, "
        f"ratio {run_s / numpy_s:.2f}x (target <= 3x); simulated {cycles:,} cycles"
    )
    return {"compile_s": compile_s, "ratio": run_s / numpy_s}


def bench_scaling(n: int) -> float:
    times = {}
    for tiles in (4, 64, 1472):
        engine, _ = elementwise_engine(n, tiles)
        engine.run(0)
        times[tiles] = best(lambda e=engine: e.run(0))
    growth = times[1472] / times[4]
    print(
        "[2] same data on 4 / 64 / 1472 tiles: "
        + " / ".join(f"{times[t] * 1e3:.1f} ms" for t in (4, 64, 1472))
        + f"; growth 4 -> 1472 tiles {growth:.2f}x (target <= 1.5x)"
    )
    return growth


def bench_repeat(count: int = 10000) -> float:
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    graph = poplar.Graph(device.target)
    graph.add_codelets(AXPY)
    x = graph.add_variable(poplar.FLOAT, (8,), "x", mapping="linear")
    y = graph.add_variable(poplar.FLOAT, (8,), "y", mapping="linear")
    cs = graph.add_compute_set("tiny")
    graph.add_vertices(
        cs, "bench::AXPY", {"x": x.reshape((4, 2)), "y": y.reshape((4, 2))}, range(4)
    )
    engine = poplar.Engine(graph, poplar.Repeat(count, poplar.Execute(cs)))
    engine.load(device)
    elapsed = best(lambda: engine.run(0), repeat=3)
    rate = count / elapsed
    print(f"[3] Repeat({count}, Execute(tiny)): {rate:,.0f} program steps/s (target >= 20,000)")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=16 * 2**20)
    args = parser.parse_args()
    bench_elementwise(args.elements)
    bench_scaling(args.elements)
    bench_repeat()


if __name__ == "__main__":
    main()
