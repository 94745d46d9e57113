"""popops slicing against NumPy: dynamic slice / update at runtime offsets (wrapping
around), multi-slice / update / update-add with out-of-range and duplicate indices, the
partition planner's properties, the scatter-add kernel, and bad input."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tremula import poplar
from tremula.errors import GraphError, TensorError
from tremula.libs.popops.codelets.slicing import scatter_add, stable_argsort
from tremula.libs.popops.slicing import (
    create_sliceable_tensor,
    dynamic_slice,
    dynamic_update,
    multi_slice,
    multi_update,
    multi_update_add,
    multi_update_op,
)
from tremula.libs.popops.slicing_plan import plan_multi


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
Rig, graph_size = H.Rig, H.graph_size
RNG = np.random.default_rng(11)


def wrapped(offset: int, size: int, dim_size: int) -> np.ndarray:
    return (offset + np.arange(size)) % dim_size


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_dynamic_slice_wraps_offsets_around(dtype) -> None:
    rig = Rig(tiles=16)
    x = (RNG.standard_normal((9, 7, 5)) * 10).astype(dtype)
    t = rig.input(x)
    off = rig.input(np.zeros(2, np.uint32))
    (out,) = [dynamic_slice(rig.graph, t, off, [0, 2], [4, 3], rig.prog)]
    for o in ([0, 0], [2, 1], [7, 4], [11, 9], [2**32 - 1, 5]):
        rig.feeds["in1"] = np.array(o, np.uint32)
        (got,) = rig.run([out])
        want = x[wrapped(o[0], 4, 9)][:, :, wrapped(o[1], 3, 5)]
        np.testing.assert_array_equal(got, want)


def test_dynamic_slice_with_a_signed_offset_and_a_whole_dimension() -> None:
    rig = Rig(tiles=4)
    x = RNG.standard_normal((6, 10)).astype(np.float32)
    t = rig.input(x)
    off = rig.input(np.array([-3], np.int32))
    out = dynamic_slice(rig.graph, t, off, [1], [10], rig.prog)
    (got,) = rig.run([out])
    np.testing.assert_array_equal(got, x[:, (np.arange(10) - 3) % 10])


def test_dynamic_update_of_two_dimensions() -> None:
    rig = Rig(tiles=16)
    x = RNG.standard_normal((9, 7, 5)).astype(np.float32)
    s = RNG.standard_normal((4, 7, 3)).astype(np.float32)
    t = rig.input(x)
    sub = rig.input(s)
    off = rig.input(np.array([7, 4], np.uint32))
    dynamic_update(rig.graph, t, sub, off, [0, 2], [4, 3], rig.prog)
    rig.run()
    want = x.copy()
    want[np.ix_(wrapped(7, 4, 9), np.arange(7), wrapped(4, 3, 5))] = s
    np.testing.assert_array_equal(rig.read(0), want)


def test_updates_read_operands_that_share_elements_with_the_target_before_writing() -> None:
    """Was: an update, index or scale that views the tensor being updated was read by the
    compute set writing it, and the graph failed verification (PopXL's ``dynamic_update_``
    and ``sparse_accumulate_`` with views of the updated tensor)."""
    rig = Rig(tiles=4)
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    t, u = rig.input(x), rig.input(x)
    off = rig.input(np.array([3], np.uint32))
    dynamic_update(rig.graph, t, t[1:3], off, [0], [2], rig.prog)  # t[3:5] = t[1:3]
    idx = rig.input(np.array([5, 0], np.int32))
    multi_update_add(rig.graph, u, idx, u[1:3], u[2, 1], rig.prog)  # u[5], u[0] += u[2,1] u[1:3]
    k = np.arange(6, dtype=np.int32).reshape(3, 2)
    ti = rig.input(k)
    multi_update(rig.graph, ti, ti[0], ti[1:], rig.prog)  # ti[0], ti[1] = ti[1], ti[2]
    rig.run()
    want = x.copy()
    want[3:5] = x[1:3]
    np.testing.assert_array_equal(rig.read(0), want)
    want = x.copy()
    want[[5, 0]] += x[2, 1] * x[1:3]
    np.testing.assert_array_equal(rig.read(1), want)
    np.testing.assert_array_equal(rig.read(4), np.array([[2, 3], [4, 5], [4, 5]], np.int32))


@pytest.mark.parametrize("tiles", [1, 4, 16])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.bool_])
def test_multi_slice_gathers_rows_and_zeros_out_of_range(tiles: int, dtype) -> None:
    rig = Rig(tiles=tiles)
    table = (RNG.standard_normal((50, 3, 2)) * 5).astype(dtype)
    idx = RNG.integers(-5, 56, 40).astype(np.int32)
    idx[:4] = [0, 49, 50, -1]
    t = rig.input(table)
    i = rig.input(idx.reshape(40, 1))
    (got,) = rig.run([multi_slice(rig.graph, t, i, rig.prog)])
    ok = (idx >= 0) & (idx < 50)
    want = np.where(ok[:, None, None], table[np.clip(idx, 0, 49)], np.zeros((), dtype))
    np.testing.assert_array_equal(got, want)
    assert got.dtype == dtype and got.shape == (40, 3, 2)


def test_multi_slice_over_partitions_keeps_values_exact() -> None:
    rig = Rig(tiles=16)
    table = RNG.standard_normal((64, 4)).astype(np.float32)
    table[5] = [np.inf, -np.inf, np.nan, 1e-38]
    t = rig.input(table)
    idx = rig.input(np.array([5, 63, 0, 64, 5], np.uint32))
    out = multi_slice(rig.graph, t, idx, rig.prog, name="gather")
    assert rig.compute_sets("gather/combine")  # several partitions were combined
    (got,) = rig.run([out])
    np.testing.assert_array_equal(got[[0, 4]], table[[5, 5]])
    np.testing.assert_array_equal(got[[1, 2]], table[[63, 0]])
    assert np.all(got[3] == 0) and not np.any(np.signbit(got[3]))


@pytest.mark.parametrize("tiles", [1, 16])
def test_multi_update_last_duplicate_wins_and_out_of_range_is_ignored(tiles: int) -> None:
    rig = Rig(tiles=tiles)
    table = RNG.standard_normal((30, 4)).astype(np.float32)
    idx = np.array([3, 7, 3, 30, -2, 29, 7, 0], np.int32)
    rows = RNG.standard_normal((8, 4)).astype(np.float32)
    t = rig.input(table)
    multi_update(rig.graph, t, rig.input(idx), rig.input(rows), rig.prog)
    rig.run()
    want = table.copy()
    for k, i in enumerate(idx):
        if 0 <= i < 30:
            want[i] = rows[k]
    np.testing.assert_array_equal(rig.read(0), want)


@pytest.mark.parametrize("tiles", [1, 4, 16])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_multi_update_add_accumulates_duplicates(tiles: int, dtype) -> None:
    rig = Rig(tiles=tiles)
    table = (RNG.standard_normal((40, 5)) * 4).astype(dtype)
    idx = RNG.integers(-3, 12, 200).astype(np.int32)  # many duplicates, some out of range
    rows = (RNG.standard_normal((200, 5)) * 4).astype(dtype)
    t = rig.input(table)
    scale = 2 if dtype == np.int32 else 0.5
    multi_update_add(rig.graph, t, rig.input(idx), rig.input(rows), scale, rig.prog)
    rig.run()
    ok = (idx >= 0) & (idx < 40)
    want = table.astype(np.float64)
    np.add.at(want, idx[ok], scale * rows[ok].astype(np.float64))
    tol = 2e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(rig.read(0), want.astype(dtype), rtol=tol, atol=tol)


@pytest.mark.parametrize("tiles", [1, 4, 16])
@pytest.mark.parametrize("op", ["MAX", "MIN", "MUL"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_multi_update_op_combines_duplicates_in_turn(tiles: int, op: str, dtype) -> None:
    rig = Rig(tiles=tiles)
    table = RNG.integers(-4, 5, (30, 3)).astype(dtype)
    idx = RNG.integers(-2, 33, 90).astype(np.int32)  # duplicates, some out of range
    rows = RNG.integers(-3, 4, (90, 3)).astype(dtype)
    t = rig.input(table)
    multi_update_op(rig.graph, t, rig.input(idx), rig.input(rows), op.lower(), rig.prog)
    rig.run()
    want = table.copy()
    combine = {"MAX": max, "MIN": min, "MUL": lambda a, b: a * b}[op]
    for i, row in zip(idx, rows):  # one update after the other
        if 0 <= i < 30:
            want[i] = [combine(a, b) for a, b in zip(want[i], row)]
    np.testing.assert_array_equal(rig.read(0), want)


def test_multi_update_op_errors_leave_the_graph_unchanged() -> None:
    rig = Rig(tiles=4)
    t = rig.input(np.zeros((4, 2), np.float32))
    idx, rows = rig.input(np.zeros(3, np.int32)), rig.input(np.zeros((3, 2), np.float32))
    n_cs = len(rig.graph.state.compute_sets)
    with pytest.raises(GraphError, match="op 'ADD' is not one of"):
        multi_update_op(rig.graph, t, idx, rows, "add", rig.prog)
    flags = rig.input(np.zeros((4, 2), bool))
    with pytest.raises(GraphError, match="bool table"):
        multi_update_op(rig.graph, flags, idx, rig.input(np.zeros((3, 2), bool)), "max", rig.prog)
    assert len(rig.graph.state.compute_sets) == n_cs


def test_multi_update_add_with_a_scale_tensor_and_unsigned_indices() -> None:
    rig = Rig(tiles=4)
    table = np.zeros((10, 3), np.float16)
    idx = np.array([1, 1, 9, 12], np.uint32)
    rows = np.ones((4, 3), np.float16)
    t = rig.input(table)
    scale = rig.input(np.array([-1.5], np.float32))
    multi_update_add(rig.graph, t, rig.input(idx), rig.input(rows), scale, rig.prog)
    rig.run()
    want = np.zeros((10, 3), np.float16)
    want[1], want[9] = -3.0, -1.5
    np.testing.assert_array_equal(rig.read(0), want)


def test_sliceable_tensor_keeps_rows_whole() -> None:
    rig = Rig(tiles=4)
    t = create_sliceable_tensor(rig.graph, poplar.FLOAT, (10, 6), "table")
    tiles = rig.graph.tiles_of(t)
    assert np.all(tiles == tiles[:, :1])


def test_scatter_add_matches_add_at_with_heavy_hitters() -> None:
    table = RNG.standard_normal((100, 8)).astype(np.float32)
    dest = np.concatenate([np.full(300, 7), RNG.integers(0, 100, 500)])
    updates = RNG.standard_normal((800, 8)).astype(np.float32)
    src = RNG.permutation(800)
    got = table.copy()
    scatter_add(got, updates, dest, src, np.full(800, 0.25))
    want = table.astype(np.float64)
    np.add.at(want, dest, 0.25 * updates[src].astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**33), max_size=60))
def test_stable_argsort_is_a_stable_sort(keys) -> None:
    keys = np.array(keys, dtype=np.int64)
    np.testing.assert_array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=40),
    st.integers(1, 16),
    st.integers(0, 300),
    st.sampled_from(["slice", "update"]),
)
def test_partitions_cover_the_rows_in_order(row_tiles, E, n, kind) -> None:
    target = poplar.IPUModel(tiles_per_ipu=8).create_target()
    row_tiles = np.sort(np.array(row_tiles))
    plan = plan_multi(row_tiles, E, 4, n, kind, target)
    assert plan.row_starts[0] == 0 and plan.row_starts[-1] == row_tiles.size
    assert np.all(np.diff(plan.row_starts) > 0)
    assert plan.index_starts[0] == 0 and plan.index_starts[-1] == n
    assert plan.vertex_tiles.shape == (plan.partitions, plan.groups)
    if kind == "slice":  # each vertex runs on a tile holding rows of its partition
        for p in range(plan.partitions):
            held = set(row_tiles[plan.row_starts[p] : plan.row_starts[p + 1]].tolist())
            assert set(plan.vertex_tiles[p].tolist()) <= held
    assert repr(plan) == repr(plan_multi(row_tiles, E, 4, n, kind, target))


def test_bad_input_names_the_problem_and_leaves_the_graph() -> None:
    rig = Rig(tiles=4)
    g = rig.graph
    x = rig.input(np.zeros((6, 4), np.float32))
    off = rig.input(np.zeros(1, np.uint32))
    foff = rig.input(np.zeros(1, np.float32))
    idx = rig.input(np.zeros(5, np.int32))
    fidx = rig.input(np.zeros(5, np.float32))
    rows = rig.input(np.zeros((5, 4), np.float32))
    idx2 = rig.input(np.zeros((5, 2), np.int32))
    before = graph_size(g)
    cases = [
        (lambda: dynamic_slice(g, x, off, [2], [1], rig.prog), "dimension 2 in dims [2]"),
        (lambda: dynamic_slice(g, x, off, [0], [7], rig.prog), "size 7 for dimension 0"),
        (lambda: dynamic_slice(g, x, off, [0, 1], [1, 1], rig.prog), "expected one per"),
        (lambda: dynamic_slice(g, x, foff, [0], [1], rig.prog), "offset must be of type"),
        (lambda: dynamic_slice(g, x, off, [0, 0], [1, 1], rig.prog), "repeat a dimension"),
        (lambda: dynamic_update(g, x, rows, off, [0], [2], rig.prog), "expected float (2, 4)"),
        (lambda: multi_slice(g, x, fidx, rig.prog), "indices must be of an integer type"),
        (lambda: multi_slice(g, x, idx2, rig.prog), "indices must have shape [n] or [n, 1]"),
        (lambda: multi_update(g, x, idx, rows[:4], rig.prog), "expected float (5, 4)"),
        (lambda: multi_update_add(g, x, idx, rows, "2", rig.prog), "scale must be a number"),
        (lambda: multi_update_add(g, x, idx, rows, off, rig.prog), "one-element tensor"),
    ]
    for call, message in cases:
        with pytest.raises(GraphError) as err:
            call()
        assert message in str(err.value)
    twice = poplar.concat([x, x])  # an element would be written twice
    for call in (
        lambda: dynamic_update(g, twice, rows[:2], off, [0], [2], rig.prog),
        lambda: multi_update(g, twice, idx, rows, rig.prog),
        lambda: multi_update_add(g, twice, idx, rows, 1.0, rig.prog),
    ):
        with pytest.raises(TensorError, match="has aliased elements"):
            call()
    assert graph_size(g) == before


def test_replicas_slice_and_scatter_with_their_own_offsets_and_indices() -> None:
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target, replication_factor=2)
    prog = poplar.Sequence()
    x = g.add_variable(poplar.FLOAT, (6, 5), "x", mapping="linear")
    off = g.add_variable(poplar.UNSIGNED_INT, (1,), "off", mapping="linear")
    table = g.add_variable(poplar.FLOAT, (8, 3), "table", mapping="linear")
    idx = g.add_variable(poplar.INT, (4,), "idx", mapping="linear")
    rows = g.add_variable(poplar.FLOAT, (4, 3), "rows", mapping="linear")
    y = dynamic_slice(g, x, off, [0], [2], prog)
    gathered = multi_slice(g, table, idx, prog)
    multi_update_add(g, table, idx, rows, 1.0, prog)
    for name, t in (("x", x), ("off", off), ("table", table), ("idx", idx), ("rows", rows)):
        g.create_host_write(name, t)
    for name, t in (("y", y), ("gathered", gathered), ("table_out", table)):
        g.create_host_read(name, t)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    xs = RNG.standard_normal((2, 6, 5)).astype(np.float32)
    tab = RNG.standard_normal((2, 8, 3)).astype(np.float32)
    ids = np.array([[1, 1, 7, 9], [0, 3, 3, 3]], np.int32)
    upd = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    offs = np.array([[5], [2]], np.uint32)
    for name, data in (("x", xs), ("off", offs), ("table", tab), ("idx", ids), ("rows", upd)):
        engine.write_tensor(name, data)
    engine.run(0)
    H.validate_engine(engine)
    for r in range(2):
        np.testing.assert_array_equal(engine.read_tensor("y")[r], xs[r][wrapped(offs[r, 0], 2, 6)])
        ok = ids[r] < 8
        want_g = np.where(ok[:, None], tab[r][np.minimum(ids[r], 7)], 0)
        np.testing.assert_array_equal(engine.read_tensor("gathered")[r], want_g)
        want_t = tab[r].copy()
        np.add.at(want_t, ids[r][ok], upd[r][ok])
        np.testing.assert_allclose(engine.read_tensor("table_out")[r], want_t, rtol=1e-6)


def test_prepared_dynamic_slices_follow_each_replicas_offset_run_after_run(monkeypatch) -> None:
    """The prepared copies of dynamic slice / update (one offset tensor): runs that move
    the offsets together (one copy for the replicas) and apart (one per replica), into an
    output view and from a transposed ``sub`` (copied by address), through slices where
    the rows are one run of memory and index arrays where they wrap, equal NumPy's."""
    from tremula.libs.popops.codelets import dynamic_slice as codelets

    prepared: list[str] = []
    real = codelets._prepare_dynamic

    def spy(update: bool):
        inner = real(update)

        def prepare(v):
            fast = inner(v)
            prepared.append(v.vertex_type.name if fast is not None else "none")
            return fast

        return prepare

    for cls, update in ((codelets.DynamicSlice, False), (codelets.DynamicUpdate, True)):
        monkeypatch.setattr(cls, "prepare", staticmethod(spy(update)))
    kinds: set[str] = set()  # the copies' indices: slices of consecutive rows, else arrays
    as_slice = codelets._as_slice

    def seen(addresses):
        found = as_slice(addresses)
        kinds.add(type(found).__name__)
        return found

    monkeypatch.setattr(codelets, "_as_slice", seen)
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target, replication_factor=2)
    prog = poplar.Sequence()
    x = g.add_variable(poplar.FLOAT, (6, 5), "x", mapping="linear")
    off = g.add_variable(poplar.UNSIGNED_INT, (1,), "off", mapping="linear")
    s = g.add_variable(poplar.FLOAT, (5, 2), "s", mapping="linear")  # sub = s.T
    y = dynamic_slice(g, x, off, [0], [2], prog)
    dynamic_update(g, x, s.transpose(), off, [0], [2], prog)
    for name, t in (("x", x), ("off", off), ("s", s)):
        g.create_host_write(name, t)
    for name, t in (("y", y), ("x_out", x)):
        g.create_host_read(name, t)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    for offs in ([[5], [5]], [[5], [2]], [[0], [3]], [[4], [4]]):
        xs = RNG.standard_normal((2, 6, 5)).astype(np.float32)
        ss = RNG.standard_normal((2, 5, 2)).astype(np.float32)
        offs_arr = np.array(offs, np.uint32)
        for name, data in (("x", xs), ("off", offs_arr), ("s", ss)):
            engine.write_tensor(name, data)
        engine.run(0)
        for r in range(2):
            rows = wrapped(int(offs_arr[r, 0]), 2, 6)
            np.testing.assert_array_equal(engine.read_tensor("y")[r], xs[r][rows])
            want = xs[r].copy()
            want[rows] = ss[r].T
            np.testing.assert_array_equal(engine.read_tensor("x_out")[r], want)
    assert sorted(prepared) == ["popops::DynamicSlice<float>", "popops::DynamicUpdate<float>"]
    assert kinds == {"slice", "ndarray"}  # rows 5, 0 wrap: not one run


