"""Bucket sizing and the planner's cost model (PopLibs' ``FullyConnectedPlan.cpp``), vectorised
over candidate partitions ``(Px, Py, Pz)`` of one method and exchange plan.

:func:`candidate_table` returns, per candidate, the bucket sizes, the estimated cycles of
each planned pass (Fwd, GradA, GradW), the temporary bytes per tile (the maximum over all
phases of all passes) and whether the candidate is valid (no empty partition, uint16 ranges
of the meta-info respected). The planner picks among these; :func:`planner.estimate_cost`
evaluates one candidate with the same code.

The model assumes a uniform pattern, as PopLibs' planner does: every bucket holds one
sub-group of its own tile, ``ceil(Rg / P)`` grain blocks, and the propagation phase costs 0
cycles (its double buffers still count as temporary memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tremula.libs.popsparse import estimators as est
from tremula.libs.popsparse.options import Options
from tremula.libs.popsparse.params import FullyConnectedParams, exact_ceil
from tremula.target import Target

cdiv = est.cdiv

#: Exchange atom (bytes) that nz buckets are a multiple of (PopLibs' "exchAtom" = 8).
EXCHANGE_ATOM_BYTES = 8
#: Meta-info bucket sizes are a multiple of this many uint16 words.
META_INFO_ALIGN = 8
#: The planner's assumed sub-groups per bucket in the meta-info estimate.
ASSUMED_SUB_GROUPS = 2
UINT16_MAX = 0xFFFF


@dataclass(frozen=True)
class Method:
    """On-tile method (PopLibs' ``Plan::method``): the grain of each dim ``grouping =
    (groups, x, y, z)`` and the vertex of each pass."""

    grouping: tuple[int, int, int, int]
    fwd: str
    grad_a: str
    grad_w: str

    @property
    def is_block(self) -> bool:
        return self.fwd != "Forward"

    @property
    def shared_buckets(self) -> bool:
        """GradA reads the forward meta-info (``Transpose`` / ``TransposeAMPBlock``)."""
        return self.grad_a in ("Transpose", "TransposeAMPBlock")


@dataclass(frozen=True)
class Problem:
    """What the cost of a candidate depends on besides its partition."""

    params: FullyConnectedParams
    type_size: int
    partials_size: int
    options: Options
    target: Target

    @property
    def dims(self) -> tuple[int, int, int]:
        return self.params.shape


def occupancy(
    xg: np.ndarray | int, yg: np.ndarray | int, d: float
) -> tuple[np.ndarray, np.ndarray]:
    """Rows with a non-zero and non-zeros per such row of a uniform ``xg x yg`` grid of
    density ``d`` (``getNumGroupsGivenUniformSparsityPattern``)."""
    xg, yg = np.asarray(xg, dtype=np.float64), np.asarray(yg, dtype=np.float64)
    x_nz = _ceil(xg * (1.0 - (1.0 - d) ** yg))
    total = _ceil(xg * yg * d)
    y_nz = np.where(x_nz > 0, cdiv(total, np.maximum(x_nz, 1)), 0)
    return x_nz, y_nz


def _ceil(x: np.ndarray) -> np.ndarray:
    """``ceil`` ignoring float noise (see :func:`params.exact_ceil`)."""
    nearest = np.rint(x)
    close = np.abs(x - nearest) <= 1e-9 * np.maximum(1.0, np.abs(x))
    return np.where(close, nearest, np.ceil(x)).astype(np.int64)


def _align(x: np.ndarray | int, a: int) -> np.ndarray:
    return cdiv(x, a) * a


def total_nz_groups(problem: Problem, method: Method) -> int:
    """``Rg = G ceil((in/by) (out/bx) d)``: grain blocks of the whole matrix."""
    x, y, _ = problem.dims
    _, gx, gy, _ = method.grouping
    return exact_ceil((y // gy) * (x // gx) * problem.params.nz_ratio)


def nz_elems_per_bucket(problem: Problem, method: Method, buckets: np.ndarray) -> np.ndarray:
    """nz values per bucket: ``u = ceil(Rg / P)`` grain blocks, oversized by
    ``metaInfoBucketOversizeProportion`` (rounded half up), aligned to the exchange atom,
    then to 64 bits of partials when GradW is planned."""
    area = method.grouping[1] * method.grouping[2]
    unit = area * problem.type_size
    grain = math.lcm(unit, EXCHANGE_ATOM_BYTES) // unit
    u = cdiv(total_nz_groups(problem, method), buckets)
    oversized = np.floor(u * (1.0 + problem.options.meta_info_bucket_oversize_proportion) + 0.5)
    gpb = _align(oversized.astype(np.int64), grain)
    gw = 8 // problem.partials_size if problem.options.do_grad_w_pass else 1
    return _align(gpb * area, gw)


def meta_info_elems_per_bucket(
    problem: Problem, method: Method, xg: np.ndarray, yg: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, GradA) meta-info words per bucket for tiles of ``xg x yg`` grain blocks
    GradA is 0 when the buckets are shared (block methods, or element-wise
    with ``sharedBuckets``): the GradA pass then reads the forward meta-info."""
    d, opts = problem.params.nz_ratio, problem.options
    over = 1.0 + opts.meta_info_bucket_oversize_proportion
    grad_w = opts.do_grad_w_pass
    x_nz, y_nz = occupancy(xg, yg, d)
    if method.is_block:
        header = (7 + 6 * (4 if grad_w else 0)) * ASSUMED_SUB_GROUPS
    else:
        header = (9 + 6 * (5 + (1 + 4 if grad_w else 0))) * ASSUMED_SUB_GROUPS
    fwd = _align(header + _ceil(x_nz * (2 + y_nz) * over), META_INFO_ALIGN)
    if method.shared_buckets or not opts.do_grad_a_pass:
        return fwd, np.zeros_like(fwd)
    tx_nz, ty_nz = occupancy(yg, xg, d)
    grad_a = (9 + 6 * 5) * ASSUMED_SUB_GROUPS + _ceil(tx_nz * (2 + 2 * ty_nz) * over)
    return fwd, _align(grad_a, META_INFO_ALIGN)


def candidate_table(
    problem: Problem,
    method: Method,
    exchange_buckets: bool,
    px: np.ndarray,
    py: np.ndarray,
    pz: np.ndarray,
) -> dict[str, np.ndarray]:
    """Bucket sizes, cycles per pass, temporary bytes and validity of each candidate."""
    x, y, z = problem.dims
    _, gx, gy, gz = method.grouping
    xg, yg = cdiv(x // gx, px), cdiv(y // gy, py)
    zgt = (-(-z // gz)) // pz
    t = {"px": px, "py": py, "pz": pz, "xt": xg * gx, "yt": yg * gy, "zt": zgt * gz}
    t["nz"] = nz_elems_per_bucket(problem, method, px * py * pz)
    t["fwd_mi"], t["grad_a_mi"] = meta_info_elems_per_bucket(problem, method, xg, yg)
    u = cdiv(total_nz_groups(problem, method), px * py * pz)
    opts = problem.options
    fwd = _fwd_like(problem, method, t, u, (xg, yg), (px, py, pz), grad_a=False)
    t["fwd_cycles"], temp = fwd
    t["grad_a_cycles"] = np.zeros_like(px)
    t["grad_w_cycles"] = np.zeros_like(px)
    if opts.do_grad_a_pass:
        t["grad_a_cycles"], temp_a = _fwd_like(
            problem, method, t, u, (xg, yg), (px, py, pz), grad_a=True
        )
        temp = np.maximum(temp, temp_a)
    if opts.do_grad_w_pass:
        t["grad_w_cycles"], temp_w = _grad_w(problem, method, exchange_buckets, t, u, xg)
        temp = np.maximum(temp, temp_w)
    t["cycles"] = t["fwd_cycles"] + t["grad_a_cycles"] + t["grad_w_cycles"]
    t["temp"] = temp
    t["valid"] = np.logical_and.reduce(list(range_checks(problem, method, t).values()))
    return t


def range_checks(
    problem: Problem, method: Method, t: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Meta-info values must fit uint16: ids, offsets, counts, and for
    element-wise the byte offsets ``(Ytile-1) Ztile typeFactor`` of the dense operand. Each
    entry is true where the candidate meets the named limit."""
    tf = problem.type_size
    checks = {
        "sub-group ids Px*Py < 65535": t["px"] * t["py"] < UINT16_MAX,
        "numZ = Ztile <= 65535": t["zt"] <= UINT16_MAX,
        "nz values per bucket <= 65535": t["nz"] <= UINT16_MAX,
        "meta-info words per bucket <= 65536": (t["fwd_mi"] <= UINT16_MAX + 1)
        & (t["grad_a_mi"] <= UINT16_MAX + 1),
        "tile offsets Xtile-1, Ytile-1 <= 65535": (t["xt"] - 1 <= UINT16_MAX)
        & (t["yt"] - 1 <= UINT16_MAX),
    }
    if not method.is_block:
        checks["(Ytile-1) Ztile typeFactor <= 65535"] = (t["yt"] - 1) * t["zt"] * tf <= UINT16_MAX
        if not method.shared_buckets and problem.options.do_grad_a_pass:
            checks["GradA (Xtile-1) Ztile typeFactor, nz offsets <= 65535"] = (
                (t["xt"] - 1) * t["zt"] * tf <= UINT16_MAX
            ) & ((t["nz"] - 1) * tf <= UINT16_MAX)
    return checks


def _fwd_like(
    problem: Problem,
    method: Method,
    t: dict[str, np.ndarray],
    u: np.ndarray,
    grains: tuple[np.ndarray, np.ndarray],
    parts: tuple[np.ndarray, ...],
    grad_a: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Cycles and temporary bytes of the Fwd pass, or of GradA (X and Y exchanged), as
    PopLibs' planner costs it: distribution exchange, distribution compute, (free)
    propagation, reduction over the partitions of the pass's Y (or a cast)."""
    target, ts, ps = problem.target, problem.type_size, problem.partials_size
    px, py, pz = parts
    a_t, b_t = (t["yt"], t["xt"]) if grad_a else (t["xt"], t["yt"])
    pa, pb = (py, px) if grad_a else (px, py)
    zt = t["zt"]
    mi = t["grad_a_mi"] if grad_a and not method.shared_buckets else t["fwd_mi"]
    bucket = t["nz"] * ts + 2 * mi
    dense = b_t * zt * ts
    post = (pb > 1) | (ps != ts)
    partials = np.where(post, a_t * zt * ps, 0)
    # tiles of one dense slice: consecutive (x fastest) for Fwd; for GradA only when Px=Pz=1
    s_share = (
        est.broadcast_share(target, pa)
        if not grad_a
        else np.where(px * pz == 1, est.broadcast_share(target, pa), 1)
    )
    b_share = np.where(px == 1, est.broadcast_share(target, pz), 1)
    exchange = est.exchange_cycles(target, cdiv(dense * (pa - 1), pa), s_share)
    exchange = exchange + est.exchange_cycles(target, np.where(pz > 1, pz * bucket, 0), b_share)
    compute = est.planner_zero_cycles(target, a_t * zt) + _vertex(
        problem, method, t, u, grains, pz, grad_a
    )
    outs = cdiv(a_t * zt, pb)
    received = (pb - 1) * outs * ps
    reduce = np.where(
        pb > 1,
        est.exchange_cycles(target, received) + est.reduce_cycles(target, ps, pb, outs, ts),
        np.where(ps != ts, est.cast_cycles(target, a_t * zt, ps, ts), 0),
    )
    temp = np.maximum(dense + (pz - 1) * bucket + partials, 2 * bucket + dense + partials)
    temp = np.maximum(temp, partials + received)
    if grad_a and method.is_block:  # transpose the nz blocks of the bucket first
        edge = method.grouping[1]
        compute = compute + est.block_bucket_transpose_cycles(target, edge, ts, u)
        temp = temp + t["nz"] * ts
    return exchange + compute + reduce, temp


def _vertex(
    problem: Problem,
    method: Method,
    t: dict[str, np.ndarray],
    u: np.ndarray,
    grains: tuple[np.ndarray, np.ndarray],
    pz: np.ndarray,
    grad_a: bool,
) -> np.ndarray:
    """Distribution compute of one tile: the vertex over the ``Pz`` buckets of its group,
    each holding one matching sub-group of ``u`` grain blocks (the uniform pattern)."""
    target, ts = problem.target, problem.type_size
    xg, yg = grains
    rows_grid = (
        occupancy(yg, xg, problem.params.nz_ratio)[0]
        if grad_a
        else occupancy(xg, yg, problem.params.nz_ratio)[0]
    )
    rows = np.where(u > 0, np.maximum(cdiv(rows_grid, pz), 1), 0)
    zt, gz = t["zt"], method.grouping[3]
    if method.is_block:
        edge = method.grouping[1]
        return est.block_fwd_cycles(target, edge, (ts, problem.partials_size), zt, u, rows, pz, pz)
    if grad_a and method.grad_a == "Transpose":
        return est.ew_transpose_product_cycles(target, ts, zt, u, pz)
    return est.ew_product_cycles(target, ts, zt // gz, gz, rows, u, pz, grad_a)


def _grad_w(
    problem: Problem,
    method: Method,
    exchange_buckets: bool,
    t: dict[str, np.ndarray],
    u: np.ndarray,
    xg: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Cycles and temporary bytes of the GradW pass, as PopLibs' planner costs it: the dense
    operands' slices, an optional block re-layout, ``Pz - 1`` distribution exchanges of
    buckets or of operands, ``Pz`` computes into the nz partials, a final cast."""
    target, ts, ps = problem.target, problem.type_size, problem.partials_size
    xt, yt, zt, pz = t["xt"], t["yt"], t["zt"], t["pz"]
    inputs = (xt + yt) * zt * ts
    cycles = est.exchange_cycles(target, inputs)
    partials = t["nz"] * ps
    edge, zg = method.grouping[1], method.grouping[3]
    if method.grad_w == "GradWAMPBlock":
        if problem.options.enable_structured_rearrangements:
            cycles = cycles + est.block_transpose_gradw_cycles(target, edge, ts, yt, zt, zg)
        else:
            cycles = cycles + est.exchange_cycles(target, yt * zt * ts)
    mi_bytes = 2 * t["fwd_mi"]
    if exchange_buckets:
        step = est.exchange_cycles(target, partials + mi_bytes)
        temp = 2 * (partials + mi_bytes) + inputs
    else:
        step = est.exchange_cycles(target, inputs)
        temp = partials + 2 * inputs
    cycles = cycles + (pz - 1) * step + est.planner_zero_cycles(target, t["nz"])
    if method.grad_w == "GradW":
        rows_grid = occupancy(xg, cdiv(problem.dims[1], t["py"]), problem.params.nz_ratio)[0]
        rows = np.where(u > 0, np.maximum(cdiv(rows_grid, pz), 1), 0)
        vertex = est.ew_gradw_cycles(target, ts, zt, rows, u)
    elif method.grad_w == "GradWBlock":
        vertex = est.block_gradw_cycles(target, edge, ts, zt, u)
    else:
        vertex = est.block_gradw_amp_cycles(target, edge, ts, zt, u, zg)
    cycles = cycles + pz * vertex
    if ps != ts:
        cycles = cycles + est.cast_cycles(target, t["nz"], ps, ts)
    return cycles, temp
