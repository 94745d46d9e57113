"""K-sliced float32 products and their stage-2 sum in one compiled pass, with the bits of
the stacked ``np.matmul`` and ``np.add.reduce`` they replace (the ``fast`` extra).

A plan that cuts ``K`` into ``S`` slices computes, per output element, ``S`` partial
products (one BLAS call per slice: ``p_s = a_s @ b_s``) and stage 2 adds them in slice
order: ``out = ((p_0 + p_1) + p_2) + ...``. OpenBLAS's kernels compute each element of a
product as one chain of fused multiply-adds over ``k`` in order, starting from zero
(``acc = fma(a[i, k], b[k, j], acc)``), for the shapes the checks below accept. This
module's kernel computes exactly that chain per slice and adds the slices in the same
order, in registers: no partials are written and read again, and one call replaces ``S``
products and the reduction.

The kernel is LLVM code built with llvmlite (numba's code generator, installed with the
``fast`` extra) for the host CPU, compiled once per process on first use: a tile of
:data:`ROWS` output rows by :data:`LANES` ``x`` :data:`VECTORS` columns is kept in vector
registers, each slice's chain in fresh accumulators added to the tile's running sums (an
``fma`` intrinsic: one rounding per step, as the BLAS kernel's instruction). The operand
whose rows are read as vectors must have unit stride along them; when neither ``b`` (the
normal orientation) nor ``a`` (the transposed one, ``out^T = b^T a^T``: the same chains,
as ``fma`` multiplies either way round) does, ``a`` is packed into a kept buffer each run.

Nothing here is assumed of the BLAS: each distinct call (shape, slice count, strides of the
operands and of the partials, orientation) is first checked bit for bit against the stacked
``np.matmul`` and ``np.add.reduce`` on random data with zeros, signed zeros, infinities and
NaNs in it (:func:`_passes`), three draws; a call that differs, a shape the tiles do not
divide, operands sharing memory with the output, no llvmlite, or compiled kernels switched
off (:func:`tremula.libs.jit.set_enabled`) leaves the caller on the NumPy path.

Where a single product's check fails in that order, it is tried in the ``"split"`` order
of OpenBLAS's Haswell kernel (:data:`VARIANTS`), in which some elements are two chains
(over even and over odd ``k``) added at the end: the kernel's two-slice form over strided
views gives those, and all of a run's calls go through one compiled ``batch`` call.

NaN payloads are not the kernel's: where two NaNs meet in an operation (an operand's NaN
and the default NaN of ``inf - inf`` or ``0 * inf``, two NaN operands), which one survives
depends on the operand order of the instruction, which BLAS kernels, compilers and even
NumPy's own loops choose differently (NumPy 2.2 and 2.4 differ; NumPy 2.4's adds keep the
first operand's in whole vectors and the second's in a row's tail). The check therefore
requires the same bits of every other value and NaN at the same places, and a run that
stores a NaN says so (the kernel returns it): the caller then runs its NumPy path, which
writes every output again with NumPy's payloads (:func:`or_numpy`).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import warnings
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tremula.libs import jit

F32 = np.dtype(np.float32)
#: the register tile: output rows (of the broadcast operand) by vectors of lanes
ROWS, VECTORS, LANES = 8, 2, 16
#: whether the kernel is offered (tests switch it off for the reference path)
ENABLED = True
#: a single product (no K slices) is computed here from this many steps of its chain on.
#: Measured in the digits MLP's step on the cpu device (a 2-core Xeon, 1000 steps, the
#: product timed in place): 256 x 32 x 256 (``h^T dy``) 34.5 against OpenBLAS's 39-43 us,
#: 32 x 64 x 256 12.3-13.4 against 13.4-14.8, 64 x 32 x 256 11.2-11.7 against 9.1-10.7
#: (the one loss), 32 x 256 x 256 28-33 against 34-37; shorter chains stay with OpenBLAS
MIN_CHAIN = 32
#: the orders the kernel sums in, tried in turn for each call (the first whose bits match
#: on :func:`_passes`'s draws is taken): ``"chain"``, one chain over ``k`` per element and
#: slice; ``"split"`` (a single product), that chain for most elements and, for the rest,
#: two chains (over even and over odd ``k``) added at the end: the elements OpenBLAS's
#: Haswell sgemm kernel sums so (its pick on an AVX-512 AMD EPYC host, where the kernel
#: runs about 2x faster than it): the rows past the last whole group of
#: :data:`SPLIT_GROUP` and, in each group's first half, the first and last
#: :data:`SPLIT_EDGE` columns
VARIANTS = ("chain", "split")
SPLIT_GROUP, SPLIT_EDGE = 12, 8
#: the NumPy path of a single product: ``reference(a, b, out)`` gives its run
Reference = Callable[[np.ndarray, np.ndarray, np.ndarray], Callable[[], None]]
_LLVMLITE = importlib.util.find_spec("llvmlite") is not None


def available() -> bool:
    """Whether the compiled kernel may run: llvmlite is installed, compiled kernels are
    on (:func:`tremula.libs.jit.available`) and :data:`ENABLED`."""
    return ENABLED and _LLVMLITE and jit.available()


def sliced_sum(
    a: np.ndarray, b: np.ndarray, out: np.ndarray, reference: Reference | None = None
) -> Callable[[], bool] | None:
    """A run writing ``out = sum over s of a[s] @ b[s]`` (``a`` ``[S, M, k]``, ``b``
    ``[S, k, N]``, ``out`` ``[M, N]``, float32 views kept alive by the caller) with the bits
    of ``np.matmul(a, b)`` into partials of ``out``'s strides then ``np.add.reduce`` over
    the slices, returning True; False where it stored a NaN, whose payload the caller's
    NumPy path must give (:func:`or_numpy`); None where the kernel does not apply or its
    check fails (see the module docstring). A single product (``S == 1``) is taken for
    chains of at least :data:`MIN_CHAIN` steps, checked against ``reference(a[0], b[0],
    out)``'s run (the caller's NumPy path for it). The kernels are compiled on the first
    call that gets here (:func:`deferred` puts that off to a prepared run's second call)."""
    key = candidate(a, b, out, reference)
    if key is None or _kernels() is None:
        return None
    variant = _variant(key, reference if key[0] == 1 else None)
    if variant is None:
        return None
    orient = _orientation(*key)
    return None if orient is None else _run(a, b, out, orient, variant)


@cache
def sums_in_chains() -> bool:
    """Whether this host's BLAS sums each element of a K-sliced product in one chain over
    ``k``, the kernel's ``"chain"`` order (OpenBLAS's SkylakeX kernels do; its Haswell
    kernel, its pick on some AMD EPYC hosts, splits some elements in two chains, and the
    check then declines K-sliced calls): one probe call through :func:`sliced_sum`'s own
    check. False where the kernel is not available."""
    if not available():
        return False
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 32, 16)).astype(np.float32)
    b = rng.standard_normal((2, 16, 64)).astype(np.float32)
    return sliced_sum(a, b, np.empty((32, 64), np.float32)) is not None


