"""The compiled K-sliced product and stage-2 sum (``poplin/exact.py``): the bits of the
stacked ``np.matmul`` and ``np.add.reduce`` it replaces, for each orientation, with zeros,
signed zeros, infinities and NaNs in the operands; taken by replayed matmul plans with K
slices; off (the NumPy path) without the fast extra."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from tremula import poplar
from tremula.engine import flatplan, fusion
from tremula.libs import jit, poplin
from tremula.libs.poplin import exact
from tremula.libs.poplin import fused as poplin_fused

needs_kernel = pytest.mark.skipif(
    not exact.available(), reason="the compiled kernel needs the fast extra (numba, llvmlite)"
)


@pytest.fixture
def chain_blas():
    """Skips where this host's BLAS does not sum in the kernel's ``"chain"`` order."""
    if not exact.sums_in_chains():
        pytest.skip("this host's BLAS sums some elements in two chains: the kernel declines")


def _operands(rng, shape, a_t, b_t, specials=True):
    """``a [S, M, k]``, ``b [S, k, N]`` as K slices of ``A [M, S k]`` and ``B [S k, N]``,
    each stored row-major or (``*_t``) transposed."""
    S, M, k, N = shape
    A = rng.standard_normal((S * k, M) if a_t else (M, S * k)).astype(np.float32)
    B = rng.standard_normal((N, S * k) if b_t else (S * k, N)).astype(np.float32)
    if specials:  # a zero row, signed zeros, infinities, NaNs
        for X in (A, B):
            flat = X.reshape(-1)
            spots = rng.integers(0, flat.size, 40)
            flat[spots] = rng.choice(np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32), 40)
        (A.T if a_t else A)[0] = -0.0
    A, B = (A.T if a_t else A), (B.T if b_t else B)
    ia, ib = A.itemsize, B.itemsize
    a = as_strided(A, (S, M, k), (k * A.strides[1], A.strides[0], A.strides[1]))
    b = as_strided(B, (S, k, N), (k * B.strides[0], B.strides[0], B.strides[1]))
    assert ia == ib == 4
    return a, b


def _same(x, y):
    """The same bits, NaN payloads aside (which NaN survives where two meet depends on
    operand order: ``exact.py``'s docstring); NaN at the same places."""
    nan = np.isnan(y)
    assert np.array_equal(np.isnan(x), nan)
    return np.array_equal(x[~nan].view(np.int32), y[~nan].view(np.int32))


def _apart(a, b):
    """The NumPy path: one stacked product into partials, then the sum over slices."""
    parts = np.matmul(a, b)
    out = np.empty(parts.shape[1:], np.float32)
    np.add.reduce(parts, axis=0, out=out)
    return out


SHAPES = [(16, 32, 16, 256), (4, 64, 32, 64), (2, 32, 5, 32), (3, 64, 7, 96)]  # S, M, k, N


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("a_t,b_t", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.usefixtures("chain_blas")
def test_the_kernel_gives_the_bits_of_the_stacked_product_and_sum(shape, a_t, b_t):
    rng = np.random.default_rng(3)
    a, b = _operands(rng, shape, a_t, b_t)
    with np.errstate(all="ignore"):
        want = _apart(a, b)
    out = np.full(want.shape, 7.0, np.float32)
    run = exact.sliced_sum(a, b, out)
    assert run is not None
    for _ in range(2):  # a kept run computes again from the operands
        run()
        assert _same(out, want)
    assert np.isnan(want).any() and np.isinf(want).any()  # (the specials reach the output)
    a[...] = rng.standard_normal(a.shape).astype(np.float32)  # new operand values
    run()
    with np.errstate(all="ignore"):
        want = _apart(a, b)
    assert _same(out, want)
    np.testing.assert_allclose(out, np.einsum("smk,skn->mn", a, b.astype(np.float64)), atol=1e-3)


@needs_kernel
@pytest.mark.usefixtures("chain_blas")
def test_a_transposed_output_is_written_element_by_element():
    rng = np.random.default_rng(5)
    a, b = _operands(rng, (4, 32, 16, 64), False, False, specials=False)
    store = np.zeros((64, 32), np.float32)
    out = store.T  # [M, N] with unit stride along M
    run = exact.sliced_sum(a, b, out)
    assert run is not None
    run()
    assert np.array_equal(out, _apart(a, b))


@needs_kernel
def test_the_kernel_declines_what_it_does_not_cover():
    rng = np.random.default_rng(1)
    a, b = _operands(rng, (4, 30, 16, 30), False, False, specials=False)  # tiles do not divide
    assert exact.sliced_sum(a, b, np.empty((30, 30), np.float32)) is None
    a, b = _operands(rng, (1, 32, 16, 64), False, False, specials=False)  # one slice
    assert exact.sliced_sum(a, b, np.empty((32, 64), np.float32)) is None
    a, b = _operands(rng, (4, 32, 16, 64), False, False, specials=False)
    assert exact.sliced_sum(a.astype(np.float64), b, np.empty((32, 64), np.float32)) is None
    out = np.empty((32, 64), np.float32)
    out.flags.writeable = False
    assert exact.sliced_sum(a, b, out) is None
    c = np.empty((32, 64), np.float32)
    assert exact.sliced_sum(a, as_strided(c, b.shape, (c.strides[0] * 16, *c.strides)), c) is None


def test_without_compiled_kernels_there_is_no_kernel(monkeypatch):
    """No numba (or ``jit.set_enabled(False)``): the NumPy path."""
    monkeypatch.setattr(jit, "_enabled", False)
    assert not exact.available()
    rng = np.random.default_rng(1)
    a, b = _operands(rng, (4, 32, 16, 64), False, False, specials=False)
    assert exact.sliced_sum(a, b, np.empty((32, 64), np.float32)) is None


def _matmul_results(monkeypatch, compiled, shape, kind, tiles, payloads=False):
    """``c`` after each of four runs of ``c = a @ b`` on a ``tiles``-tile Mk2 (A row-major
    or transposed, B row-major or read as ``W^T``), the plan's K slices as many, and how
    many replayed runs took the compiled kernel; with ``payloads``, NaNs of distinct
    payloads (quiet and signalling, both signs) in both operands of the later runs."""
    monkeypatch.setattr(exact, "ENABLED", compiled)
    taken = []
    original = exact.sliced_sum

    def counted(*args):
        run = original(*args)
        taken.append(run is not None)
        return run

    monkeypatch.setattr(exact, "sliced_sum", counted)
    m, k, n = shape
    device = poplar.IPUModel("ipu2", tiles_per_ipu=tiles).create_device()
    graph = poplar.Graph(device.target)
    prog = poplar.Sequence()
    if kind == "weight_t":  # dy @ W^T: B is a weight read transposed
        a = graph.add_variable(poplar.FLOAT, (m, k), "a", mapping="linear")
        b = graph.add_variable(poplar.FLOAT, (n, k), "b", mapping="linear").transpose()
    else:
        a = graph.add_variable(poplar.FLOAT, (m, k), "a", mapping="linear")
        b = graph.add_variable(poplar.FLOAT, (k, n), "b", mapping="linear")
    c = poplin.matmul(graph, a, b, prog)
    graph.create_host_write("a", a)
    graph.create_host_write("b", b)
    graph.create_host_read("c", c)
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    rng = np.random.default_rng(11)
    outs = []
    for run in range(4):
        av = rng.standard_normal((m, k)).astype(np.float32)
        if run == 3:
            av[0, :5] = [np.inf, -np.inf, np.nan, -0.0, 0.0]
        engine.write_tensor("a", av)
        bv = rng.standard_normal((n, k) if kind == "weight_t" else (k, n)).astype(np.float32)
        if payloads and run:
            for x in (av, bv):
                spots = rng.integers(0, x.size, max(2, x.size // 50))
                x.reshape(-1).view(np.uint32)[spots] = rng.choice(NANS, spots.size)
            av[-1, -3:] = [np.inf, -np.inf, 0.0]  # (default NaNs meeting the others)
        engine.write_tensor("b", bv.T if kind == "weight_t" else bv)
        with np.errstate(all="ignore"):
            engine.run()
        outs.append(engine.read_tensor("c").copy())
    return outs, sum(taken)


@needs_kernel
@pytest.mark.parametrize("kind", ["plain", "weight_t"])
@pytest.mark.usefixtures("chain_blas")
def test_replayed_matmuls_take_the_kernel_with_the_bits_of_the_two_compute_sets(monkeypatch, kind):
    """The digits MLP's K-sliced products (32 x 256 x 256 on a 1472-tile Mk2: 16 slices):
    fused by the compiled kernel (``MIN_PARTIALS_BYTES`` keeps the NumPy fused path off),
    the same bits as without it."""
    shape, tiles = (32, 256, 256), 1472
    got, taken = _matmul_results(monkeypatch, True, shape, kind, tiles)
    want, none = _matmul_results(monkeypatch, False, shape, kind, tiles)
    assert taken >= 1 and none == 0
    for run, (x, y) in enumerate(zip(got, want)):
        assert _same(x, y), f"run {run}"
    assert np.isnan(got[-1][0]).all()  # (row 0 met a NaN)


NANS = np.array([0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFC54321, 0x7F800001, 0xFF800002], np.uint32)


@needs_kernel
@pytest.mark.parametrize(
    "shape,tiles,kind",
    [
        ((32, 256, 256), 1472, "plain"),  # the digits MLP's products: K slices
        ((32, 256, 256), 1472, "weight_t"),
        ((32, 64, 32), 1472, "plain"),
        ((32, 257, 32), 1, "plain"),  # one product, no slices
    ],
)
@pytest.mark.usefixtures("chain_blas")
def test_nan_payloads_are_those_of_the_numpy_path(monkeypatch, shape, tiles, kind):
    """Where NaNs of distinct payloads meet (in a product's chain or the slices' sum),
    which one NumPy and BLAS keep follows their loops: a run whose kernel stores a NaN is
    handed back to the NumPy path, so the bits are the same, payloads included."""
    got, taken = _matmul_results(monkeypatch, True, shape, kind, tiles, payloads=True)
    want, none = _matmul_results(monkeypatch, False, shape, kind, tiles, payloads=True)
    assert taken >= 1 and none == 0
    for run, (x, y) in enumerate(zip(got, want)):
        assert x.view(np.uint32).tobytes() == y.view(np.uint32).tobytes(), f"run {run}"
    assert np.isnan(got[-1]).any()


@needs_kernel
@pytest.mark.parametrize("slices", [1, 2, 3])
@pytest.mark.usefixtures("chain_blas")
def test_a_run_storing_a_nan_is_handed_to_the_numpy_path(slices):
    """Chains of 1..40, 64 and 257 steps with NaNs of distinct payloads meeting: the
    kernel's run, handed to the NumPy path where it stores a NaN (``or_numpy``), gives the
    NumPy path's bits; without a NaN the kernel's own."""
    from tremula.libs.poplin.codelets import _product_2d

    rng = np.random.default_rng(slices)
    handed = kept = 0
    for k in [*range(1, 41), 64, 257]:
        if slices == 1 and k < exact.MIN_CHAIN:
            continue
        a, b = _operands(rng, (slices, 8, k, 32), False, False, specials=False)
        if k % 3:  # NaNs of each payload, meeting in chains and sums
            for x in (a, b):
                flat = x.reshape(-1).view(np.uint32)
                spots = rng.integers(0, flat.size, max(2, flat.size // 20))
                flat[spots] = rng.choice(NANS, spots.size)
        out, want = np.zeros((8, 32), np.float32), np.zeros((8, 32), np.float32)
        reference = _product_2d if slices == 1 else None

        def numpy_run(a=a, b=b, out=out):
            if slices == 1:
                _product_2d(a[0], b[0], out)()
            else:
                np.add.reduce(np.matmul(a, b), axis=0, out=out)

        run = exact.sliced_sum(a, b, out, reference)
        assert run is not None
        with np.errstate(all="ignore"):
            numpy_run(out=want)
            no_nan = run()
            exact.or_numpy(run, numpy_run)()
        assert no_nan != np.isnan(want).any()
        handed += not no_nan
        kept += no_nan
        assert out.view(np.uint32).tobytes() == want.view(np.uint32).tobytes(), k
    assert handed and kept, (handed, kept)


@needs_kernel
def test_fusion_off_leaves_the_compute_sets_apart(monkeypatch):
    monkeypatch.setattr(fusion, "ENABLED", False)
    calls = []
    monkeypatch.setattr(flatplan, "fused_step", lambda *a: calls.append(1) or None)
    _, taken = _matmul_results(monkeypatch, True, (32, 256, 256), "plain", 1472)
    assert taken == 0 and calls  # asked, none fused
    assert poplin_fused.MIN_PARTIALS_BYTES > 32 * 256 * 16 * 4


@needs_kernel
@pytest.mark.parametrize("a_t,b_t", [(False, False), (False, True), (True, False)])
@pytest.mark.usefixtures("chain_blas")
def test_a_single_long_product_takes_the_kernel_with_the_bits_of_its_numpy_path(a_t, b_t):
    """One product (no K slices) of at least ``MIN_CHAIN`` steps: checked against the run
    the caller passes (poplin's ``_product_2d``, ``(b^T a^T)^T`` for a weight read as
    ``W^T``); shorter chains stay on it."""
    from tremula.libs.poplin.codelets import _product_2d

    rng = np.random.default_rng(9)
    a, b = _operands(rng, (1, 32, exact.MIN_CHAIN, 64), a_t, b_t)
    want = np.empty((32, 64), np.float32)
    with np.errstate(all="ignore"):
        _product_2d(a[0], b[0], want)()
    out = np.zeros_like(want)
    run = exact.sliced_sum(a, b, out, _product_2d)
    assert run is not None
    run()
    assert _same(out, want)
    assert exact.sliced_sum(a, b, out) is None  # no reference given: not taken
    short, b2 = _operands(rng, (1, 32, exact.MIN_CHAIN // 2, 64), a_t, b_t)
    assert exact.sliced_sum(short, b2, out, _product_2d) is None


@needs_kernel
def test_a_reference_that_differs_keeps_the_numpy_path():
    """The check compares with the caller's path: one that rounds otherwise (here the
    product through float64) declines the kernel."""

    def other(a, b, out):
        return lambda: np.copyto(out, (a.astype(np.float64) @ b).astype(np.float32))

    rng = np.random.default_rng(2)
    a, b = _operands(rng, (1, 32, 256, 64), False, False, specials=False)
    assert exact.sliced_sum(a, b, np.empty((32, 64), np.float32), other) is None


def test_a_kernel_that_cannot_be_built_leaves_the_numpy_path(monkeypatch):
    """An llvmlite without the calls used (or no native target): a warning, no kernel."""

    def broken():
        raise AttributeError("module 'llvmlite.binding' has no attribute 'create_pass_builder'")

    monkeypatch.setattr(exact, "_compile", broken)
    with pytest.warns(RuntimeWarning, match="compiled products are off"):
        assert exact._kernels.__wrapped__() is None
    monkeypatch.setattr(exact, "_kernels", lambda: None)
    rng = np.random.default_rng(1)
    a, b = _operands(rng, (4, 32, 16, 64), False, False, specials=False)
    assert exact.sliced_sum(a, b, np.empty((32, 64), np.float32)) is None


def test_a_deferred_run_makes_its_fast_form_on_the_second_call():
    """``jit.deferred``: the first call runs the NumPy path and makes nothing; the second
    makes the fast run once and uses it from then on (the NumPy path where none is made)."""
    log = []

    def make(fast):
        log.append("make")
        return (lambda: log.append("fast")) if fast else None

    run = jit.deferred(lambda: log.append("first"), lambda: make(True))
    for _ in range(3):
        run()
    assert log == ["first", "make", "fast", "fast"]
    log.clear()
    run = jit.deferred(lambda: log.append("first"), lambda: make(False))
    for _ in range(3):
        run()
    assert log == ["first", "make", "first", "first"]


def _split_model(a, b):
    """The ``"split"`` order from the kernel's own chains (``S == 1`` calls, the operands
    re-viewed): one chain over ``k``, or for the rows past the last whole group of 12 and
    the first and last 8 columns of each group's first 6 rows, the chain over even ``k``
    plus the chain over odd ``k``."""
    M, N = a.shape[0], b.shape[1]
    whole, even, odd = (np.empty((M, N), np.float32) for _ in range(3))
    for x, y, out in ((a, b, whole), (a[:, 0::2], b[0::2], even), (a[:, 1::2], b[1::2], odd)):
        run = exact._bound(x[None], y[None], out, exact._orientation(*_key(x, y, out)))
        run()
    two = np.zeros((M, N), bool)
    full = M - M % exact.SPLIT_GROUP
    two[full:] = True
    for g in range(0, full, exact.SPLIT_GROUP):
        two[g : g + 6, :8] = two[g : g + 6, N - 8 :] = True
    return np.where(two, even + odd, whole)


def _key(x, y, out):
    steps = [tuple(s // 4 if n > 1 else 0 for n, s in zip(v.shape, v.strides)) for v in (x, y)]
    return (1, *x.shape, y.shape[1], (0, *steps[0]), (0, *steps[1]), (out.shape[1], 1))


SPLIT_SHAPES = [(32, 64, 256), (32, 256, 256), (256, 32, 256), (64, 32, 256), (24, 32, 128)]


@needs_kernel
@pytest.mark.parametrize("shape", SPLIT_SHAPES)  # M, k, N: the digits MLP's and others
@pytest.mark.parametrize("a_t", [False, True])
def test_the_split_order_sums_the_elements_it_names_in_two_chains(shape, a_t):
    """The ``"split"`` run (the whole chain, then blocks in two chains copied over the
    elements they name) against the same chains computed whole and picked by a mask."""
    M, k, N = shape
    rng = np.random.default_rng(M + k)
    a, b = _operands(rng, (1, M, k, N), a_t, False, specials=False)
    key = exact.candidate(a, b, np.empty((M, N), np.float32), lambda *args: None)
    assert key is not None and exact._split_worth(key)
    out = np.full((M, N), 7.0, np.float32)
    exact._run(a, b, out, exact._orientation(*key), "split")()
    want = _split_model(np.ascontiguousarray(a[0]), np.ascontiguousarray(b[0]))
    assert np.array_equal(out.view(np.int32), want.view(np.int32))


@needs_kernel
@pytest.mark.parametrize("shape", SPLIT_SHAPES)
@pytest.mark.parametrize("a_t,b_t", [(False, False), (True, False), (True, True)])
def test_a_single_product_that_takes_the_kernel_gives_the_bits_of_its_numpy_path(shape, a_t, b_t):
    """Whichever order this host's BLAS passes the check in (``"chain"``, ``"split"``), a
    taken single product gives ``_product_2d``'s bits on fresh operands, specials
    included; shapes no order reproduces stay on the NumPy path."""
    from tremula.libs.poplin.codelets import _product_2d

    M, k, N = shape
    rng = np.random.default_rng(k)
    a, b = _operands(rng, (1, M, k, N), a_t, b_t, specials=False)
    out, want = np.zeros((M, N), np.float32), np.zeros((M, N), np.float32)
    run = exact.sliced_sum(a, b, out, _product_2d)
    if run is None:
        pytest.skip("this host's BLAS sums this product in an order the kernel lacks")
    for draw in range(3):
        fresh, fresh_b = _operands(rng, (1, M, k, N), a_t, b_t, specials=draw == 2)
        a[...], b[...] = fresh, fresh_b
        with np.errstate(all="ignore"):
            _product_2d(a[0], b[0], want)()
            exact.or_numpy(run, _product_2d(a[0], b[0], out))()
        assert want.view(np.int32).tobytes() == out.view(np.int32).tobytes(), draw
