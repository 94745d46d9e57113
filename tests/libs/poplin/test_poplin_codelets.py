"""poplin's codelets used directly: block products over grids of vertices (zero-copy views
and gathered fields give the same numbers), accumulation, reductions, estimators and FLOPs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tremula import poplar
from tremula import target as targets
from tremula.libs import poplin, util
from tremula.libs.poplin import codelets as cl
from tremula.libs.poplin import estimators as est

RNG = np.random.default_rng(7)


@pytest.fixture
def spy(monkeypatch):
    """Records the ``a`` operand of every whole-matrix product (the zero-copy path)."""
    seen: list[np.ndarray] = []
    real_products, real_views = cl._whole_products, cl._whole_views

    def record(a, *args):
        seen.append(a)
        return real_products(a, *args)

    def record_views(a, *args):  # the same path with views prepared once and reused
        views = real_views(a, *args)
        if views is not None:
            seen.append(a)
        return views

    monkeypatch.setattr(cl, "_whole_products", record)
    monkeypatch.setattr(cl, "_whole_views", record_views)
    return seen


def _grid_products(s, grid, block, connect, acc_steps=1, states=None):
    """Vertices computing the block products of ``A [I*m, Kn*k] @ B [Kn*k, J*n]`` over a
    grid ``(1, I, J, Kn)`` into partials ``[Kn, I*m, J*n]``; ``connect(a, b, c)`` gives the
    three fields from the grid views; ``states`` the grid states (default: ``grid``).
    Returns the partials after ``acc_steps`` runs of the products (the first plain, the
    others accumulating), and what they should be."""
    _, I, J, Kn = grid
    m, k, n = block
    g = s.graph
    util.ensure_codelets(g, poplin.CODELETS)
    A = g.add_variable(poplar.HALF, (I * m, Kn * k), "a", mapping="linear")
    B = g.add_variable(poplar.HALF, (Kn * k, J * n), "b", mapping="linear")
    P = g.add_variable(poplar.FLOAT, (Kn, I * m, J * n), "p", mapping="linear")
    a = A.reshape((1, I, m, Kn, k)).dim_shuffle((0, 1, 3, 2, 4)).expand([2]).broadcast(J, 2)
    b = B.reshape((1, Kn, k, J, n)).dim_shuffle((0, 3, 1, 2, 4)).expand([1]).broadcast(I, 1)
    c = P.reshape((Kn, 1, I, m, J, n)).dim_shuffle((1, 2, 4, 0, 3, 5))
    fields = connect(a, b, c)  # [G, I, J, Kn, rows, cols] views, G = 1
    fields.update(zip(cl.GRID, states or grid))
    tiles = np.arange(I * J * Kn) % s.graph.target.num_tiles
    for step in range(acc_steps):
        cs = g.add_compute_set(f"step{step}")
        base = "poplin::AmpPartialAcc" if step else "poplin::AmpPartial"
        g.add_vertices(cs, f"{base}<half,float,1x{m}x{k}x{n}>", fields, tiles)
        s.prog.add(poplar.Execute(cs))
    av = RNG.standard_normal((I * m, Kn * k)).astype(np.float16)
    bv = RNG.standard_normal((Kn * k, J * n)).astype(np.float16)
    got = s.run({"a": (A, av), "b": (B, bv)}, {"p": P})["p"]
    a64, b64 = av.astype(np.float64), bv.astype(np.float64)
    want = np.stack([a64[:, i * k : (i + 1) * k] @ b64[i * k : (i + 1) * k] for i in range(Kn)])
    return got, acc_steps * want


def _segments(a, b, c):
    per = [int(np.prod(t.shape[4:])) for t in (a, b, c)]
    n = int(np.prod(a.shape[:4]))
    return {name: poplar.Segments(t, [p] * n) for name, t, p in zip("abc", (a, b, c), per)}


def _concatenated(a, b, c):
    """The same fields as concatenations of per-vertex blocks (address copies)."""
    out = {}
    for name, t in zip("abc", (a, b, c)):
        per = int(np.prod(t.shape[4:]))
        blocks = list(t.reshape((t.num_elements // per, per)))
        out[name] = poplar.Segments(poplar.concat(blocks, 0), [blocks[0].shape[0]] * len(blocks))
    return out


@pytest.mark.parametrize("grid", [(1, 2, 3, 2), (1, 1, 4, 1), (1, 3, 1, 2)])
def test_block_products_of_a_grid_run_zero_copy(session, spy, grid):
    got, want = _grid_products(session(tiles=16), grid, (5, 16, 8), _segments)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (a,) = spy
    assert a.base is not None and not a.flags.owndata  # a view of device memory
    J = a.shape[3]
    assert J == 1 or a.strides[3] == 0  # every A block read in place by its J readers


def test_gathered_fields_and_accumulation_give_the_same_numbers(session, spy, monkeypatch):
    # concatenated blocks whose addresses still step evenly would be found to be views, and
    # blocks read by several vertices gathered once: turn both off to exercise the gathered
    # path
    monkeypatch.setattr("tremula.engine.group.numeric_affine", lambda *a, **k: None)
    monkeypatch.setattr("tremula.engine.group.CompiledGroup._repeats", lambda *a, **k: None)
    got, want = _grid_products(session(tiles=16), (1, 2, 3, 2), (5, 16, 8), _concatenated, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not spy  # copies of the blocks: stacked products, no whole-matrix product


def test_gathered_blocks_read_by_several_vertices_are_gathered_once(session, spy, monkeypatch):
    """A gathered operand whose blocks repeat along the grid (each A block read by the J
    vertices of its row, each B block by the I of its column) is read once per distinct
    block and broadcast with zero strides: one whole-matrix product, the same numbers."""
    monkeypatch.setattr("tremula.engine.group.numeric_affine", lambda *a, **k: None)
    got, want = _grid_products(session(tiles=16), (1, 2, 3, 2), (5, 16, 8), _concatenated, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert spy  # the whole-matrix product ran
    a = spy[0]
    assert a.strides[3] == 0  # [R, G, I, J, K, ...]: the A blocks repeat along J unread


def test_a_grid_state_that_does_not_match_still_computes_every_block(session):
    """The grid states are a hint: wrong ones make each vertex a product of its own."""
    s = session(tiles=16)
    got, want = _grid_products(s, (1, 2, 3, 2), (4, 16, 8), _segments, states=(1, 1, 1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_reduce_partials_over_a_grid_with_cast_and_accumulate(session):
    """Pieces of 3 rows of ``[2, 6, 4]`` partials of a ``[6, 4]`` output; a second type
    (``.1``) adds ``scale`` times the sums to an accumulator."""
    s = session(tiles=4)
    g = s.graph
    util.ensure_codelets(g, poplin.CODELETS)
    p = g.add_variable(poplar.FLOAT, (2, 6, 4), "p", mapping="linear")
    out = g.add_variable(poplar.HALF, (6, 4), "out", mapping="linear")
    acc = g.add_variable(poplar.FLOAT, (6, 4), "acc", mapping="linear")
    pieces = p.reshape((2, 2, 3, 4)).dim_shuffle((1, 0, 2, 3))  # [piece, partial, 3, 4]
    cs = g.add_compute_set("reduce")
    grid = dict(zip(cl.GRID, (1, 1, 1, 2)))
    for vtype, dst, extra in (
        ("poplin::ReducePartials<float,half,2x1x3x4>", out, {}),
        ("poplin::ReducePartialsAcc<float,float,2x1x3x4.1>", acc, {"scale": [0.5, -2.0]}),
    ):
        fields = {
            "partials": poplar.Segments(pieces, [24, 24]),
            "out": poplar.Segments(dst.reshape((2, 3, 4)), [12, 12]),
            **grid,
            **extra,
        }
        g.add_vertices(cs, vtype, fields, [0, 3])
    s.prog.add(poplar.Execute(cs))
    P = RNG.standard_normal((2, 6, 4)).astype(np.float32)
    ACC = RNG.standard_normal((6, 4)).astype(np.float32)
    got = s.run({"p": (p, P), "acc": (acc, ACC)}, {"out": out, "acc": acc})
    sums = P.sum(axis=0)
    np.testing.assert_allclose(got["out"], sums.astype(np.float16), rtol=1e-3, atol=1e-3)
    scale = np.repeat([0.5, -2.0], 3)[:, None]
    np.testing.assert_allclose(got["acc"], ACC + scale * sums, rtol=1e-6, atol=1e-6)


sizes = st.integers(1, 700)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 4),
    sizes,
    sizes,
    sizes,
    st.sampled_from([(2, 4), (2, 2), (4, 4)]),
    st.sampled_from(["ipu1", "ipu2", "bow"]),
)
def test_amp_estimator_never_beats_the_peak_and_grows_with_work(g, m, k, n, types, version):
    t = targets.preset(version)
    in_size, p_size = types
    cyc = int(est.amp_cycles(t, in_size, p_size, g, m, k, n))
    assert cyc >= g * m * k * n / t.max_macs_per_cycle_per_tile(in_size, p_size)
    for dm, dk, dn in ((1, 0, 0), (0, 16, 0), (0, 0, 16)):
        assert est.amp_cycles(t, in_size, p_size, g, m + dm, k + dk, n + dn) >= cyc


@settings(max_examples=100, deadline=None)
@given(sizes, sizes, sizes, st.sampled_from([2, 4]))
def test_mac_estimator_is_slower_than_the_amp_peak(m, k, n, in_size):
    t = targets.ipu2()
    cyc = int(est.mac_cycles(t, in_size, False, 1, m, k, n))
    assert cyc >= m * k * n / t.max_macs_per_cycle_per_tile(in_size)


@pytest.mark.parametrize(
    "n_out, depth, sizes, accumulate, want",
    [
        # spec 3.6 "Reduce", float partials: 6 x (32 + (3 depth + 7) ceil(ceil(n/4) / 6))
        (180, 16, (4, 2), False, 6 * (32 + (3 * 16 + 7) * 8)),  # 45 loops, 8 per worker
        (12, 32, (4, 4), False, 6 * (32 + (3 * 32 + 7) * 1)),
        (24, 2, (4, 4), True, 6 * (32 + (3 * 2 + 7 + 1) * 1)),  # += scale x sum
        # half partials: 8 outputs per loop, 8 (half out) / 9 (float out) besides partials
        (96, 4, (2, 2), False, 6 * (32 + (3 * 4 + 8) * 2)),
        (96, 4, (2, 4), False, 6 * (32 + (3 * 4 + 9) * 2)),
    ],
)
def test_reduce_estimator_is_poplibs_reduce_add(n_out, depth, sizes, accumulate, want):
    """Stage 2 sums the partials with PopLibs' ReduceAdd shape (the conv reduction of
    spec 3.6), hand-computed here."""
    assert int(est.reduce_cycles(targets.ipu2(), n_out, depth, *sizes, accumulate)) == want


def test_flops_in_the_profile(session):
    s = session(tiles=16)
    a = s.graph.add_variable(poplar.FLOAT, (24, 40), "a", mapping="linear")
    b = s.graph.add_variable(poplar.FLOAT, (40, 16), "b", mapping="linear")
    c = poplin.matmul(s.graph, a, b, s.prog)
    s.run({}, {"c": c})
    sp = s.engine.step_plan
    groups = [grp for ccs in sp.compute_sets for grp in ccs.groups]
    amp = sum(float(grp.flops.sum()) for grp in groups if "Partial<" in grp.vertex_type.name)
    assert amp == 2 * 24 * 40 * 16


@pytest.mark.parametrize("m, k, n", [(4, 16, 24), (24, 16, 4)])
def test_two_d_products_by_a_transposed_operand(m, k, n):
    """The prepared 2-D product: by a transposed ``b`` (short-and-wide ``a``: computed as
    ``(b^T a^T)^T``) or directly; later calls read the operands' new values."""
    rng = np.random.default_rng(2)
    a = np.empty((m, k), np.float32)
    w = np.empty((n, k), np.float32)  # b = w.T, an F-contiguous view
    c = np.empty((m, n), np.float32)
    run = cl._product_2d(a, w.T, c)
    for _ in range(2):
        a[...] = rng.standard_normal(a.shape)
        w[...] = rng.standard_normal(w.shape)
        run()
        np.testing.assert_allclose(c, a.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)


