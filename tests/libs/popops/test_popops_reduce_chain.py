"""Two reduction stages run as one pass (``popops.reduce_chain``: stage 1's row sums and
the next stage's grid of them, fused through the engine's ``fuse_next`` hook): the outputs
and the whole of device memory are bit for bit those of the stages run apart (and of the
NumPy path), over odd shapes, replicas, special values and kernels switched off between
runs; profiles and cycles do not change; anything the fused loop cannot reproduce keeps
the stages apart. Where stage 1's partials are only carried to the next stage (the
engine's compute-set fusion, ``Codelet.fuse``), the pass does not store them: the outputs
and all other memory are still those of the stages apart, and partials read elsewhere are
stored."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest

from tremula import poplar
from tremula.engine import flatplan, fusion
from tremula.libs import jit
from tremula.libs.popops import reduce_chain
from tremula.libs.popops import reduce_inplace as inplace
from tremula.libs.popops.reduce import reduce, reduce_with_output

RUNS = 5  # the first runs go through the interpreter; later ones replay the flat plan


def _data(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Normal values with a column of ``-0.0`` (whose sum's sign depends on how a stage
    starts), infinities, NaN, subnormals and values whose sums round."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat[:, 0] = -0.0
    flat[1, 1], flat[-1, 2 % shape[-1]] = np.inf, np.nan
    flat[::3, -1] = np.float32(1e-42)  # subnormal
    return x


@pytest.fixture
def fusions(monkeypatch) -> Iterator[list[bool]]:
    """Each time two stages were offered for fusion: whether they fused."""
    seen: list[bool] = []
    real = reduce_chain._group_units

    def spy(first, then):
        plan = real(first, then)
        seen.append(plan is not None)
        return plan

    monkeypatch.setattr(reduce_chain, "_group_units", spy)
    yield seen


@pytest.fixture
def carried(monkeypatch) -> Iterator[list[bool]]:
    """Each time the engine offered two compute sets for fusion without storing what the
    first carries to the second (``fusion.fused_step``): whether it took it."""
    seen: list[bool] = []

    def counted(rt, before, after):
        run = fusion.fused_step(rt, before, after)
        seen.append(run is not None)
        return run

    monkeypatch.setattr(flatplan, "fused_step", counted)
    yield seen


def _engine(shape, dims, tiles, fan_in, replicas=1, scaled=False, options=None, read=None):
    """A reduction of ``t`` to ``out``; with ``read``, stage 1's partials are read by the
    host too (``"host"``) or copied after the reduction (``"copy"``)."""
    device = poplar.IPUModel(tiles_per_ipu=tiles).create_device()
    g = poplar.Graph(device.target, replication_factor=replicas)
    t = g.add_variable(poplar.FLOAT, shape, "t", mapping="linear")
    prog = poplar.Sequence()
    opts = {"maxFanIn": fan_in} if fan_in else None
    if scaled:
        kept = [s for d, s in enumerate(shape) if d not in dims]
        out = g.add_variable(poplar.FLOAT, kept, "out", mapping="linear")
        reduce_with_output(g, t, out, dims, "ADD", prog, scale=0.5, update=True, options=opts)
    else:
        out = reduce(g, t, dims, "ADD", prog, options=opts)
    g.create_host_write("t", t)
    g.create_host_read("out", out)
    if read is not None:
        info = _partials(g.state)
        addresses = np.arange(info.start, info.start + info.size).reshape(info.shape)
        parts = poplar.Tensor(g.state, info.dtype, addresses)
        if read == "copy":
            kept = g.add_variable(info.dtype, info.shape, "kept", mapping="linear")
            prog.add(poplar.Copy(parts, kept))
            parts = kept
        g.create_host_read("partials", parts)
    engine = poplar.Engine(g, prog, options or {})
    engine.load(device)
    return engine


def _partials(state):
    """Stage 1's output variable (the first stage's partials)."""
    return next(v for v in state.variables if v.name == "reduce/partials0")


def _runs(engine, shape, replicas, kernels=(True,) * RUNS) -> list[tuple[bytes, bytes]]:
    """(output, all float device memory) after each run, compiled kernels on or off."""
    got = []
    for i, compiled in enumerate(kernels):
        x = np.stack([_data(shape, 10 * i + r) for r in range(replicas)])
        engine.write_tensor("t", x if replicas > 1 else x[0])
        previous = jit.set_enabled(compiled)
        try:
            engine.run(0)
        finally:
            jit.set_enabled(previous)
        memory = engine.runtime.storage[poplar.FLOAT].tobytes()
        got.append((engine.read_tensor("out").tobytes(), memory))
    return got


CASES = [  # shape, dims, tiles, maxFanIn, replicas, scaled, fused
    ((64, 48), (0,), 24, 4, 1, False, True),
    ((100, 36), (0,), 16, 4, 1, False, True),
    ((300, 40), (0,), 32, 4, 2, False, True),
    ((6, 20, 16), (0, 1), 32, 4, 1, False, True),
    ((64, 48, 3), (0,), 24, 4, 1, False, True),
    ((128, 10), (0,), 24, 4, 1, True, True),
    ((100, 36), (0,), 18, 4, 1, False, False),  # unequal groups: no grid stage
    ((97, 13), (0,), 16, None, 1, False, False),
    ((64, 48), (1,), 24, 4, 1, False, False),
]


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize(("shape", "dims", "tiles", "fan_in", "replicas", "scaled", "fused"), CASES)
def test_fused_stages_leave_the_bits_of_the_stages_apart(
    monkeypatch, fusions, shape, dims, tiles, fan_in, replicas, scaled, fused
):
    """Outputs and device memory, run after run (replayed runs fused), equal those of the
    stages run apart and of the NumPy path, with kernels switched off between runs too
    (the joined run, which stores the partials: compute-set fusion off)."""
    monkeypatch.setattr(fusion, "ENABLED", False)
    want = _runs(_engine(shape, dims, tiles, fan_in, replicas, scaled), shape, replicas)
    assert fusions == ([True] if fused else [])
    mixed = _runs(
        _engine(shape, dims, tiles, fan_in, replicas, scaled), shape, replicas, (1, 1, 1, 0, 1)
    )
    numpy_path = _runs(
        _engine(shape, dims, tiles, fan_in, replicas, scaled), shape, replicas, (0,) * RUNS
    )
    monkeypatch.setattr(reduce_chain, "fuse", lambda first, then: None)
    apart = _runs(_engine(shape, dims, tiles, fan_in, replicas, scaled), shape, replicas)
    assert want == apart
    assert mixed == apart
    assert numpy_path == apart


def _outside(engine, got: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``got`` with stage 1's partials cut out of each run's memory."""
    info = _partials(engine.state)
    rows = engine.runtime.storage[poplar.FLOAT].shape[0]
    cut = []
    for out, memory in got:
        m = np.frombuffer(memory, np.float32).reshape(rows, -1)
        kept = np.delete(m, np.s_[info.start : info.start + info.size], axis=1)
        cut.append((out, kept.tobytes()))
    return cut


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize(("shape", "dims", "tiles", "fan_in", "replicas", "scaled", "fused"), CASES)
def test_carried_partials_are_not_stored_and_the_rest_keeps_its_bits(
    monkeypatch, carried, shape, dims, tiles, fan_in, replicas, scaled, fused
):
    """With stage 1's partials carried to stage 2 alone, replayed runs fuse the two
    compute sets without storing the partials: outputs, run after run, and all memory but
    the partials equal those of the stages run apart (and of the NumPy path, with kernels
    switched off between runs too)."""

    def runs(kernels=(True,) * RUNS):
        engine = _engine(shape, dims, tiles, fan_in, replicas, scaled)
        return _outside(engine, _runs(engine, shape, replicas, kernels))

    want = runs()
    assert any(carried) == fused
    mixed = runs((1, 1, 1, 0, 1))
    numpy_path = runs((0,) * RUNS)
    monkeypatch.setattr(fusion, "ENABLED", False)
    monkeypatch.setattr(reduce_chain, "fuse", lambda first, then: None)
    apart = runs()
    assert want == apart
    assert mixed == apart
    assert numpy_path == apart


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize("read", ["host", "copy"])
def test_partials_read_elsewhere_are_stored(carried, fusions, read):
    """Partials the host reads (always live) or a copy reads after the reduction (not only
    carried to stage 2): no compute-set fusion, the joined run stores them, and those read
    after a replayed run are that run's (each unit's rows summed, in the stages' bits)."""
    shape = (64, 48)
    engine = _engine(shape, (0,), 24, 4, read=read)
    for i in range(RUNS):
        x = _data(shape, i)
        engine.write_tensor("t", x)
        engine.run(0)
    assert not any(carried) and fusions and all(fusions)  # joined, not fused
    group = engine.step_plan.compute_sets[0].groups[0]
    stage1 = group.vertex_type.codelet.prepare(group.batch)
    parts = engine.read_tensor("partials").reshape(-1, shape[1])
    want = np.stack(
        [np.float32(0) + x[f : f + k].sum(axis=0) for f, k in zip(stage1.first, stage1.count)]
    )  # a unit holds two or three rows: NumPy adds them in order, then +0.0
    assert parts.tobytes() == want.tobytes()


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
def test_profiles_and_cycles_do_not_see_the_fusion(monkeypatch, fusions, carried):
    """The execution profile (every step's cycles, replayed runs included) and each run's
    cycles are those of the stages run apart."""

    def profile(fuse: bool) -> tuple[str, list[int]]:
        if not fuse:
            monkeypatch.setattr(fusion, "ENABLED", False)
            monkeypatch.setattr(reduce_chain, "fuse", lambda first, then: None)
        options = {"autoReport.executionProfileProgramRunCount": str(RUNS - 1)}
        engine = _engine((100, 36), (0,), 16, 4, options=options)
        engine.count_cycles = True  # the runs past the profile's count too
        cycles = []
        for _ in range(RUNS):
            engine.run(0)
            cycles.append(engine.run_cycles(0))
        return json.dumps(engine.get_execution_profile(), sort_keys=True), cycles

    fused = profile(True)
    assert fusions == [True] and carried == [True]
    assert fused == profile(False)


