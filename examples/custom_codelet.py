"""A custom codelet on the IPU Model: define a vertex type, place vertices on tiles, run,
and read the numbers, the cycles and the memory.

    python examples/custom_codelet.py
"""

from __future__ import annotations

import numpy as np

from tremula import poplar


class Clamp(poplar.Codelet):
    """y = min(max(x, lo), hi): a worker vertex over one vector, templated on the type."""

    templates = ("T",)
    x = poplar.Input("T")
    y = poplar.Output("T")
    lo = poplar.State("T")
    hi = poplar.State("T")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        # v.x holds field x of every vertex of this type, shaped [replica, element];
        # per-vertex state is expanded to one value per element.
        v.y = np.clip(v.x, v.expand(v.lo, "x"), v.expand(v.hi, "x"))

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        # PopLibs shape: overhead + vectors x cycles per vector (max + min per vector).
        return 18 + 2 * np.ceil(v.lengths("x") / v.vector_width("x"))


def main() -> None:
    device = poplar.IPUModel(tiles_per_ipu=16).create_device()
    graph = poplar.Graph(device.target)
    graph.add_codelets(Clamp)
    x = graph.add_variable(poplar.FLOAT, (16, 100), "x")
    y = graph.add_variable(poplar.FLOAT, (16, 100), "y")
    poplar.map_tensor_linearly(graph, x)
    poplar.map_tensor_linearly(graph, y)
    cs = graph.add_compute_set("clamp")
    # one vertex per row, row i on tile i; bounds differ per vertex
    graph.add_vertices(
        cs,
        "Clamp<float>",
        {"x": x, "y": y, "lo": -np.arange(16.0), "hi": np.arange(16.0)},
        tiles=range(16),
    )
    inp = graph.add_host_to_device_fifo("x", poplar.FLOAT, x.num_elements)
    out = graph.add_device_to_host_fifo("y", poplar.FLOAT, y.num_elements)
    engine = poplar.Engine(
        graph, poplar.Sequence([poplar.Copy(inp, x), poplar.Execute(cs), poplar.Copy(y, out)])
    )

    data = np.random.default_rng(0).uniform(-20, 20, (16, 100)).astype(np.float32)
    result = np.zeros_like(data)
    engine.load(device)
    engine.connect_stream("x", data)
    engine.connect_stream("y", result)
    engine.run(0)

    expected = np.clip(data, -np.arange(16.0)[:, None], np.arange(16.0)[:, None])
    assert np.array_equal(result, expected.astype(np.float32))
    cycles = engine.get_graph_profile()["computeSets"]["cycleEstimates"]["cyclesByTile"][0]
    print(
        f"clamp OK; compute-set cycles on tile 0: {cycles[0]}; total simulated cycles: "
        f"{engine.get_execution_profile()['simulation']['cycles']}"
    )


if __name__ == "__main__":
    main()
