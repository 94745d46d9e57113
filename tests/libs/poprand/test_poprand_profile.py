"""poprand: vertices, estimates and profiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import poprand
from tremula.libs.poprand.estimators import CYCLES_PER_VECTOR
from tremula.profile import validate


def _profile(run, build, tiles=4):
    engines = []
    run(build, tiles=tiles, engine_out=engines)
    return engines[0].get_graph_profile()


def _uniform(mapping, name=""):
    def build(g, s, p):
        r = g.add_variable(poplar.FLOAT, (600,), "r")
        if mapping == "linear":
            poplar.map_tensor_linearly(g, r)
        else:
            g.set_tile_mapping(r, np.arange(600) % g.num_tiles)
        return {"x": poprand.uniform(g, s, 0, r, poplar.FLOAT, 0, 1, p, name)}

    return build


def test_one_multivertex_per_tile_with_its_estimate(run):
    cs = _profile(run, _uniform("linear", "init"))["computeSets"]
    i = cs["names"].index("init/poprand::uniform")
    assert cs["vertexCounts"][i] == [4]
    # 150 elements per tile, one region: supervisor 11 + 6 workers x (30 + 13 float2 x 3)
    # + 6 x 8 for the region + 20 for the seed
    vw, cpv = CYCLES_PER_VECTOR[("uniform", "float")]
    expected = 11 + 6 * (30 + math.ceil(25 / vw) * cpv) + 6 * 8 + 20
    assert cs["cycleEstimates"]["activeCyclesByTile"][i] == [expected] * 4


def test_fragmented_mapping_costs_region_overhead(run):
    linear = _profile(run, _uniform("linear"))["computeSets"]
    strided = _profile(run, _uniform("strided"))["computeSets"]
    assert strided["vertexCounts"] == linear["vertexCounts"]
    lin = linear["cycleEstimates"]["activeCyclesByTile"][0][0]
    frag = strided["cycleEstimates"]["activeCyclesByTile"][0][0]
    assert frag == lin + 6 * (math.ceil(150 / 6) - 1) * 8


@pytest.mark.parametrize(
    "name,vertex",
    [
        ("uniform", "poprand::Uniform<float>"),
        ("uniform_int", "poprand::Uniform<int>"),
        ("normal_half", "poprand::Normal<half>"),
        ("truncated_normal", "poprand::TruncatedNormal<float>"),
        ("bernoulli", "poprand::Bernoulli<int>"),
        ("dropout", "poprand::Dropout<float>"),
        ("log_uniform", "poprand::LogUniform<float>"),
    ],
)
def test_vertex_types(run, generators, name, vertex):
    def build(g, s, p):
        r = g.add_variable(poplar.FLOAT, (5, 9), "r")
        poplar.map_tensor_linearly(g, r)
        return {"x": generators[name](g, s, 0, r, p)}

    prof = _profile(run, build)
    assert vertex in prof["vertexTypes"]["names"]


def test_virtual_graph_places_vertices_on_its_tiles():
    device = poplar.IPUModel(tiles_per_ipu=8).create_device()
    graph = poplar.Graph(device.target)
    sub = graph.create_virtual_graph(4, 8)
    r = sub.add_variable(poplar.FLOAT, (40,), "r")
    poplar.map_tensor_linearly(sub, r)
    prog = poplar.Sequence()
    x = poprand.normal(sub, None, 1, r, poplar.FLOAT, 0, 1, prog)
    graph.create_host_read("x", x)
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    engine.run(0)
    prof = engine.get_graph_profile()
    validate(prof, engine.get_execution_profile())
    active = prof["computeSets"]["cycleEstimates"]["activeCyclesByTile"][0]
    assert [c > 0 for c in active] == [False] * 4 + [True] * 4
    assert np.all(np.isfinite(engine.read_tensor("x")))
    np.testing.assert_array_equal(np.asarray(graph.tiles_of(x)), np.asarray(graph.tiles_of(r)))


def test_output_is_mapped_like_the_reference(run):
    tiles = (np.arange(30) * 7) % 4

    def build(g, s, p):
        r = g.add_variable(poplar.HALF, (3, 10), "r")
        g.set_tile_mapping(r, tiles.reshape(3, 10))
        x = poprand.bernoulli(g, s, 0, r, poplar.FLOAT, 0.5, p)
        np.testing.assert_array_equal(g.tiles_of(x).ravel(), tiles)
        return {"x": x}

    run(build)