def test_prepared_reductions_read_new_partials_on_every_run(session, monkeypatch):
    """``ReducePartials.prepare``: the sums over views of device memory made on the first
    run serve later runs with new partials, bit for bit the sums of the partials in their
    order (float32; the cast to half; ``out += scale * sums``)."""
    prepared: list[str] = []
    real = cl.ReducePartials.prepare.__func__

    def spy(cls, v):
        fast = real(cls, v)
        if fast is not None:
            prepared.append(v.vertex_type.name)
        return fast

    monkeypatch.setattr(cl.ReducePartials, "prepare", classmethod(spy))
    s = session(tiles=4)
    g = s.graph
    util.ensure_codelets(g, poplin.CODELETS)
    p = g.add_variable(poplar.FLOAT, (3, 4, 8), "p", mapping="linear")
    outs = {
        "f": g.add_variable(poplar.FLOAT, (4, 8), "f", mapping="linear"),
        "h": g.add_variable(poplar.HALF, (4, 8), "h", mapping="linear"),
        "acc": g.add_variable(poplar.FLOAT, (4, 8), "acc", mapping="linear"),
    }
    pieces = p.reshape((3, 2, 2, 8)).dim_shuffle((1, 0, 2, 3))  # [piece, partial, 2, 8]
    cs = g.add_compute_set("reduce")
    grid = dict(zip(cl.GRID, (1, 1, 1, 2)))
    for i, (vtype, key, extra) in enumerate(
        (
            ("ReducePartials<float,float", "f", {}),
            ("ReducePartials<float,half", "h", {}),
            ("ReducePartialsAcc<float,float", "acc", {"scale": [0.5, 0.5]}),
        )
    ):
        out = outs[key].reshape((2, 2, 8))
        fields = {"partials": pieces, "out": out, **grid, **extra}
        g.add_vertices(cs, f"poplin::{vtype},3x1x2x8.{i}>", fields, [0, 2])
    s.prog.add(poplar.Execute(cs))
    s.run({"p": (p, np.zeros((3, 4, 8), np.float32))}, outs)
    assert len(prepared) == 3  # every type runs over views
    engine, acc = s.engine, np.zeros((4, 8), np.float32)
    for _ in range(3):
        P = RNG.standard_normal((3, 4, 8)).astype(np.float32)
        engine.write_tensor("p", P)
        engine.run()
        sums = (P[0] + P[1]) + P[2]
        acc = acc + np.float32(0.5) * sums
        np.testing.assert_array_equal(engine.read_tensor("read_f"), sums)
        np.testing.assert_array_equal(engine.read_tensor("read_h"), sums.astype(np.float16))
        np.testing.assert_array_equal(engine.read_tensor("read_acc"), acc)