def test_host_time_keeps_the_stages_apart(fusions, tmp_path):
    """With ``autoReport.outputHostTime`` each compute set's host time is its own: no
    fusion is offered."""
    options = {
        "autoReport.outputHostTime": "true",
        "autoReport.directory": str(tmp_path),
    }
    engine = _engine((100, 36), (0,), 16, 4, options=options)
    _runs(engine, (100, 36), 1)
    engine.close()
    assert fusions == []


def _stages(rng, R, N, counts, groups, offset=0):
    """Random rows, ``RowsRun`` / ``GridRun`` over them as ``_rows_direct`` and
    ``_grid_direct`` build them for units in ``groups`` (``[G, P]``), and the memory."""
    first = np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64)
    U, rows_n = counts.size, int(counts.sum())
    memory = np.zeros((R, rows_n * N + U * N + offset), np.float32)
    memory[:, : rows_n * N] = rng.standard_normal((R, rows_n * N)).astype(np.float32)
    memory[:, : rows_n * N : N] = -0.0  # column 0: its sums' sign shows how stages start
    memory[:, 1 : rows_n * N : 3 * N] = np.nan
    rows = memory[:, : rows_n * N].reshape(R, rows_n, N)
    dst = memory[:, rows_n * N + offset :].reshape(R, U, N)
    step = N * memory.itemsize
    item = memory.itemsize
    G, P = groups.shape
    assert np.array_equal(groups, np.arange(U).reshape(G, P))  # pieces in unit order
    partials = np.lib.stride_tricks.as_strided(
        dst, (R, G, N, P, 1), (memory.strides[0], P * step, item, step, item)
    )
    sums = np.zeros((R, G, N, 1), np.float32)
    runs = inplace.plan_runs(first, counts, N * 4)
    first_run = reduce_chain.RowsRun(
        lambda: inplace.reduce_rows(np.add, rows, dst, runs),
        np.add,
        rows,
        dst,
        first,
        counts,
        False,
    )
    then = reduce_chain.GridRun(
        lambda: np.add.reduce(partials, axis=(3,), out=sums),
        lambda: None,
        np.add,
        partials,
        (3,),
        sums,
    )
    return first_run, then, memory, sums


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize("N", [2, 5, 37, 64])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_fused_loop_gives_the_stages_bits_on_odd_rows(N, offset):
    """Units of one to five rows (the streaming path takes two and three), rows whose
    length is no multiple of four, partial rows that start off a 16-byte boundary, two
    replicas: the compiled loop, its Python form and the two stages give the same bits;
    so does the loop that does not store the partials (which it leaves as they were)."""
    rng = np.random.default_rng(N + offset)
    counts = rng.integers(1, 6, 24).astype(np.int64)
    groups = np.arange(24).reshape(6, 4)
    first, then, memory, sums = _stages(rng, 2, N, counts, groups, offset)
    first()
    then()
    want_memory, want_sums = memory.copy(), sums.copy()
    fused = reduce_chain.fuse(first, then)
    assert fused is not None
    for kernel in (reduce_chain._sum_rows_into_groups, None):
        memory[:, -counts.size * N :] = 7.0
        sums[...] = 7.0
        if kernel is None:  # the kernel's Python form, on the same arrays
            units, grouped = reduce_chain._group_units(first, then)
            reduce_chain._sum_rows_into_groups.py(
                first.rows, first.first, first.count, first.dst, units, grouped
            )
        else:
            fused()
        assert memory.tobytes() == want_memory.tobytes()
        assert sums.tobytes() == want_sums.tobytes()
    units, grouped = reduce_chain._group_units(first, then)
    spare = np.empty(N, np.float32)
    unstored = reduce_chain._sum_units_into_groups
    for kernel in (unstored, unstored.py):  # without storing the partials
        memory[:, -counts.size * N :] = 7.0
        sums[...] = 7.0
        kernel(first.rows, first.first, first.count, units, grouped, spare)
        assert sums.tobytes() == want_sums.tobytes()
        assert np.all(memory[:, -counts.size * N :] == 7.0)


