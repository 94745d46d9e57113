"""poplin.matmul and friends against NumPy: types, odd shapes, views, groups, accumulation,
options, created inputs, replication. Every engine's profiles are validated."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.engine import computeset
from tremula.libs import poplin
from tremula.poplar.batch import Batch

RNG = np.random.default_rng(1234)
SHAPES = [
    (1, 1, 1),
    (1, 7, 1),
    (1, 64, 50),
    (50, 64, 1),
    (3, 5, 7),
    (13, 1, 17),
    (31, 97, 3),
    (2, 300, 2),
    (64, 16, 64),
    (1, 1000, 1),
    (17, 19, 23),
]


def data(shape, dtype):
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(-50, 50, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def linear(s, dtype, shape, name):
    return s.graph.add_variable(dtype, shape, name, mapping="linear")


@pytest.mark.parametrize("dtype", [poplar.FLOAT, poplar.HALF])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_matches_numpy(session, close, dtype, shape):
    m, k, n = shape
    s = session(tiles=16)
    a, b = linear(s, dtype, (m, k), "a"), linear(s, dtype, (k, n), "b")
    c = poplin.matmul(s.graph, a, b, s.prog)
    assert c.shape == (m, n) and c.dtype is dtype
    A, B = data((m, k), dtype.numpy), data((k, n), dtype.numpy)
    got = s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"]
    close(got, A, B, dtype.numpy)


@pytest.mark.parametrize("shape", [(1, 1, 1), (13, 17, 11), (5, 200, 3), (40, 3, 40)])
def test_int_matmul_is_exact(session, close, shape):
    m, k, n = shape
    s = session(tiles=16)
    a, b = linear(s, poplar.INT, (m, k), "a"), linear(s, poplar.INT, (k, n), "b")
    c = poplin.matmul(s.graph, a, b, s.prog)
    assert poplin.matmul_plan(s.graph.target, poplar.INT, (m, k), (k, n)).method == "mac"
    A, B = data((m, k), np.int32), data((k, n), np.int32)
    close(s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"], A, B, np.int32)


@pytest.mark.parametrize("dtype", [poplar.FLOAT, poplar.HALF])
@pytest.mark.parametrize("which", ["a", "b", "both"])
def test_transposed_views(session, close, dtype, which):
    m, k, n = 23, 45, 12
    s = session(tiles=16)
    at, bt = which in ("a", "both"), which in ("b", "both")
    a = linear(s, dtype, (k, m) if at else (m, k), "a")
    b = linear(s, dtype, (n, k) if bt else (k, n), "b")
    c = poplin.matmul(s.graph, a.transpose() if at else a, b.transpose() if bt else b, s.prog)
    A, B = data(a.shape, dtype.numpy), data(b.shape, dtype.numpy)
    got = s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"]
    close(got, A.T if at else A, B.T if bt else B, dtype.numpy)


def test_sliced_and_strided_views(session, close):
    s = session(tiles=16)
    x = linear(s, poplar.FLOAT, (40, 60), "x")
    a = x[3:30:2, 5:50]  # [14, 45], strided rows
    b = x.transpose()[10:55, 7:16]  # [45, 9], a transposed window of the same variable
    c = poplin.matmul(s.graph, a, b, s.prog)
    X = data((40, 60), np.float32)
    got = s.run({"x": (x, X)}, {"c": c})["c"]
    close(got, X[3:30:2, 5:50], X.T[10:55, 7:16], np.float32)


@pytest.mark.parametrize("dtype", [poplar.FLOAT, poplar.HALF])
@pytest.mark.parametrize("shape", [(64, 64, 64), (1, 300, 200), (200, 300, 1), (37, 53, 29)])
def test_created_inputs_on_a_larger_target(session, close, dtype, shape):
    m, k, n = shape
    s = session(tiles=64)
    a = poplin.create_matmul_input_lhs(s.graph, dtype, (m, k), (k, n), "a")
    b = poplin.create_matmul_input_rhs(s.graph, dtype, (m, k), (k, n), "b")
    assert a.shape == (m, k) and b.shape == (k, n) and a.dtype is dtype
    c = poplin.matmul(s.graph, a, b, s.prog)
    A, B = data((m, k), dtype.numpy), data((k, n), dtype.numpy)
    close(s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"], A, B, dtype.numpy)


def _exchanged_bytes(engine) -> int:
    steps = engine.get_execution_profile()["simulation"]["steps"]
    return sum(st.get("totalData", 0) for st in steps if st["type"] == "DoExchange")


def test_created_inputs_need_less_exchange_than_linear_ones(session):
    m, k, n = 96, 128, 80
    totals = []
    for created in (True, False):
        s = session(tiles=64)
        if created:
            a = poplin.create_matmul_input_lhs(s.graph, poplar.HALF, (m, k), (k, n), "a")
            b = poplin.create_matmul_input_rhs(s.graph, poplar.HALF, (m, k), (k, n), "b")
        else:
            a, b = linear(s, poplar.HALF, (m, k), "a"), linear(s, poplar.HALF, (k, n), "b")
        c = poplin.matmul(s.graph, a, b, s.prog)
        s.run({}, {"c": c})
        totals.append(_exchanged_bytes(s.engine))
    assert totals[0] < totals[1]


@pytest.mark.parametrize("shape", [(1, 4, 5, 6), (5, 7, 33, 9), (64, 2, 3, 4), (3, 1, 100, 1)])
def test_grouped(session, close, shape):
    g, m, k, n = shape
    s = session(tiles=16)
    a = poplin.create_matmul_grouped_input_lhs(s.graph, poplar.FLOAT, (g, m, k), (g, k, n))
    b = linear(s, poplar.FLOAT, (g, k, n), "b")
    c = poplin.matmul_grouped(s.graph, a, b, s.prog)
    assert c.shape == (g, m, n)
    A, B = data((g, m, k), np.float32), data((g, k, n), np.float32)
    got = s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"]
    for i in range(g):
        close(got[i], A[i], B[i], np.float32)


@pytest.mark.parametrize(
    ("in_t", "out_t", "scale"),
    [
        (poplar.FLOAT, poplar.FLOAT, 1.0),
        (poplar.HALF, poplar.FLOAT, -0.5),
        (poplar.HALF, poplar.HALF, 2.0),
        (poplar.INT, poplar.INT, 3),
    ],
)
def test_matmul_acc(session, close, in_t, out_t, scale):
    m, k, n = 20, 70, 30
    s = session(tiles=16)
    a, b = linear(s, in_t, (m, k), "a"), linear(s, in_t, (k, n), "b")
    c = linear(s, out_t, (m, n), "c")
    assert poplin.matmul_acc(s.graph, c, a, b, scale, s.prog) is c
    A, B, C = data((m, k), in_t.numpy), data((k, n), in_t.numpy), data((m, n), out_t.numpy)
    got = s.run({"a": (a, A), "b": (b, B), "c": (c, C)}, {"c": c})["c"]
    wide = np.int64 if in_t.is_integral else np.float64
    close(got, A.astype(wide) * scale, B, out_t.numpy, C.astype(wide))


def test_matmul_grouped_acc(session, close):
    s = session(tiles=16)
    a, b = linear(s, poplar.FLOAT, (3, 5, 9), "a"), linear(s, poplar.FLOAT, (3, 9, 4), "b")
    c = linear(s, poplar.FLOAT, (3, 5, 4), "c")
    poplin.matmul_grouped_acc(s.graph, c, a, b, 0.25, s.prog)
    A, B, C = data((3, 5, 9), np.float32), data((3, 9, 4), np.float32), data((3, 5, 4), np.float32)
    got = s.run({"a": (a, A), "b": (b, B), "c": (c, C)}, {"c": c})["c"]
    for i in range(3):
        close(got[i], A[i] * 0.25, B[i], np.float32, C[i].astype(np.float64))


@pytest.mark.parametrize(
    ("in_t", "out_t"), [(poplar.HALF, poplar.FLOAT), (poplar.FLOAT, poplar.HALF)]
)
def test_output_type(session, close, in_t, out_t):
    s = session(tiles=16)
    a, b = linear(s, in_t, (9, 40), "a"), linear(s, in_t, (40, 11), "b")
    c = poplin.matmul(s.graph, a, b, s.prog, dtype=out_t)
    assert c.dtype is out_t
    A, B = data((9, 40), in_t.numpy), data((40, 11), in_t.numpy)
    close(s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"], A, B, out_t.numpy)


def test_small_memory_proportion_forces_k_splits_and_serial_steps(session, close):
    m, k, n = 48, 400, 40
    opts = {"availableMemoryProportion": 0.01}
    s = session(tiles=16)
    plan = poplin.matmul_plan(s.graph.target, poplar.FLOAT, (m, k), (k, n), options=opts)
    roomy = poplin.matmul_plan(s.graph.target, poplar.FLOAT, (m, k), (k, n))
    assert plan.fits and plan.temp_bytes <= 0.01 * s.graph.target.memory_bytes_per_tile
    assert plan.serial * plan.blocks_k > roomy.serial * roomy.blocks_k
    a, b = linear(s, poplar.FLOAT, (m, k), "a"), linear(s, poplar.FLOAT, (k, n), "b")
    c = poplin.matmul(s.graph, a, b, s.prog, options=opts)
    A, B = data((m, k), np.float32), data((k, n), np.float32)
    close(s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"], A, B, np.float32)
    names = [cs.name for cs in s.graph.state.compute_sets]
    assert len([x for x in names if "/partials" in x]) == plan.serial


def test_partials_type_half(session, close):
    opts = {"partialsType": "half", "fullyConnectedPass": "TRAINING_FWD"}
    s = session(tiles=16)
    a, b = linear(s, poplar.HALF, (30, 200), "a"), linear(s, poplar.HALF, (200, 40), "b")
    c = poplin.matmul(s.graph, a, b, s.prog, options=opts)
    plan = poplin.matmul_plan(s.graph.target, poplar.HALF, (30, 200), (200, 40), options=opts)
    assert plan.params.partials_type == "half"
    A, B = data((30, 200), np.float16), data((200, 40), np.float16)
    got = s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"]
    # half partials round each K-split partial to half: allow a few more half ulps
    want = A.astype(np.float64) @ B.astype(np.float64)
    scale = np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))
    np.testing.assert_array_less(np.abs(got - want), 4 * np.finfo(np.float16).eps * scale)


def test_empty_and_zero_inner_dimension(session):
    s = session(tiles=4)
    a, b = s.graph.add_variable(poplar.FLOAT, (4, 0), "a"), linear(s, poplar.FLOAT, (0, 3), "b")
    c = poplin.matmul(s.graph, a, b, s.prog)
    e = poplin.matmul(
        s.graph, linear(s, poplar.FLOAT, (0, 5), "x"), linear(s, poplar.FLOAT, (5, 2), "y"), s.prog
    )
    assert e.shape == (0, 2)
    got = s.run({}, {"c": c})["c"]
    np.testing.assert_array_equal(got, np.zeros((4, 3), np.float32))


def test_replicated_graph(session, close):
    s = session(tiles=8, replicas=2, num_ipus=2)
    a, b = linear(s, poplar.FLOAT, (12, 30), "a"), linear(s, poplar.FLOAT, (30, 7), "b")
    c = poplin.matmul(s.graph, a, b, s.prog)
    A, B = data((12, 30), np.float32), data((30, 7), np.float32)
    got = s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"]
    for r in range(2):
        close(got[r] if got.ndim == 3 else got, A, B, np.float32)


def test_two_matmuls_in_one_program_share_codelets(session, close):
    s = session(tiles=16)
    a, b = linear(s, poplar.FLOAT, (8, 8), "a"), linear(s, poplar.FLOAT, (8, 8), "b")
    c = poplin.matmul(s.graph, a, b, s.prog, name="first")
    d = poplin.matmul(s.graph, c, b, s.prog, name="second")
    A, B = data((8, 8), np.float32), data((8, 8), np.float32)
    got = s.run({"a": (a, A), "b": (b, B)}, {"d": d})["d"]
    close(got, A.astype(np.float64) @ B, B, np.float32)
    assert any(cs.name.startswith("second/") for cs in s.graph.state.compute_sets)


@pytest.fixture
def gathered(monkeypatch):
    """(vertex type, field) of every poplin field the engine gathers (copies) instead of
    serving as a view of device memory."""
    seen: list[tuple[str, str]] = []
    real, real_repeated = computeset.CompiledGroup.materialize, computeset.CompiledGroup.repeated

    def record(self, name, *args):
        if self.vertex_type.name.startswith("poplin::"):
            seen.append((self.vertex_type.name, name))
        return real(self, name, *args)

    def record_repeated(self, name, *args):  # a gather of the distinct elements
        out = real_repeated(self, name, *args)
        if out is not None and self.vertex_type.name.startswith("poplin::"):
            seen.append((self.vertex_type.name, name))
        return out

    real_kept, real_gather = computeset.CompiledGroup.stable_repeated, Batch.stable_gather

    def record_kept(self, name, *args):  # the same gathers into buffers a prepared run keeps
        out = real_kept(self, name, *args)
        if out is not None and self.vertex_type.name.startswith("poplin::"):
            seen.append((self.vertex_type.name, name))
        return out

    def record_gather(self, name, *args):
        out = real_gather(self, name, *args)
        if out is not None and self.vertex_type.name.startswith("poplin::"):
            seen.append((self.vertex_type.name, name))
        return out

    monkeypatch.setattr(computeset.CompiledGroup, "materialize", record)
    monkeypatch.setattr(computeset.CompiledGroup, "repeated", record_repeated)
    monkeypatch.setattr(computeset.CompiledGroup, "stable_repeated", record_kept)
    monkeypatch.setattr(Batch, "stable_gather", record_gather)
    return seen


@pytest.mark.parametrize(
    ("shape", "dtype", "opts"),
    [
        ((64, 4096, 64), poplar.FLOAT, None),
        ((512, 512, 8), poplar.FLOAT, None),
        ((8, 512, 512), poplar.HALF, None),  # planned swapped
        ((37, 53, 29), poplar.HALF, None),  # ragged blocks
        ((128, 256, 128), poplar.FLOAT, {"availableMemoryProportion": 0.02}),  # serial steps
    ],
)
@pytest.mark.parametrize("created", [True, False])
def test_every_field_is_a_zero_copy_view(session, close, gathered, shape, dtype, opts, created):
    """Created or plain operands: the products read the operands and write the partials in
    place, the reductions read the partials and write the output in place."""
    m, k, n = shape
    s = session(tiles=64)
    if created:
        a = poplin.create_matmul_input_lhs(s.graph, dtype, (m, k), (k, n), "a", opts)
        b = poplin.create_matmul_input_rhs(s.graph, dtype, (m, k), (k, n), "b", opts)
    else:
        a, b = linear(s, dtype, (m, k), "a"), linear(s, dtype, (k, n), "b")
    c = poplin.matmul(s.graph, a, b, s.prog, options=opts)
    A, B = data((m, k), dtype.numpy), data((k, n), dtype.numpy)
    close(s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"], A, B, dtype.numpy)
    assert gathered == []


def test_views_of_views_and_accumulation_are_zero_copy(session, close, gathered):
    s = session(tiles=16)
    x = linear(s, poplar.FLOAT, (40, 60), "x")
    a, b = x[3:30:2, 5:50], x.transpose()[10:55, 7:16]
    c = linear(s, poplar.FLOAT, (14, 9), "c")
    poplin.matmul_acc(s.graph, c, a, b, -0.5, s.prog)
    X, C = data((40, 60), np.float32), data((14, 9), np.float32)
    got = s.run({"x": (x, X), "c": (c, C)}, {"c": c})["c"]
    close(got, X[3:30:2, 5:50] * -0.5, X.T[10:55, 7:16], np.float32, C.astype(np.float64))
    assert gathered == []


def test_operands_that_are_not_views_are_gathered(session, close, gathered):
    s = session(tiles=16)
    parts = [linear(s, poplar.FLOAT, (10, 30), f"a{i}") for i in range(2)]
    a = poplar.concat(parts[::-1], 0)  # two variables out of address order: no strided view
    b = linear(s, poplar.FLOAT, (30, 12), "b")
    c = poplin.matmul(s.graph, a, b, s.prog)
    A0, A1, B = data((10, 30), np.float32), data((10, 30), np.float32), data((30, 12), np.float32)
    got = s.run({"a0": (parts[0], A0), "a1": (parts[1], A1), "b": (b, B)}, {"c": c})["c"]
    close(got, np.concatenate([A1, A0]), B, np.float32)
    assert any(field == "a" or field == "b" for _, field in gathered)


@pytest.mark.parametrize("shape", [(96, 300, 80), (200, 400, 100), (17, 1000, 260)], ids=str)
def test_stage_two_through_a_buffer_gives_the_bits_of_the_reduction_in_place(
    session, monkeypatch, shape
):
    """poplin's stage 2 of float outputs reduced in chunks through a buffer
    (``_reduce_into``, here for any output size and in small chunks) gives the bits of the
    reduction straight into the output views, on matmuls whose plans split K, later runs
    included."""
    from tremula.libs.poplin import codelets as cl

    dtype = poplar.FLOAT
    m, k, n = shape
    rng = np.random.default_rng(11)
    A = (rng.standard_normal((m, k)) * 8).astype(dtype.numpy)
    B = (rng.standard_normal((k, n)) * 8).astype(dtype.numpy)
    results, buffered = [], []
    real = cl._reduce_into

    def spy(parts, out):
        run = real(parts, out)
        buffered.append(run is not None)
        return run

    for min_bytes in (1 << 62, 1):  # in place, then through the buffer
        monkeypatch.setattr(cl, "MIN_BUFFERED_BYTES", min_bytes)
        monkeypatch.setattr(cl, "CHUNK_BYTES", 512)
        monkeypatch.setattr(cl, "_reduce_into", spy)
        s = session(tiles=16)
        a, b = linear(s, dtype, (m, k), "a"), linear(s, dtype, (k, n), "b")
        c = poplin.matmul(s.graph, a, b, s.prog)
        got = [s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"]]
        s.engine.write_tensor("a", A[::-1].copy())
        s.engine.run()  # a later run: the prepared paths
        got.append(s.engine.read_tensor("read_c"))
        results.append(got)
    assert any(buffered)
    for before, after in zip(*results):
        assert before.tobytes() == after.tobytes()