def _copied_operands(a, b, c):
    """Operands as concatenations (address copies), partials in place (an output must be
    a view of device memory for a prepared run)."""
    return {**_concatenated(a, b, c), "c": _segments(a, b, c)["c"]}


@pytest.mark.parametrize("repeats", [True, False], ids=["repeated", "gathered"])
@pytest.mark.parametrize("connect", [_segments, _copied_operands], ids=["views", "copies"])
def test_prepared_products_give_the_bits_of_compute(session, monkeypatch, connect, repeats):
    """``_Partial.prepare`` over every kind of operand (views of device memory, blocks
    gathered once and broadcast, whole gathered fields: kept buffers refilled each run)
    and every path (stacked, whole-matrix with and without copies, accumulating): the
    bits of ``compute`` over the same data."""
    monkeypatch.setattr("tremula.engine.group.numeric_affine", lambda *a, **k: None)
    if not repeats:
        monkeypatch.setattr("tremula.engine.group.CompiledGroup._repeats", lambda *a, **k: None)
    made: list[bool] = []
    real = cl._Partial.prepare.__func__

    def spy(cls, v):
        fast = real(cls, v)
        made.append(fast is not None)
        return fast

    monkeypatch.setattr(cl._Partial, "prepare", classmethod(spy))
    results = []
    for prepared in (True, False):
        if not prepared:
            monkeypatch.setattr(cl._Partial, "prepare", None)
        monkeypatch.setitem(globals(), "RNG", np.random.default_rng(3))  # the same operands
        results.append(_grid_products(session(tiles=16), (1, 2, 3, 2), (5, 16, 8), connect, 2))
    assert made and all(made)  # every product ran prepared in the first pass
    (got, want), (plain, _) = results
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got.tobytes() == plain.tobytes()


