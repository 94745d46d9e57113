"""``tremula demo``: a small Poplar program on the Mk2 IPU Model, with its profile.

The program streams a vector in, evaluates ``y = x * x + 1`` with a custom worker codelet on
every tile (one vertex per worker context), reduces each vertex's part to a partial sum,
gathers the partials on tile 0 (an exchange), sums them there and streams the total out. It
checks the numbers against NumPy and prints the profile summary.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import poplar
from tremula.target import MAX_TILES_PER_IPU


class SquarePlusOne(poplar.Codelet):
    """y = x * x + 1 over one vector (a worker vertex)."""

    name = "demo::SquarePlusOne"
    x = poplar.Input(poplar.FLOAT)
    y = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        v.y = v.x * v.x + 1.0

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        # PopLibs shape: overhead + vectors x cycles per vector (mul + add on float2).
        return 20 + 2 * np.ceil(v.lengths("x") / v.vector_width("x"))

    @staticmethod
    def flops(v: poplar.VertexInfo) -> np.ndarray:
        return 2.0 * v.lengths("x")


class Sum(poplar.Codelet):
    """out = sum(x) (a worker vertex writing one element)."""

    name = "demo::Sum"
    x = poplar.Input(poplar.FLOAT)
    out = poplar.Output(poplar.FLOAT, kind="scalar")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        v.out = v.reduce(np.add, v.x.astype(np.float64), "x")

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return 16 + np.ceil(v.lengths("x") / v.vector_width("x"))


@dataclass
class DemoResult:
    total: float
    expected: float
    engine: poplar.Engine


def _build(
    tiles_per_ipu: int, elements_per_worker: int, model: dict[str, Any]
) -> tuple[poplar.Device, poplar.Graph, poplar.Sequence, int]:
    """The demo's device, graph, program and element count on ``tiles_per_ipu`` tiles."""
    device = poplar.IPUModel(tiles_per_ipu=tiles_per_ipu, **model).create_device()
    graph = poplar.Graph(device.target)
    graph.add_codelets([SquarePlusOne, Sum])
    tiles, workers = tiles_per_ipu, device.target.num_worker_contexts
    n_vertices = tiles * workers
    n = n_vertices * elements_per_worker

    x = graph.add_variable(poplar.FLOAT, (n_vertices, elements_per_worker), "x")
    y = graph.add_variable(poplar.FLOAT, (n_vertices, elements_per_worker), "y")
    partials = graph.add_variable(poplar.FLOAT, (n_vertices,), "partials")
    gathered = graph.add_variable(poplar.FLOAT, (n_vertices,), "partials_on_tile0")
    total = graph.add_variable(poplar.FLOAT, (1,), "total")
    vertex_tiles = np.repeat(np.arange(tiles), workers)
    for t in (x, y):
        graph.set_tile_mapping(t, np.repeat(vertex_tiles, elements_per_worker).reshape(t.shape))
    graph.set_tile_mapping(partials, vertex_tiles)
    graph.set_tile_mapping(gathered, 0)
    graph.set_tile_mapping(total, 0)

    square = graph.add_compute_set("square")
    graph.add_vertices(square, "demo::SquarePlusOne", {"x": x, "y": y}, vertex_tiles)
    reduce_cs = graph.add_compute_set("partialSums")
    graph.add_vertices(reduce_cs, "demo::Sum", {"x": y, "out": partials}, vertex_tiles)
    final = graph.add_compute_set("finalSum")
    graph.add_vertex(final, "demo::Sum", {"x": gathered, "out": total[0]}, tile=0)

    h2d = graph.add_host_to_device_fifo("x", poplar.FLOAT, n)
    d2h = graph.add_device_to_host_fifo("total", poplar.FLOAT, 1)
    program = poplar.Sequence(
        [
            poplar.Copy(h2d, x),
            poplar.Execute(square),
            poplar.Execute(reduce_cs),
            poplar.Copy(partials, gathered, name="gatherPartials"),
            poplar.Execute(final),
            poplar.Copy(total, d2h),
        ],
        name="demo",
    )
    return device, graph, program, n