def test_stages_that_the_loop_cannot_reproduce_stay_apart():
    """Another operation, a scale on stage 1, pieces that are not whole unit rows, a unit
    left out, and sums in the memory stage 1 reads are refused."""
    rng = np.random.default_rng(0)
    counts = np.full(8, 2, np.int64)
    first, then, memory, sums = _stages(rng, 1, 8, counts, np.arange(8).reshape(2, 4))
    assert reduce_chain.fuse(first, then) is not None

    def with_(run, **changes):
        values = {name: getattr(run, name) for name in run.__dataclass_fields__}
        return type(run)(**{**values, **changes})

    assert reduce_chain.fuse(with_(first, ufunc=np.maximum), then) is None
    assert reduce_chain.fuse(first, with_(then, ufunc=np.maximum)) is None
    assert reduce_chain.fuse(with_(first, scaled=True), then) is None
    half = then.partials[:, :, :4]  # columns 0..3 of each row: not whole rows
    assert reduce_chain.fuse(first, with_(then, partials=half, sums=sums[:, :, :4])) is None
    three = then.partials[:, :, :, :3]  # piece 3 of each group left out
    assert reduce_chain.fuse(first, with_(then, partials=three)) is None
    inside = memory[:, : sums.size].reshape(sums.shape)  # sums over stage 1's input
    assert reduce_chain.fuse(first, with_(then, sums=inside)) is None
    assert first.fuse_next(first) is None  # only a grid stage follows
    assert first.fuse_next(lambda: None) is None
