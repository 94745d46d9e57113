"""Stage 2 fused with the block products on replayed runs (``poplin/fused.py``,
``engine/fusion.py``): the same bits as the two compute sets run apart, for plans with K
slices (ragged ones too), groups, replicas, transposed and linearly mapped operands; taken
only where the partials are read by stage 2 alone."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.engine import flatplan, fusion
from tremula.libs import jit, poplin
from tremula.libs.poplin import exact, sgemm
from tremula.libs.poplin import fused as poplin_fused

RUNS = 4  # the first runs go through the interpreter, the later ones are replayed


def _engine(shape, dtype, kind, tiles, replicas=1, read_partials=False, loop=0):
    """An engine computing ``c = a @ b`` (``[G, M, K] @ [G, K, N]``); with ``loop``, that
    many times in a ``Repeat``, ``c`` copied into ``a`` after each product."""
    g, m, k, n = shape
    device = poplar.IPUModel("ipu2", tiles_per_ipu=tiles).create_device()
    graph = poplar.Graph(device.target, replication_factor=replicas)
    prog = poplar.Sequence()
    if kind == "created":
        a = poplin.create_matmul_grouped_input_lhs(graph, dtype, (g, m, k), (g, k, n), "a")
        b = poplin.create_matmul_grouped_input_rhs(graph, dtype, (g, m, k), (g, k, n), "b")
    elif kind == "transposed":  # views: A and B stored transposed
        a = graph.add_variable(dtype, (g, k, m), "a", mapping="linear").dim_shuffle((0, 2, 1))
        b = graph.add_variable(dtype, (g, n, k), "b", mapping="linear").dim_shuffle((0, 2, 1))
    else:
        a = graph.add_variable(dtype, (g, m, k), "a", mapping="linear")
        b = graph.add_variable(dtype, (g, k, n), "b", mapping="linear")
    c = poplin.matmul_grouped(graph, a, b, prog)
    if loop:
        prog.add(poplar.Copy(c, a))
    graph.create_host_write("a", a)
    graph.create_host_write("b", b)
    graph.create_host_read("c", c)
    if read_partials:  # the partials read by the host or by a copy too: not only stage 2's
        info = next(v for v in graph.state.variables if v.name.endswith("/partials"))
        addresses = np.arange(info.start, info.start + info.size).reshape(info.shape)
        parts = poplar.Tensor(graph.state, info.dtype, addresses)
        if read_partials == "copy":
            kept = graph.add_variable(info.dtype, info.shape, "kept", mapping="linear")
            prog.add(poplar.Copy(parts, kept))
            parts = kept
        graph.create_host_read("partials", parts)
    engine = poplar.Engine(graph, poplar.Repeat(loop, prog) if loop else prog)
    engine.load(device)
    return engine


def _results(monkeypatch, enabled, shape, dtype=poplar.FLOAT, kind="created", **kw):
    """``c`` after each of :data:`RUNS` runs (fresh operands before each) and how many
    fused runs the replays took (``compiled``: with ``exact.py``'s kernel offered, else
    the NumPy and BLAS calls)."""
    monkeypatch.setattr(fusion, "ENABLED", enabled)
    monkeypatch.setattr(exact, "ENABLED", kw.pop("compiled", False))
    monkeypatch.setattr(poplin_fused, "MIN_PARTIALS_BYTES", kw.pop("min_bytes", 0))  # small plans
    taken = []

    def counted(rt, before, after):
        run = fusion.fused_step(rt, before, after)
        taken.append(run is not None)
        return run

    monkeypatch.setattr(flatplan, "fused_step", counted)
    engine = _engine(shape, dtype, kind, **kw)
    g, m, k, n = shape
    reps = kw.get("replicas", 1)
    rng = np.random.default_rng(7)
    outs = []
    for _ in range(RUNS):
        lead = (reps,) if reps > 1 else ()
        a = rng.standard_normal((*lead, g, m, k)).astype(dtype.numpy)
        b = rng.standard_normal((*lead, g, k, n)).astype(dtype.numpy)
        engine.write_tensor("a", a)
        engine.write_tensor("b", b)
        engine.run()
        outs.append(engine.read_tensor("c").copy())
    return outs, sum(taken), engine


CASES = [
    # (G, M, K, N), kind, tiles
    ((1, 64, 512, 48), "created", 16),
    ((1, 147, 300, 40), "linear", 16),
    ((1, 5, 300, 7), "created", 16),
    ((3, 33, 200, 17), "linear", 16),
    ((1, 96, 1000, 64), "transposed", 16),
    ((1, 256, 512, 64), "created", 64),
    ((2, 40, 129, 24), "created", 8),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("shape,kind,tiles", CASES)
def test_fused_runs_give_the_bits_of_the_two_compute_sets(
    monkeypatch, shape, kind, tiles, compiled
):
    if compiled and not jit.available():
        pytest.skip("the compiled kernel needs the fast extra (numba, llvmlite)")
    fused, taken, _ = _results(monkeypatch, True, shape, kind=kind, tiles=tiles, compiled=compiled)
    apart, none, _ = _results(monkeypatch, False, shape, kind=kind, tiles=tiles)
    assert taken >= 1 and none == 0  # fused where enabled, never otherwise
    for run, (x, y) in enumerate(zip(fused, apart)):
        assert np.array_equal(x.view(np.int32), y.view(np.int32)), f"run {run}"
    want = np.einsum("gmk,gkn->gmn", *_inputs(shape, kind, RUNS - 1))
    np.testing.assert_allclose(fused[-1], want, rtol=1e-4, atol=1e-3)


def _inputs(shape, kind, run):
    """The float64 operands of run ``run`` of :func:`_results` (single replica)."""
    g, m, k, n = shape
    rng = np.random.default_rng(7)
    for _ in range(run + 1):
        a = rng.standard_normal((g, m, k)).astype(np.float32)
        b = rng.standard_normal((g, k, n)).astype(np.float32)
    return a.astype(np.float64), b.astype(np.float64)


@pytest.mark.parametrize("shape,kind,tiles", CASES[:3])
def test_the_numpy_path_gives_the_same_bits(monkeypatch, shape, kind, tiles):
    """Without NumPy's BLAS (``sgemm.plan`` None) later slices go through a scratch slab
    and ``np.add``: the same bits."""
    monkeypatch.setattr(sgemm, "plan", lambda a, b, c: None)
    fused, taken, _ = _results(monkeypatch, True, shape, kind=kind, tiles=tiles)
    apart, _, _ = _results(monkeypatch, False, shape, kind=kind, tiles=tiles)
    assert taken >= 1
    for x, y in zip(fused, apart):
        assert np.array_equal(x.view(np.int32), y.view(np.int32))


def test_a_loop_body_fuses_with_the_same_bits(monkeypatch):
    """The product in a ``Repeat`` whose next iteration multiplies its result: the body's
    flat plan fuses, every iteration reads the output the last one wrote."""
    shape = (1, 32, 256, 256)
    fused, taken, _ = _results(monkeypatch, True, shape, kind="linear", tiles=16, loop=3)
    apart, _, _ = _results(monkeypatch, False, shape, kind="linear", tiles=16, loop=3)
    assert taken >= 1
    for x, y in zip(fused, apart):
        assert np.array_equal(x.view(np.int32), y.view(np.int32))
    a, b = (x.astype(np.float32) for x in _inputs(shape, "linear", RUNS - 1))
    for _ in range(3):
        a = np.einsum("gmk,gkn->gmn", a.astype(np.float64), b).astype(np.float32)
    np.testing.assert_allclose(fused[-1], a, rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("compiled", [False, True])
def test_replicas_fuse_with_the_same_bits(monkeypatch, compiled):
    if compiled and not jit.available():
        pytest.skip("the compiled kernel needs the fast extra (numba, llvmlite)")
    shape = (1, 64, 512, 48)
    fused, taken, _ = _results(monkeypatch, True, shape, tiles=16, replicas=2, compiled=compiled)
    apart, _, _ = _results(monkeypatch, False, shape, tiles=16, replicas=2)
    assert taken >= 1
    for x, y in zip(fused, apart):
        assert np.array_equal(x.view(np.int32), y.view(np.int32))


def test_half_operands_run_apart_with_the_same_bits(monkeypatch):
    shape = (1, 64, 512, 48)
    fused, taken, _ = _results(monkeypatch, True, shape, dtype=poplar.HALF, tiles=16)
    apart, _, _ = _results(monkeypatch, False, shape, dtype=poplar.HALF, tiles=16)
    assert taken == 0  # not a float32 plan: the two compute sets run apart
    for x, y in zip(fused, apart):
        assert np.array_equal(x.view(np.int16), y.view(np.int16))


@pytest.mark.parametrize("reader", ["host", "copy"])
def test_partials_read_elsewhere_are_stored(monkeypatch, reader):
    """Partials the host reads (always live) or a copy reads after stage 2 (not only
    carried to stage 2): no fusion, and the partials read after a replayed run are that
    run's."""
    shape = (1, 64, 512, 48)
    _, taken, engine = _results(monkeypatch, True, shape, tiles=16, read_partials=reader)
    assert taken == 0
    parts = engine.read_tensor("partials")
    np.testing.assert_array_equal(parts.sum(axis=0, dtype=np.float32), engine.read_tensor("c"))


def test_plans_with_few_partials_run_apart(monkeypatch):
    """Under ``MIN_PARTIALS_BYTES`` of partials the two compute sets run apart."""
    shape = (1, 64, 512, 48)
    least = poplin_fused.MIN_PARTIALS_BYTES
    _, taken, _ = _results(monkeypatch, True, shape, tiles=16, min_bytes=least)
    assert taken == 0


def test_a_large_plan_fuses_by_default(monkeypatch):
    """256 x 512 x 64 on a whole Mk2: 16 K slices, 1 MiB of partials."""
    shape = (1, 256, 512, 64)
    least = poplin_fused.MIN_PARTIALS_BYTES
    fused, taken, _ = _results(monkeypatch, True, shape, tiles=1472, min_bytes=least)
    apart, _, _ = _results(monkeypatch, False, shape, tiles=1472, min_bytes=least)
    assert taken == 1
    for x, y in zip(fused, apart):
        assert np.array_equal(x.view(np.int32), y.view(np.int32))
