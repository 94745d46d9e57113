"""popops element-wise benchmarks on the Mk2 IPU Model (1472 tiles).

1. ``popops.map`` of the fused expression ``Relu(_1 * _2 + 1)`` over 16M float32 elements
   against the same NumPy expression ``np.maximum(a * b + 1, 0)``.
2. ``popops.add`` over 16M float32 elements against ``a + b``.

Both inputs are mapped linearly over the tiles; the output is mapped like the first input.
Prints the build and compile times, the run time of one ``Execute`` (best of several runs),
the NumPy time measured in the same run, their ratio, and the simulated cycles.

Run: ``python benchmarks/bench_popops_elementwise.py [--elements N] [--tiles T]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from tremula import poplar
from tremula.libs.popops import elementwise as ew
from tremula.libs.popops.expr import Relu, _1, _2


def best(fn: Callable[[], object], repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def case(
    label: str,
    n: int,
    tiles: int,
    build: Callable[[poplar.Graph, poplar.Tensor, poplar.Tensor, poplar.Sequence], object],
    reference: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> float:
    device = poplar.IPUModel(tiles_per_ipu=tiles).create_device()
    graph = poplar.Graph(device.target)
    a = graph.add_variable(poplar.FLOAT, (n,), "a", mapping="linear")
    b = graph.add_variable(poplar.FLOAT, (n,), "b", mapping="linear")
    graph.create_host_write("a", a)
    graph.create_host_write("b", b)
    prog = poplar.Sequence()
    start = time.perf_counter()
    out = build(graph, a, b, prog)
    build_s = time.perf_counter() - start
    graph.create_host_read("out", out)
    start = time.perf_counter()
    engine = poplar.Engine(graph, prog, {"debug.allowOutOfMemory": "true"})
    compile_s = time.perf_counter() - start
    engine.load(device)

    rng = np.random.default_rng(0)
    xa = rng.standard_normal(n).astype(np.float32)
    xb = rng.standard_normal(n).astype(np.float32)
    engine.write_tensor("a", xa)
    engine.write_tensor("b", xb)
    engine.run(0)
    expected = reference(xa, xb)
    assert np.array_equal(engine.read_tensor("out"), expected), f"{label}: wrong result"
    run_s = best(lambda: engine.run(0))
    numpy_s = best(lambda: reference(xa, xb))
    engine.reset_execution_profile()
    engine.run(0)
    cycles = engine.get_execution_profile()["simulation"]["cycles"]
    ratio = run_s / numpy_s
    print(f"{label}: {n:,} float32 on {tiles} tiles ({engine.state.num_vertices:,} vertices)")
    print(f"    build {build_s:.2f} s, compile {compile_s:.2f} s")
    print(
        f"    run {run_s * 1e3:.1f} ms, NumPy {numpy_s * 1e3:.1f} ms, ratio {ratio:.2f}x; "
        f"simulated {cycles:,} cycles"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=16 * 2**20)
    parser.add_argument("--tiles", type=int, default=1472)
    args = parser.parse_args()
    n, tiles = args.elements, args.tiles

    def fused(
        graph: poplar.Graph, a: poplar.Tensor, b: poplar.Tensor, prog: poplar.Sequence
    ) -> poplar.Tensor:
        return ew.map(graph, Relu(_1 * _2 + 1), [a, b], prog)

    def fused_ref(xa: np.ndarray, xb: np.ndarray) -> np.ndarray:
        return np.maximum(xa * xb + np.float32(1), np.float32(0))

    def add(
        graph: poplar.Graph, a: poplar.Tensor, b: poplar.Tensor, prog: poplar.Sequence
    ) -> poplar.Tensor:
        return ew.add(graph, a, b, prog)

    r1 = case("[1] popops.map Relu(_1 * _2 + 1)", n, tiles, fused, fused_ref)
    r2 = case("[2] popops.add", n, tiles, add, np.add)
    print(f"ratios against NumPy: map {r1:.2f}x, add {r2:.2f}x")


if __name__ == "__main__":
    main()
