"""poprand: the Philox generator, the quantile function and the codelets used directly."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from tremula import poplar
from tremula.errors import CodeletError
from tremula.libs import poprand
from tremula.libs.poprand.philox import ndtri_lower, philox4x32
from tremula.profile import validate

# Random123's known-answer vectors for philox4x32_10: (counter, key, result)
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_philox_known_answers(counter, key, expected):
    out = philox4x32(counter, key)
    assert out.shape == (4,) and out.dtype == np.uint32
    assert tuple(int(x) for x in out) == expected


def test_philox_broadcasts_and_pieces_agree(monkeypatch):
    blocks = np.arange(1000, dtype=np.uint32)
    keys = (np.array([[1], [7]]), np.array([[2], [9]]))
    whole = philox4x32((blocks, 3, np.array([[0], [1]]), 0), keys)
    assert whole.shape == (2, 1000, 4)
    monkeypatch.setattr("tremula.libs.poprand.philox.CHUNK", 7)
    np.testing.assert_array_equal(philox4x32((blocks, 3, np.array([[0], [1]]), 0), keys), whole)
    one = philox4x32((123, 3, 1, 0), (7, 9))
    np.testing.assert_array_equal(one, whole[1, 123])


def test_inverse_normal_cdf_matches_scipy():
    p = np.concatenate([np.logspace(-300, np.log10(0.5), 5000), np.linspace(1e-9, 0.5, 5000)])
    np.testing.assert_allclose(ndtri_lower(p), special.ndtri(p), rtol=2e-9, atol=1e-12)


def test_vertices_with_different_seeds_and_parameters_in_one_compute_set():
    """Two generator vertices merged in one batch keep their own seed, modifier and range."""
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    seeds = []
    for i, value in enumerate(([1, 2], [3, 4])):
        s = g.add_constant(poplar.UNSIGNED_INT, (2,), value, f"seed{i}")
        g.set_tile_mapping(s, i)
        seeds.append(s)
    x = g.add_variable(poplar.FLOAT, (2, 50), "x")
    g.set_tile_mapping(x, np.repeat([[1], [2]], 50, axis=1))
    prog = poplar.Sequence()
    poprand.uniform(g, seeds[0], 0, x, poplar.FLOAT, 0, 1, prog)  # registers the codelets
    cs = g.add_compute_set("manual")
    for row, (mod, lo, hi) in enumerate([(1, 0.0, 1.0), (2, -5.0, 5.0)]):
        fields = {"out": [x[row]], "seed": seeds[row], "starts": [0], "seed_modifier": mod,
                  "min_val": lo, "max_val": hi}  # fmt: skip
        g.add_vertex(cs, "poprand::Uniform<float>", fields, tile=row + 1)
    prog.add(poplar.Execute(cs))
    row_ref = g.add_variable(poplar.FLOAT, (50,), "row_ref")
    g.set_tile_mapping(row_ref, 3)
    expected = [
        poprand.uniform(g, seeds[0], 1, row_ref, poplar.FLOAT, 0, 1, prog),
        poprand.uniform(g, seeds[1], 2, row_ref, poplar.FLOAT, -5, 5, prog),
    ]
    for name, t in (("x", x), ("e0", expected[0]), ("e1", expected[1])):
        g.create_host_read(name, t)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    engine.run(0)
    validate(engine.get_graph_profile(), engine.get_execution_profile())
    got = engine.read_tensor("x")
    np.testing.assert_array_equal(got[0], engine.read_tensor("e0"))
    np.testing.assert_array_equal(got[1], engine.read_tensor("e1"))


def test_unsupported_template_type_is_named():
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    g.add_codelets(poprand.CODELETS)
    seed = g.add_constant(poplar.UNSIGNED_INT, (2,), [1, 2], "seed")
    g.set_tile_mapping(seed, 0)
    x = g.add_variable(poplar.SHORT, (8,), "x")
    g.set_tile_mapping(x, 0)
    cs = g.add_compute_set("bad")
    g.add_vertex(cs, "poprand::Normal<short>", {"out": [x], "seed": seed, "starts": [0],
                                                 "seed_modifier": 0, "mean": 0, "stdev": 1},
                 tile=0)  # fmt: skip
    with pytest.raises(CodeletError, match=r"output type 'short' is not supported; use one of"):
        poplar.Engine(g, poplar.Execute(cs))