def or_numpy(
    run: Callable[[], bool] | None, numpy_run: Callable[[], None]
) -> Callable[[], None] | None:
    """``run`` (of :func:`sliced_sum`, or runs of it in turn, False where any stored a NaN),
    then ``numpy_run`` (the caller's NumPy path, writing the same outputs from the same
    operands) where it stored a NaN; None where ``run`` is None."""
    if run is None:
        return None

    def run_or_numpy() -> None:
        if not run():
            numpy_run()

    return run_or_numpy


def candidate(
    a: np.ndarray, b: np.ndarray, out: np.ndarray, reference: Reference | None = None
) -> tuple | None:
    """The call's key (shape and element strides) where :func:`sliced_sum` may take the
    kernel, from the arrays alone (nothing compiled or checked); None where it cannot."""
    if not available() or a.ndim != 3 or b.ndim != 3 or out.ndim != 2:
        return None
    if not (a.dtype == b.dtype == out.dtype == F32):
        return None
    if a.shape[0] < 2 and (reference is None or a.shape[0] < 1 or a.shape[2] < MIN_CHAIN):
        return None
    (S, M, k), N = a.shape, b.shape[2]
    if b.shape[:2] != (S, k) or out.shape != (M, N) or k < 1:
        return None
    sa, sb, so = (_elements(x) for x in (a, b, out))
    if sa is None or sb is None or so is None or not out.flags.writeable:
        return None
    if any(_overlap(x, y) for x, y in ((out, a), (out, b), (a, b))):
        return None  # (NumPy multiplies an operand by its own transpose with ``syrk``)
    key = (S, M, k, N, sa, sb, so)
    return None if _orientation(*key) is None else key