def tile_limit(elements_per_worker: int = 64, **model: Any) -> int:
    """The most tiles per IPU the demo fits on (an IPU Model with the ``model``
    parameters).

    Tile 0 gathers one partial sum per worker of every tile (and holds the exchange code
    that receives them), so its memory grows with the tile count while every other tile's
    stays the same. The growth is read from the model itself: tile 0's bytes (including
    gaps) with the demo compiled on ``t``, ``2t`` and ``4t`` tiles, ``t`` doubling from 64
    until the two steps grow by the same bytes per tile (below that, the vectors each tile
    squares, which are not live with the gathered partials, are tile 0's peak).
    """
    capacity = poplar.IPUModel(**model).create_target().memory_bytes_per_tile
    need: dict[int, int] = {}

    def bytes_on(tiles: int) -> int:
        if tiles not in need:
            need[tiles] = _tile0_bytes(tiles, elements_per_worker, model)
        return need[tiles]

    tiles = 64
    while 4 * tiles <= MAX_TILES_PER_IPU:
        low = bytes_on(2 * tiles) - bytes_on(tiles)  # over `tiles` more tiles
        high = bytes_on(4 * tiles) - bytes_on(2 * tiles)  # over `2 * tiles` more
        if high == 2 * low and low % tiles == 0:  # linear from `tiles` on
            per_tile, top = low // tiles, 4 * tiles
            if need[top] > capacity:
                return max(1, top - -(-(need[top] - capacity) // per_tile))
            return min(MAX_TILES_PER_IPU, top + (capacity - need[top]) // per_tile)
        tiles *= 2
    return MAX_TILES_PER_IPU


def _tile0_bytes(tiles: int, elements_per_worker: int, model: dict[str, Any]) -> int:
    _, graph, program, _ = _build(tiles, elements_per_worker, model)
    engine = poplar.Engine(graph, program, options={"debug.allowOutOfMemory": "true"})
    return int(engine.memory.by_tile["totalIncludingGaps"][0])


def build_and_run(
    tiles_per_ipu: int = 1472, elements_per_worker: int = 64, options: dict[str, str] | None = None
) -> DemoResult:
    """Build, compile and run the demo on a Mk2 IPU Model with ``tiles_per_ipu`` tiles."""
    device, graph, program, n = _build(tiles_per_ipu, elements_per_worker, {})
    engine = poplar.Engine(graph, program, options=options)

    rng = np.random.default_rng(0)
    data = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(1, dtype=np.float32)
    engine.load(device)
    engine.connect_stream("x", data)
    engine.connect_stream("total", out)
    engine.run(0)
    expected = float(np.sum(data.astype(np.float64) ** 2 + 1.0))
    return DemoResult(float(out[0]), expected, engine)


def main(tiles_per_ipu: int = 1472, report: str | None = None, steps: bool = False) -> int:
    options = {"autoReport.all": "true", "autoReport.directory": report} if report else None
    result = build_and_run(tiles_per_ipu, options=options)
    ok = bool(np.isclose(result.total, result.expected, rtol=1e-5))
    print(
        f"Tremula demo on the Mk2 IPU Model ({tiles_per_ipu} tiles): "
        f"sum(x*x + 1) = {result.total:.6g} (NumPy: {result.expected:.6g}) "
        f"{'OK' if ok else 'MISMATCH'}"
    )
    if report:
        where = result.engine.report_directory or report  # another engine's folder: a subfolder
        where = report if where == os.path.abspath(report) else where
        print(f"Profile written to {where}/graph.json and {where}/execution.json")
    print()
    result.engine.print_profile_summary(options={"showExecutionSteps": str(steps).lower()})
    result.engine.close()  # autoReport writes execution.json now
    return 0 if ok else 1
