"""popops.iota against NumPy, over tiles, and bad input."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs.popops.iota import iota


def _helpers():
    name = "tremula_tests_popops_reduce_helpers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("test_popops_reduce_helpers.py")
        )
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()


@pytest.mark.parametrize(("dtype", "start"), [(poplar.UNSIGNED_INT, 7), (poplar.INT, -500)])
def test_iota_over_tiles(dtype, start: int) -> None:
    rig = H.Rig(tiles=16)
    t = rig.graph.add_variable(dtype, (1001,), "t")
    rig.graph.set_tile_mapping(t, np.random.default_rng(0).permutation(1001) % 16)
    iota(rig.graph, t, start, rig.prog)
    (got,) = rig.run([t])
    np.testing.assert_array_equal(got, start + np.arange(1001))
    assert got.dtype == dtype.numpy


def test_iota_uses_worker_vertices_on_the_tiles_of_the_data() -> None:
    rig = H.Rig(tiles=4)
    t = rig.graph.add_variable(poplar.INT, (120,), "t")
    poplar.map_tensor_linearly(rig.graph, t)
    iota(rig.graph, t, 0, rig.prog)
    (group,) = rig.graph.state.vertex_groups[0]
    assert group.n == 4 * 6 and sorted(set(group.tiles.tolist())) == [0, 1, 2, 3]
    rig.run([t])


def test_bad_input() -> None:
    rig = H.Rig(tiles=2)
    g = rig.graph
    f = g.add_variable(poplar.FLOAT, (4,), "f", mapping="linear")
    m = g.add_variable(poplar.INT, (2, 2), "m", mapping="linear")
    u = g.add_variable(poplar.UNSIGNED_INT, (4,), "u", mapping="linear")
    before = H.graph_size(g)
    for t, start, message in [
        (f, 0, "rank-1 int or unsigned int tensor, got float"),
        (m, 0, "got int (2, 2)"),
        (u, -1, "values -1..2 do not fit type unsigned int"),
        (u, 1.5, "start must be an integer"),
    ]:
        with pytest.raises(GraphError, match=message.replace("(", r"\(").replace(")", r"\)")):
            iota(g, t, start, rig.prog)
    assert H.graph_size(g) == before
