"""``Batch.view``: a field as an N-d array, zero-copy when the connected tensor is an affine
view of one variable, gathered otherwise; results are the same either way."""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.profile import validate

SEEN: dict[str, bool] = {}


class BlockProduct(poplar.Codelet):
    """out[v] = a[v] @ b[v] for blocks of 2x3 and 3x2, via N-d views of the fields."""

    name = "views::BlockProduct"
    supervisor = True
    a = poplar.Input(poplar.FLOAT)
    b = poplar.Input(poplar.FLOAT)
    out = poplar.Output(poplar.FLOAT)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        a = v.view("a", (v.n, 2, 3))
        b = v.view("b", (v.n, 3, 2))
        out = v.view("out", (v.n, 2, 2))
        SEEN["a_zero_copy"] = not a.flags.owndata and a.base is not None and a.strides[1] == 0
        SEEN["out_writeable"] = out.flags.writeable
        out[...] = np.matmul(a, b)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return np.full(v.n, 50)


def _run(a_field_of, a_blocks_of=lambda av: av):
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    g.add_codelets(BlockProduct)
    a = g.add_variable(poplar.FLOAT, (2, 3), "a")
    b = g.add_variable(poplar.FLOAT, (4, 3, 2), "b", mapping="linear")
    out = g.add_variable(poplar.FLOAT, (4, 2, 2), "out", mapping="linear")
    g.set_tile_mapping(a, 0)
    cs = g.add_compute_set("blocks")
    g.add_vertices(cs, "views::BlockProduct", {"a": a_field_of(a), "b": b, "out": out}, range(4))
    for name, t in (("a", a), ("b", b)):
        g.create_host_write(name, t)
    g.create_host_read("out", out)
    engine = poplar.Engine(g, poplar.Execute(cs))
    engine.load(device)
    rng = np.random.default_rng(3)
    av, bv = rng.standard_normal((2, 3)), rng.standard_normal((4, 3, 2))
    engine.write_tensor("a", av)
    engine.write_tensor("b", bv)
    engine.run(0)
    validate(engine.get_graph_profile(), engine.get_execution_profile())
    want = np.matmul(a_blocks_of(av).astype(np.float32), bv.astype(np.float32))
    return engine.read_tensor("out"), want


def test_broadcast_block_is_served_as_a_zero_copy_view():
    got, want = _run(lambda a: a.expand([0]).broadcast(4, 0))  # every vertex reads all of a
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert SEEN["a_zero_copy"] and SEEN["out_writeable"]


def test_concatenation_that_steps_evenly_is_served_as_a_view():
    # the addresses were copied, but they step evenly (stride 0 over vertices): checked
    # numerically, the field is still a strided view of device memory
    got, want = _run(lambda a: poplar.concat([a.expand([0])] * 4, 0))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert SEEN["a_zero_copy"]


def test_uneven_concatenation_falls_back_to_a_gather():
    def field(a):
        swapped = poplar.concat([a[1:2], a[0:1]], 0)  # a with its rows swapped
        return poplar.concat([a.expand([0]), swapped.expand([0]), *[a.expand([0])] * 2], 0)

    def blocks(av):
        return np.stack([av, av[::-1], av, av])

    got, want = _run(field, blocks)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not SEEN["a_zero_copy"]


def test_numeric_affine_checks_every_address():
    from tremula.engine.fieldlayout import numeric_affine

    a = (100 + np.arange(4)[:, None] * 10 + np.arange(3)[None, :] * 2).astype(np.int64)
    assert numeric_affine(a) == (100, (10, 2))
    assert numeric_affine(a[::-1]) == (130, (-10, 2))
    b = a.copy()
    b[3, 2] += 1  # one address off the lattice
    assert numeric_affine(b) is None
    repeated = np.tile(np.arange(5), (3, 1))  # stride 0: fine to read, not to write
    assert numeric_affine(repeated) == (0, (0, 1))
    assert numeric_affine(repeated, distinct=True) is None
    assert numeric_affine(np.zeros((0, 2), dtype=np.int64)) is None


def test_grid_layout_finds_permuted_blocks_of_an_affine_grid():
    """Blocks of equal layout whose first addresses form a grid in another order (pieces
    of a reduction listed tile by tile) give the grid's shape and strides and the order."""
    from tremula.engine.fieldlayout import grid_layout

    # a [3][4 pieces][5][2] block grid of a 12 x 10 matrix: block (c, j) = rows 4c..4c+3,
    # columns 2j, 2j+1; listed in a shuffled order
    base = np.arange(120).reshape(12, 10)
    blocks = base.reshape(3, 4, 5, 2).transpose(0, 2, 1, 3)  # [c, j, piece, element]
    order = np.random.default_rng(0).permutation(15)
    listed = blocks.reshape(15, 4, 2)[order]
    first, shape, strides, got, rank = grid_layout(listed.reshape(-1), (4, 2))
    assert (first, shape, strides, rank) == (0, (3, 5, 4, 2), (40, 2, 10, 1), 2)
    np.testing.assert_array_equal(got, order)
    view = np.lib.stride_tricks.as_strided(base.reshape(-1), shape, [s * 8 for s in strides])
    np.testing.assert_array_equal(view.reshape(15, 4, 2)[got], listed)
    assert grid_layout(np.r_[listed.reshape(-1)[:-1], 7], (4, 2)) is None  # not one layout
    assert grid_layout(np.r_[listed.reshape(-1)[8:], listed.reshape(-1)[:8]], (4, 2)) is not None
    assert grid_layout(np.tile(listed[:1].reshape(-1), 2), (4, 2)) is None  # a block twice
    # pieces alternating between two planes: the piece axis comes split in two
    planes = np.arange(2 * 8 * 6).reshape(2, 8, 6)  # [plane][row][column]
    pieces = planes[:, :, :].transpose(2, 1, 0).reshape(6, 16)  # column c: (row, plane)
    found = grid_layout(pieces.reshape(-1), (16, 1))
    assert found is not None and found[1] == (6, 8, 2, 1) and found[2][:3] == (1, 6, 48)