def _overlap(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether ``x`` and ``y`` may share memory (True where that is too hard to tell)."""
    try:
        return bool(np.shares_memory(x, y, max_work=_OVERLAP_WORK))
    except np.exceptions.TooHardError:
        return True


#: the effort ``np.shares_memory`` may spend (NumPy's stubs type it as its named values)
_OVERLAP_WORK: Any = 1 << 16


def _elements(x: np.ndarray) -> tuple[int, ...] | None:
    """Element strides (0 for axes of one element); None unless each is a positive whole
    number of elements."""
    out = []
    for n, s in zip(x.shape, x.strides):
        if n == 1:
            out.append(0)
        elif s <= 0 or s % F32.itemsize:
            return None
        else:
            out.append(s // F32.itemsize)
    return tuple(out)


def _orientation(S: int, M: int, k: int, N: int, sa: tuple, sb: tuple, so: tuple) -> str | None:
    """``"normal"`` (vectors along ``b``'s rows), ``"transposed"`` (along ``a``'s columns:
    ``out^T = b^T a^T``) or ``"packed"`` (transposed, ``a`` copied first), when the tiles
    divide the shape; else None."""
    width = LANES * VECTORS
    if sb[2] in (0, 1) and M % ROWS == 0 and N % width == 0:
        return "normal"
    if N % ROWS or M % width:
        return None
    return "transposed" if sa[1] in (0, 1) else "packed"


def _bound(a: np.ndarray, b: np.ndarray, out: np.ndarray, orient: str) -> Callable[[], bool]:
    """The kernel call of :func:`sliced_sum` for views ``a``, ``b``, ``out`` (the kernels
    compiled: :func:`sliced_sum` checked): True where it stored no NaN."""
    kernels = _kernels()
    assert kernels is not None
    which, args, pack = _call(a, b, out, orient)
    fn = kernels[which]
    if pack is None:
        return lambda: not fn(*args)
    copyto, (packed, source) = np.copyto, pack

    def run() -> bool:
        copyto(packed, source)
        return not fn(*args)

    return run


def _call(a: np.ndarray, b: np.ndarray, out: np.ndarray, orient: str) -> tuple[int, tuple, Any]:
    """A kernel call for views ``a``, ``b``, ``out``: which kernel (0 vector stores, 1
    scattered), its arguments, and the copy ``(packed, source)`` to make first (None where
    the orientation reads ``a`` in place)."""
    (S, M, k), N = a.shape, b.shape[2]
    sa, sb, so = (_elements(x) or () for x in (a, b, out))
    if orient == "normal":  # x = a [m, s, k], y = b [s, k, n], z = out [m, n]
        x, xs, y, ys, zs, P, Q = a, (sa[1], sa[0], sa[2]), b, (sb[0], sb[1]), so, M, N
    else:  # x = b^T [n, s, k], y = a^T [s, k, m], z = out^T [n, m]
        x, xs, P, Q, zs = b, (sb[2], sb[0], sb[1]), N, M, (so[1], so[0])
        y, ys = a, (sa[0], sa[2])
    packed = None
    if orient == "packed":
        packed = np.empty((S, k, M), F32)
        y, ys = packed, (k * M, M)
    args = (
        x.ctypes.data,
        *xs,
        y.ctypes.data,
        *ys,
        out.ctypes.data,
        *zs,
        P,
        Q,
        S,
        k,
    )
    return int(zs[1] != 1), args, None if packed is None else (packed, a.transpose(0, 2, 1))


def _split_plan(key: tuple) -> tuple[int, int, int, int] | None:
    """How the ``"split"`` order (see :data:`VARIANTS`) runs call ``key``, in whole kernel
    tiles: ``(base, tail, edge, width)``: the chain over rows ``[0, base)``, two chains over
    rows ``[tail, M)`` (straight into the output where ``tail`` is the last whole group's
    end, else into a buffer) and over rows ``[0, edge)`` of the first and last ``width``
    columns (into a buffer; ``edge`` 0 where there are no whole groups). None where it does
    not apply (K slices, an odd chain, tiles that do not fit)."""
    S, M, k, N = key[:4]
    orient = _orientation(*key)
    if S != 1 or k < 2 or k % 2 or orient is None:
        return None
    rs, cs = (ROWS, LANES * VECTORS) if orient == "normal" else (LANES * VECTORS, ROWS)
    full = M - M % SPLIT_GROUP
    tail = M - -(-(M - full) // rs) * rs
    if tail < 0:
        return None
    base = full if tail == full else M
    edge, width = min(M, -(-full // rs) * rs), min(N, -(-SPLIT_EDGE // cs) * cs)
    return base, tail, edge, N if 2 * width >= N else width


def _split_worth(key: tuple) -> bool:
    """Whether the ``"split"`` order applies to call ``key`` and computes again (in its
    two chains) at most half of the output (else OpenBLAS is about as fast)."""
    plan = _split_plan(key)
    if plan is None:
        return False
    base, tail, edge, width = plan
    M, N = key[1], key[3]
    columns = width if width == N else 2 * width
    again = (base - tail) * N + edge * columns  # beyond the M x N of one pass
    return 2 * again <= M * N


def _split(a: np.ndarray, b: np.ndarray, out: np.ndarray, orient: str) -> Callable[[], bool]:
    """The ``"split"`` order's run (see :data:`VARIANTS`, :func:`_split_plan`): the kernel's
    chain over the rows in whole groups, then its two slices (even and odd ``k``) over the
    rest and over the groups' edge columns, copied from kept buffers into ``out`` where
    they cover more. True where no kernel call stored a NaN (the caller's NumPy path then
    writes every output again)."""
    (_, M, k), N = a.shape, b.shape[2]
    sa, sb, so = (_elements(x) or () for x in (a, b, out))
    plan = _split_plan((1, M, k, N, sa, sb, so))
    assert plan is not None  # (_variant checked it)
    base, tail, edge, width = plan
    full = M - M % SPLIT_GROUP
    (sm, sk), (sk2, sn) = a[0].strides, b[0].strides

    def chains(r0: int, r1: int, c0: int, c1: int, dst: np.ndarray) -> tuple[int, tuple, Any]:
        x = as_strided(a[0, r0:], (2, r1 - r0, k // 2), (sk, sm, 2 * sk))
        y = as_strided(b[0, :, c0:], (2, k // 2, c1 - c0), (sk2, 2 * sk2, sn))
        keep.append((x, y, dst))
        return _call(x, y, dst, orient)

    calls: list[tuple[int, tuple, Any]] = []
    copies: list[tuple[np.ndarray, np.ndarray]] = []
    keep: list[tuple[np.ndarray, ...]] = []
    if base:
        calls.append(_call(a[:, :base], b, out[:base], orient))
    if tail < M:
        kept = out[tail:] if tail == full else np.empty((M - tail, N), F32)
        calls.append(chains(tail, M, 0, N, kept))
        if tail < full:
            copies.append((out[full:], kept[full - tail :]))
    if full:
        kept = np.empty((edge, width if width == N else 2 * width), F32)
        calls.append(chains(0, edge, 0, width, kept[:, :width]))
        if width < N:
            calls.append(chains(0, edge, N - width, N, kept[:, width:]))
        # each group's first half, its first and last SPLIT_EDGE columns: [group, row, side, col]
        shape, (ro, co), (rk, ck) = (
            (full // SPLIT_GROUP, SPLIT_GROUP // 2, 2, SPLIT_EDGE),
            out.strides,
            kept.strides,
        )
        copies.append(
            (
                as_strided(out, shape, (SPLIT_GROUP * ro, ro, (N - SPLIT_EDGE) * co, co)),
                as_strided(
                    kept, shape, (SPLIT_GROUP * rk, rk, (kept.shape[1] - SPLIT_EDGE) * ck, ck)
                ),
            )
        )
    kernels = _kernels()
    assert kernels is not None
    batch, copyto = kernels[2], np.copyto
    packs = [pack for _, _, pack in calls if pack is not None]
    table = np.array([(which, *args) for which, args, _ in calls], np.int64)
    address, n = table.ctypes.data, len(calls)

    def run(_kept: tuple = (table, keep)) -> bool:  # (what the table's addresses point into)
        for packed, source in packs:
            copyto(packed, source)
        stored_nan = batch(address, n)
        for dst, src in copies:
            copyto(dst, src)
        return not stored_nan

    return run


@cache
def _variant(key: tuple, reference: Reference | None) -> str | None:
    """The first of :data:`VARIANTS` that :func:`_passes` for call ``key``; None if none."""
    for variant in VARIANTS:
        if (variant == "chain" or _split_worth(key)) and _passes(key, reference, variant):
            return variant
    return None


def _passes(key: tuple, reference: Reference | None, variant: str = "chain") -> bool:
    """Whether the kernel in ``variant``'s order gives the stacked product's and
    reduction's bits (``reference``'s for a single product) for call ``key`` (shape,
    element strides of ``a``, ``b`` and the output), on three draws of random data with
    special values."""
    rng = np.random.default_rng(0)
    with np.errstate(all="ignore"):
        return all(_draw_passes(key, reference, rng, variant) for _ in range(3))


def _run(
    a: np.ndarray, b: np.ndarray, out: np.ndarray, orient: str, variant: str
) -> Callable[[], bool]:
    """The kernel call of :func:`sliced_sum` in ``variant``'s order (see :data:`VARIANTS`)."""
    return _bound(a, b, out, orient) if variant == "chain" else _split(a, b, out, orient)