def test_prepared_dynamic_slices_copy_strided_blocks_at_every_offset(monkeypatch) -> None:
    """One replica, a loop counter's offset: a dynamic slice of rows whose elements are a
    column block of a wider matrix (16 runs stepping evenly: one strided block) and an
    update from a concatenation of two tensors (a block each) copy through
    ``poplar.blocks`` at each offset, run after run, and through addresses where blocks
    do not pay (a wrapped update); equal to NumPy."""
    from tremula.libs.popops.codelets import dynamic_slice as codelets

    made: list[bool] = []
    real = codelets.blocks.copier

    def spy(*args):
        found = real(*args)
        made.append(found is not None)
        return found

    monkeypatch.setattr(codelets.blocks, "copier", spy)
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    prog = poplar.Sequence()
    wide = g.add_variable(poplar.FLOAT, (6, 16, 96), "wide", mapping="linear")
    x = wide[:, :, 16:80]  # [6, 16, 64]: each row's 16 runs of 64 step by 96
    off = g.add_variable(poplar.UNSIGNED_INT, (1,), "off", mapping="linear")
    a = g.add_variable(poplar.FLOAT, (2, 16, 40), "a", mapping="linear")
    b = g.add_variable(poplar.FLOAT, (2, 16, 24), "b", mapping="linear")
    y = dynamic_slice(g, x, off, [0], [2], prog)
    dynamic_update(g, x, poplar.concat([a, b], 2), off, [0], [2], prog)
    for name, t in (("wide", wide), ("off", off), ("a", a), ("b", b)):
        g.create_host_write(name, t)
    for name, t in (("y", y), ("wide_out", wide)):
        g.create_host_read(name, t)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    for o in (0, 3, 5, 3, 11, 0):
        ws = RNG.standard_normal((6, 16, 96)).astype(np.float32)
        av = RNG.standard_normal((2, 16, 40)).astype(np.float32)
        bv = RNG.standard_normal((2, 16, 24)).astype(np.float32)
        offs = np.array([o], np.uint32)
        for name, data in (("wide", ws), ("off", offs), ("a", av), ("b", bv)):
            engine.write_tensor(name, data)
        engine.run(0)
        rows = wrapped(o, 2, 6)
        np.testing.assert_array_equal(engine.read_tensor("y"), ws[rows, :, 16:80])
        want = ws.copy()
        want[rows, :, 16:80] = np.concatenate([av, bv], axis=2)
        np.testing.assert_array_equal(engine.read_tensor("wide_out"), want)
    # offsets 0 and 3 copy blocks both ways; a wrapped update (rows 5 and 0, two pieces
    # each) would need more blocks than pay and copies through its addresses
    assert made == [True, True, True, True, True, False, True, False]


def test_prepared_dynamic_slices_follow_a_reload_to_new_device_memory() -> None:
    """Loading an engine again gives it new device memory: the dynamic slice's copies kept
    per offset are made again over it (not those of the memory before), run after run."""
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    prog = poplar.Sequence()
    x = g.add_variable(poplar.FLOAT, (5, 8, 24), "x", mapping="linear")
    off = g.add_variable(poplar.UNSIGNED_INT, (1,), "off", mapping="linear")
    y = dynamic_slice(g, x[:, :, 4:20], off, [0], [1], prog)
    for name, t in (("x", x), ("off", off)):
        g.create_host_write(name, t)
    g.create_host_read("y", y)
    engine = poplar.Engine(g, prog)
    for _ in range(2):  # load, run at offsets seen before, load again, the same
        engine.load(device)
        for o in (2, 4, 2, 4):
            xs = RNG.standard_normal((5, 8, 24)).astype(np.float32)
            engine.write_tensor("x", xs)
            engine.write_tensor("off", np.array([o], np.uint32))
            engine.run(0)
            np.testing.assert_array_equal(engine.read_tensor("y"), xs[o : o + 1, :, 4:20])