def _strided(base: np.ndarray, shape, strides) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(base, shape, [x * base.itemsize for x in strides])


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("partials", [3, 8, 9, 16])
@pytest.mark.parametrize("adjacent", [False, True])
@pytest.mark.parametrize("blocks", [False, True])
def test_reductions_through_a_buffer_equal_reductions_in_place(dtype, partials, adjacent, blocks):
    """``_reduce_into``: a strided output (blocks of a matrix) reduced in chunks through a
    buffer in its memory order holds the bits of ``np.add.reduce`` straight into it,
    whether the partials lie slab after slab (summed one after another) or next to each
    other (NumPy's pairwise sum from 8 on), for outputs in row order or block by block."""
    rng = np.random.default_rng(partials)
    rows, cols, bn, bc = 300, 80, 20, 4  # a [300, 80] matrix: 20 column blocks of 4
    size = rows * cols
    store = (rng.standard_normal(size * partials + size + 20 * bn + 64) * 1e4).astype(dtype)
    if adjacent:  # [rows, cols, partial]
        row, block, col, part = cols * partials, bc * partials, partials, 1
    else:  # [partial, rows, cols]
        row, block, col, part = cols, bc, 1, size
    # ReducePartials' views: [replica, *grid (g, m, n, k), partial, g, rows, cols]
    shape = (1, 1, 1, bn, 1, partials, 1, rows, bc)
    parts = _strided(store, shape, [0, 0, 0, block, 0, part, 0, row, col])
    base = store[size * partials + 64 :]
    out_strides = [0, 0, 0, rows * bc + 20, 0, 0, bc, 1] if blocks else [0, 0, 0, bc, 0, 0, cols, 1]
    out = _strided(base, (1, 1, 1, bn, 1, 1, rows, bc), out_strides)
    assert not out.flags.c_contiguous
    np.add.reduce(parts, axis=5, out=out)  # the reduction in place
    want = out.copy()
    old = cl.MIN_BUFFERED_BYTES, cl.CHUNK_BYTES
    try:
        cl.MIN_BUFFERED_BYTES, cl.CHUNK_BYTES = 1, 4096  # chunks of 1024 elements
        run = cl._reduce_into(parts, out)
    finally:
        cl.MIN_BUFFERED_BYTES, cl.CHUNK_BYTES = old
    assert run is not None
    out[...] = 0
    run()
    assert out.tobytes() == want.tobytes()
    if dtype == np.float32:
        np.testing.assert_allclose(out, parts.astype(np.float64).sum(axis=5), rtol=1e-5, atol=0.1)


def test_outputs_sharing_memory_with_their_partials_reduce_in_place():
    """A chunk's copy could overwrite partials a later chunk reads: no buffer then."""
    store = np.zeros(4096, np.float32)
    parts = _strided(store, (1, 1, 1, 1, 1, 2, 1, 32, 32), [0, 0, 0, 0, 0, 1024, 0, 32, 1])
    out = _strided(store[1024:], (1, 1, 1, 1, 1, 32, 16), [0, 0, 0, 0, 0, 32, 1])
    old = cl.MIN_BUFFERED_BYTES
    try:
        cl.MIN_BUFFERED_BYTES = 1
        assert cl._reduce_into(parts, out) is None
    finally:
        cl.MIN_BUFFERED_BYTES = old