def _draw_passes(
    key: tuple, reference: Reference | None, rng: np.random.Generator, variant: str = "chain"
) -> bool:
    """One draw of :func:`_passes`: the NumPy path (partials of the output's strides,
    one slab per slice; ``reference``'s run) against the kernel on the same operands."""
    S, M, k, N, sa, sb, so = key
    orient = _orientation(*key)
    if orient is None:
        return False
    a = _random_view(rng, (S, M, k), sa)
    b = _random_view(rng, (S, k, N), sb)
    out = _random_view(rng, (M, N), so)
    parts = _random_view(rng, (S, M, N), (M * N, *so))
    want = out.copy()
    if reference is not None:
        want = _random_view(rng, (M, N), so)
        reference(a[0], b[0], want)()
    else:
        np.matmul(a, b, out=parts)
        np.add.reduce(parts, axis=0, out=want)
    stored_no_nan = _run(a, b, out, orient, variant)()
    return _same(out, want) and stored_no_nan != bool(np.isnan(want).any())


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """The same bits, where the NaNs' payloads may differ (see the module docstring)."""
    nan = np.isnan(want)
    if not np.array_equal(np.isnan(got), nan):
        return False
    return bool(np.array_equal(got[~nan].view(np.int32), want[~nan].view(np.int32)))


_SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e38], F32)


def _random_view(rng: np.random.Generator, shape: tuple, steps: tuple) -> np.ndarray:
    """A view of ``shape`` with element strides ``steps`` over fresh random memory (normal
    values, some special ones, a row of -0.0 and one of +0.0 where there are rows)."""
    span = 1 + sum((n - 1) * s for n, s in zip(shape, steps))
    with np.errstate(over="ignore"):
        data = rng.standard_normal(span).astype(F32)
    spots = rng.integers(0, span, size=max(1, span // 97))
    data[spots] = _SPECIALS[rng.integers(0, len(_SPECIALS), size=spots.size)]
    view = as_strided(data, shape, tuple(s * F32.itemsize for s in steps))
    if shape[-2] > 2:
        view[..., 0, :] = -0.0
        view[..., 1, :] = 0.0
    return view


@cache
def _kernels() -> tuple[Any, Any, Any] | None:
    """The compiled kernels (vector stores, scattered stores, and ``batch(table, n)``
    running ``n`` calls of them given as rows of 64-bit integers: see
    :func:`tremula.libs.poplin.exact_ir._batch`) as ctypes functions:
    ``(x, sxp, sxs, sxk, y, sys, syk, z, szp, szq, P, Q, S, k)`` computing
    ``z[p, q] = sum over s of (chain over i < k of x[p, s, i] * y[s, i, q])`` for ``P``
    rows (a multiple of :data:`ROWS`) and ``Q`` columns (of ``LANES * VECTORS``); ``y`` has
    unit stride along ``q``; strides in elements. None where llvmlite cannot build them
    (the NumPy path then runs: an accelerator never stops a program)."""
    try:
        return _compile()
    except Exception as exc:  # an llvmlite without these calls, no native target, ...
        warnings.warn(f"poplin's compiled products are off: {exc}", RuntimeWarning, stacklevel=2)
        return None


def _compile() -> tuple[Any, Any, Any]:
    import llvmlite.binding as llvm

    with contextlib.suppress(RuntimeError):  # newer llvmlite initialises itself and raises
        llvm.initialize()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(_module_ir())
    module.verify()
    target = llvm.Target.from_default_triple()
    machine = target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )
    if hasattr(llvm, "create_pass_builder"):  # the new pass manager (recent llvmlite)
        builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(3))
        builder.getModulePassManager().run(module, builder)
    else:
        passes = llvm.create_pass_manager_builder()
        passes.opt_level = 3
        manager = llvm.create_module_pass_manager()
        passes.populate(manager)
        manager.run(module)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    signature = ctypes.CFUNCTYPE(
        ctypes.c_int32, ptr, i64, i64, i64, ptr, i64, i64, ptr, i64, i64, *[i64] * 4
    )
    vector, scatter = (signature(engine.get_function_address(n)) for n in ("vector", "scatter"))
    batch = ctypes.CFUNCTYPE(ctypes.c_int32, ptr, i64)(engine.get_function_address("batch"))
    _KEEP.append(engine)  # the code lives as long as its engine
    return vector, scatter, batch


_KEEP: list[Any] = []


def _module_ir() -> str:
    """The kernels' LLVM module (see :mod:`tremula.libs.poplin.exact_ir`)."""
    from tremula.libs.poplin.exact_ir import module

    return str(module(ROWS, VECTORS, LANES))
