"""The main path end to end in a second: graph -> engine -> run -> profile -> validator."""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.demo import build_and_run
from tremula.profile import read_profile, validate


def test_issue_example_round_trip(tmp_path) -> None:
    device = poplar.IPUModel(tiles_per_ipu=16).create_device()
    graph = poplar.Graph(device.target)
    x = graph.add_variable(poplar.FLOAT, (16, 64), "x")
    poplar.map_tensor_linearly(graph, x)
    h2d = graph.add_host_to_device_fifo("in", poplar.FLOAT, 16 * 64)
    d2h = graph.add_device_to_host_fifo("out", poplar.FLOAT, 16 * 64)
    prog = poplar.Sequence([poplar.Copy(h2d, x), poplar.Copy(x, d2h)])
    engine = poplar.Engine(
        graph, prog, options={"autoReport.all": "true", "autoReport.directory": str(tmp_path)}
    )
    a = np.random.default_rng(1).standard_normal(16 * 64).astype(np.float32)
    b = np.zeros_like(a)
    engine.load(device)
    engine.connect_stream("in", a)
    engine.connect_stream("out", b)
    engine.run(0)
    np.testing.assert_array_equal(a, b)
    validate(engine.get_graph_profile(), engine.get_execution_profile())
    engine.close()  # autoReport writes the execution profile at the end
    validate(*read_profile(tmp_path))


def test_demo_numbers_and_profile() -> None:
    result = build_and_run(tiles_per_ipu=8, elements_per_worker=5)
    np.testing.assert_allclose(result.total, result.expected, rtol=1e-6)
    graph, execution = result.engine.get_graph_profile(), result.engine.get_execution_profile()
    validate(graph, execution)
    assert graph["target"]["numTiles"] == 8
    assert execution["simulation"]["cycles"] > 0
    assert {s["type"] for s in execution["simulation"]["steps"]} >= {
        "OnTileExecute",
        "DoExchange",
        "StreamCopy",
        "Sync",
    }


def test_codelet_state_bytes_override_reaches_the_profile() -> None:
    class Wide(poplar.Codelet):
        name = "tiny::Wide"
        x = poplar.InOut(poplar.FLOAT)

        @staticmethod
        def compute(v: poplar.Batch) -> None:
            v.x = v.x + 1

        @staticmethod
        def state_bytes(v: poplar.VertexInfo) -> np.ndarray:
            return np.full(v.n, 40)

    device = poplar.IPUModel(tiles_per_ipu=2).create_device()
    graph = poplar.Graph(device.target)
    graph.add_codelets(Wide)
    x = graph.add_variable(poplar.FLOAT, (2, 3), "x", mapping="linear")
    cs = graph.add_compute_set("wide")
    graph.add_vertices(cs, "tiny::Wide", {"x": x}, [0, 1])
    engine = poplar.Engine(graph, poplar.Execute(cs))
    profile = engine.get_graph_profile()
    assert profile["vertexTypes"]["sizes"] == [40]
    state = profile["memory"]["byCategory"]["vertexInstanceState"]["total"]
    assert state == [40, 40]
