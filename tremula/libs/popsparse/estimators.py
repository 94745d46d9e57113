"""Cycle estimates of PopSparse's vertices, exchanges, reductions and casts (PopLibs'
``popsparse/PerformanceEstimation.hpp`` and its planner), shared by the planner
(``cost.py``) and the codelets (``codelets/``): a vertex estimate is one function here that
both call.

Every function is vectorised: size arguments may be NumPy arrays (one entry per planner
candidate) and results have their broadcast shape (int64). Vertex estimates are tile cycles:
a worker's cycles count ``num_worker_contexts`` times (the barrel) plus the supervisor's own
part ("total = worker cycles x 6 + supervisor").

PopLibs gives the shape of each estimate and most constants; where a constant is known only
as a range, or not at all, the value chosen here is marked ``# [choice]``.
"""

from __future__ import annotations

import numpy as np

from tremula.libs.poplin import estimators as poplin_est
from tremula.libs.popsparse.layout import rectangle_split, worker_split
from tremula.target import Target

Array = np.ndarray | int


def cdiv(a: Array, b: Array) -> np.ndarray:
    """Ceiling division of non-negative integers (arrays or ints)."""
    return -(-np.asarray(a, dtype=np.int64) // np.asarray(b, dtype=np.int64))


# ---- exchange, zeroing, reduction, cast (the planner's cost model) ----


def exchange_cycles(target: Target, num_bytes: Array, share: Array = 1) -> np.ndarray:
    """``ceil(16 bytes / (round(16 exchangeBytesPerCycle) x share))``; ``share`` is 2 when
    the two tiles of a super-tile receive the same data at once."""
    rate = round(16 * target.exchange_bytes_per_cycle)
    return cdiv(16 * np.asarray(num_bytes, dtype=np.int64), rate * np.asarray(share))


def broadcast_share(target: Target, consecutive_receivers: Array) -> np.ndarray:
    """2 when data goes to an even run of consecutive tiles and super-tiles of 2 can receive
    together (PopLibs' exchange estimator), else 1."""
    pairs = target.tiles_per_super_tile == 2 and target.supports_super_tile_send_receive
    even = np.asarray(consecutive_receivers) % 2 == 0
    return np.where(pairs & even, 2, 1).astype(np.int64)


#: [choice] supervisor set-up of the vertex that zeroes partials.
ZERO_OVERHEAD_CYCLES = 20


def zero_cycles(target: Target, num_bytes: Array) -> np.ndarray:
    """Zeroing ``num_bytes`` of partials: one 64-bit store per worker cycle. What the
    vertices of a first compute (distribution) pay for zeroing their partials ("zeroInfo": the
    64-bit words of partials to zero) on the device."""
    w = target.num_worker_contexts
    words = cdiv(num_bytes, 8)
    return np.where(words > 0, w * (ZERO_OVERHEAD_CYCLES + cdiv(words, w)), 0)


def planner_zero_cycles(target: Target, num_partials: Array) -> np.ndarray:
    """What PopLibs' planner charges for zeroing ``num_partials`` partials of a tile
    (``FullyConnectedPlan.cpp`` around lines 647 and 821): it calls ``zeroPartialsCycles``
    with the partials *per worker*, ``ceil(num_partials / W)``, and that helper computes a
    cycle count but returns its argument times the number of workers (a PopLibs quirk):
    about the partials of the tile, ``ceil(num_partials / W) x W``. The device charges the
    zeroing itself (:func:`zero_cycles`)."""
    w = target.num_worker_contexts
    return cdiv(num_partials, w) * w


def reduce_cycles(
    target: Target, partials_size: int, depth: Array, outputs: Array, out_size: int | None = None
) -> np.ndarray:
    """Reduce ``depth`` partials into ``outputs`` values per tile: the reduction of the
    partials is PopLibs' conv reduction helper (``Reduce`` in
    ``PerformanceEstimation.hpp``), i.e. poplin's ``ReduceAdd`` estimate
    (:func:`tremula.libs.poplin.estimators.reduce_cycles`); outputs of the partials' type
    unless ``out_size`` is given."""
    out = partials_size if out_size is None else out_size
    return poplin_est.reduce_cycles(target, outputs, depth, partials_size, out, False)


def cast_cycles(target: Target, n: Array, from_size: int, to_size: int) -> np.ndarray:
    """``(max(ceil(n/6/pw), ceil(n/6/ow)) + 26) x 6`` (PopLibs' Cast estimate); 0 for no
    elements."""
    w = target.num_worker_contexts
    pw, ow = target.vector_width(from_size), target.vector_width(to_size)
    n = np.asarray(n, dtype=np.int64)
    cycles = (np.maximum(cdiv(n, w * pw), cdiv(n, w * ow)) + 26) * w
    return np.where(n > 0, cycles, 0)


# ---- element-wise vertices (PerformanceEstimation.hpp) ----

#: Fast paths of the element-wise Fwd worker: (type size, Z) -> (overhead, per row, per nz).
EW_FWD_FAST = {(2, 8): (28, 15, 3), (2, 4): (30, 11, 2), (4, 4): (25, 13, 3), (4, 2): (27, 11, 2)}
EW_FWD_OVERHEAD = 30  # [choice] worker overhead of the general-Z path
#: The general-Z path as PopLibs' estimator charges it (the planner's): its loop constant
#: once per row, ``16 + numZ/8 x 3 x numY`` (half), ``12 + numZ/4 x 3 x numY`` (float)
#: type size -> (per row, Z chunk).
EW_FWD_ESTIMATE = {2: (16, 8), 4: (12, 4)}
#: The general-Z path as the assembly runs it (``SparseDenseMatMulElementWise_half_float.S``,
#: ``_float_float.S``): per row 12 bundles, per 8-wide (half) /
#: 4-wide (float) chunk of Z 17 / 12 bundles plus 3 per non-zero.
EW_FWD_ASM_ROW = 12
EW_FWD_ASM_CHUNK = {2: 17, 4: 12}
EW_FWD_ASM_NZ = 3


def ew_fwd_terms(
    type_size: int, z: Array, assembly: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(overhead, per row, per nz) cycles of the element-wise Fwd / GradA worker for ``z``
    batch columns: PopLibs' fast paths (``EW_FWD_FAST``); else PopLibs' estimator (3 cycles
    per nz per 64-bit chunk of ``z``, 8 half / 4 float, plus a remainder term [choice]), or
    with ``assembly`` what the Fwd codelet's assembly pays (a partial chunk as a whole one
    [choice])."""
    z = np.asarray(z, dtype=np.int64)
    row, chunk = EW_FWD_ESTIMATE[type_size]
    overhead = np.full(z.shape, EW_FWD_OVERHEAD)
    if assembly:
        chunks = cdiv(z, chunk)
        per_row = EW_FWD_ASM_ROW + chunks * EW_FWD_ASM_CHUNK[type_size]
        per_nz = EW_FWD_ASM_NZ * chunks
    else:
        per_row = np.full(z.shape, row)
        per_nz = 3 * (z // chunk) + 2 * (z % chunk != 0)  # [choice] the remainder
    for (size, zz), (o, r, n) in EW_FWD_FAST.items():
        if size == type_size:
            hit = z == zz
            overhead, per_row, per_nz = (
                np.where(hit, o, overhead),
                np.where(hit, r, per_row),
                np.where(hit, n, per_nz),
            )
    return overhead, per_row, per_nz


def ew_fwd_worker(
    type_size: int, z: Array, rows: Array, nz_per_row: Array, assembly: bool = False
) -> np.ndarray:
    """One worker of the element-wise Fwd / GradA vertex over ``rows`` rows of
    ``nz_per_row`` non-zeros each: ``overhead + rows (per row + nz per nz)``
    (:func:`ew_fwd_terms`)."""
    overhead, per_row, per_nz = ew_fwd_terms(type_size, z, assembly)
    rows = np.asarray(rows, dtype=np.int64)
    return np.where(rows > 0, overhead + rows * (per_row + np.asarray(nz_per_row) * per_nz), 0)


def ew_fwd_split_worker(
    target: Target, type_size: int, z_grain: int, z_grains: int, row_nnz: np.ndarray
) -> int:
    """The slowest worker of the element-wise Fwd vertex on one sub-group of an *actual*
    pattern: its rows (non-zeros per row, in sub-group order) split over the workers as the
    partitioner splits them (:func:`layout.worker_split`), each worker costed by PopLibs'
    estimator on its own rows. The device's static estimate (:func:`ew_product_cycles`) assumes the
    plan's uniform rows instead; this is what a pattern's imbalance adds to it."""
    row_nnz = np.asarray(row_nnz, dtype=np.int64)
    worst = 0
    for r0, nr, _, nzg in worker_split(row_nnz, z_grains, target.num_worker_contexts):
        overhead, per_row, per_nz = ew_fwd_terms(type_size, nzg * z_grain)
        rows = row_nnz[r0 : r0 + nr]
        worst = max(worst, int(overhead + nr * per_row + per_nz * rows.sum()))
    return worst


def ew_supervisor(
    constant: int,
    buckets: Array,
    with_info: Array,
    avg_sub_groups: Array = 1,
    search: int = 47,
    found: int = 46,
    skip: int = 32,
) -> np.ndarray:
    """The supervisor's walk over buckets (PopLibs' estimate): ``constant + skip (buckets -
    withInfo) avgSG + withInfo (search (avgFirstMatch + 1) + found)``, ``avgFirstMatch =
    (avgSG-1)/2``; ``skip`` is 32 for the element-wise vertices, 33 for the block ones."""
    buckets, with_info = np.asarray(buckets), np.asarray(with_info)
    avg = np.asarray(avg_sub_groups, dtype=np.float64)
    first = (avg - 1) / 2
    cycles = (
        constant + skip * (buckets - with_info) * avg + with_info * (search * (first + 1) + found)
    )
    return np.ceil(cycles).astype(np.int64)


def ew_transpose_worker(type_size: int, z: Array, nz: Array) -> np.ndarray:
    """One worker of the shared-bucket GradA ``Transpose`` vertex: the nz are divided over
    the workers at run time, ~10 cycles per nz per 64-bit chunk of Z (PopLibs' estimate)."""
    chunk = 8 if type_size == 2 else 4
    nz = np.asarray(nz, dtype=np.int64)
    return np.where(nz > 0, 20 + nz * 10 * cdiv(z, chunk), 0)  # [choice] 20 set-up


#: Element-wise GradW: per output row overhead, fast-path cycles per nz for (size, Z).
EW_GRADW_ROW = 9  # [choice] within PopLibs' 7-11
EW_GRADW_FAST = {(2, 8): 5, (2, 4): 4, (4, 4): 5, (4, 2): 4}


def ew_gradw_worker(type_size: int, z: Array, rows: Array, nz: Array) -> np.ndarray:
    """One worker of the element-wise GradW vertex: ``rows`` output rows and ``nz`` values
    each accumulated over ``z`` (half ``11 + Z/4``, float ``9 + Z/2`` off the fast paths)."""
    z = np.asarray(z, dtype=np.int64)
    per_nz = 11 + cdiv(z, 4) if type_size == 2 else 9 + cdiv(z, 2)
    for (size, zz), cycles in EW_GRADW_FAST.items():
        if size == type_size:
            per_nz = np.where(z == zz, cycles, per_nz)
    nz = np.asarray(nz, dtype=np.int64)
    return np.where(nz > 0, EW_GRADW_ROW * np.asarray(rows) + nz * per_nz, 0)


# ---- block vertices (PerformanceEstimation.hpp) ----

#: Cycles per Z of the AMP block Fwd/GradA worker: block edge -> (float, half).
AMP_CYCLES_PER_Z = {4: (4, 2), 8: (8, 4), 16: (4, 4)}
#: [choice] inner-loop overhead of the AMP block worker for Z = 1, 2, >= 3 (PopLibs: 14-25).
AMP_INNER_OVERHEAD = (14, 18, 25)
AMP_ROW_CYCLES = 4  # [choice] the "small X term" of the supervisor, per block row


def amp_weight_loads(target: Target, edge: int, type_size: int, partials_size: int) -> int:
    """Weight loads per block: 2 for 16x16 blocks when the AMP has 8 conv units for these
    input and partials types (``target.conv_units``), else 1."""
    units = target.conv_units(type_size, partials_size)
    return 2 if edge == 16 and units <= 8 else 1


def block_fwd_cycles(
    target: Target,
    edge: int,
    sizes: tuple[int, int],
    z: Array,
    blocks: Array,
    rows: Array,
    buckets: Array,
    with_info: Array,
) -> np.ndarray:
    """The AMP block Fwd (and GradA ``TransposeAMPBlock``) vertex over ``buckets`` buckets of
    ``blocks`` blocks in ``rows`` block rows each, ``sizes`` = (input, partials) type sizes:
    the supervisor's bucket walk ``40 + 33 (buckets - withInfo) + withInfo (46 + 56)`` (one
    sub-group per bucket) and, per bucket with info, :func:`block_fwd_sub_group`."""
    walk = ew_supervisor(40, buckets, with_info, **BLOCK_WALK)
    work = block_fwd_sub_group(target, edge, sizes, z, blocks, rows)
    return walk + np.asarray(with_info) * work


#: The block vertices' walk: search, found and skip cycles (PopLibs' estimate).
BLOCK_WALK = {"search": 46, "found": 56, "skip": 33}


def block_fwd_sub_group(
    target: Target, edge: int, sizes: tuple[int, int], z: Array, blocks: Array, rows: Array
) -> np.ndarray:
    """What the AMP block Fwd vertex pays for one sub-group of ``blocks`` blocks in ``rows``
    block rows (the workers split ``z`` only). Supervisor, per block ``area / (float ? 2 :
    4) + 3 + 12 weightLoads`` and per block row a small X term; each worker, per block,
    ``weightLoads (innerOverhead + Z cyclesPerZ - 3 retainX)``, ``retainX`` for every block
    after the first of its row."""
    type_size, partials_size = sizes
    w = target.num_worker_contexts
    loads = amp_weight_loads(target, edge, type_size, partials_size)
    blocks, rows = np.asarray(blocks, dtype=np.int64), np.asarray(rows, dtype=np.int64)
    per_block_sup = edge * edge // (2 if type_size == 4 else 4) + 3 + 12 * loads
    sup = blocks * per_block_sup + rows * AMP_ROW_CYCLES
    zw = np.maximum(cdiv(z, w), 1)
    inner = np.where(
        zw == 1,
        AMP_INNER_OVERHEAD[0],
        np.where(zw == 2, AMP_INNER_OVERHEAD[1], AMP_INNER_OVERHEAD[2]),
    )
    per_z = AMP_CYCLES_PER_Z[edge][0 if type_size == 4 else 1]
    worker = loads * (blocks * (inner + zw * per_z) - 3 * np.maximum(blocks - rows, 0))
    return sup + w * np.maximum(worker, 0)


#: Non-AMP block GradW: block edge -> ((yOverhead, cyclesPerZ) half in, (...) float in).
BLOCK_GRADW = {4: ((29, 6), (45, 12)), 8: ((113, 24), (208, 48)), 16: ((441, 96), (505, 96))}


def block_gradw_cycles(
    target: Target, edge: int, type_size: int, z: Array, blocks: Array
) -> np.ndarray:
    """``GradWBlock`` on one bucket: blocks split over the workers, each
    ``yOverhead + Z x cyclesPerZ``."""
    w = target.num_worker_contexts
    y_overhead, per_z = BLOCK_GRADW[edge][0 if type_size == 2 else 1]
    per_worker = cdiv(blocks, w) * (y_overhead + np.asarray(z) * per_z)
    return ew_supervisor(40, 1, 1, **BLOCK_WALK) + w * per_worker


def block_gradw_amp_cycles(
    target: Target, edge: int, type_size: int, z: Array, blocks: Array, z_grain: int
) -> np.ndarray:
    """``GradWAMPBlock`` on one bucket, supervisor-driven over Z blocks of ``z_grain``: per
    block and Z block a weight load (``z_grain x edge`` values at 8 bytes per cycle) and an
    AMP run at the tile's peak MACs per cycle. [choice: PopLibs' constants for it were not
    recorded]"""
    load = cdiv(z_grain * edge * type_size, 8) + 12
    run = cdiv(edge * edge * z_grain, target.max_macs_per_cycle_per_tile(type_size)) + 10
    return ew_supervisor(40, 1, 1, **BLOCK_WALK) + (
        np.asarray(blocks) * cdiv(z, z_grain) * (load + run)
    )


def block_transpose_gradw_cycles(
    target: Target, edge: int, type_size: int, rows: Array, z: Array, z_grain: int
) -> np.ndarray:
    """Re-laying a ``[rows][z]`` dense operand into ``edge x z_grain`` blocks for the GradW
    AMP method: ``18 + (34 + blocksPerWorker (3 + zBlocks (3 + vectors))) x W``
    (PopLibs' ``blockTransposeGradW`` estimate)."""
    w = target.num_worker_contexts
    vectors = cdiv(edge * z_grain, target.vector_width(type_size))
    per_worker = cdiv(cdiv(rows, edge), w) * (3 + cdiv(z, z_grain) * (3 + vectors))
    return 18 + (34 + per_worker) * w


def block_bucket_transpose_cycles(
    target: Target, edge: int, type_size: int, blocks: Array
) -> np.ndarray:
    """The partial transpose of a bucket's nz blocks before the block GradA pass: blocks
    split over the workers, 2 cycles per vector of a block plus 8 per block. [choice]"""
    w = target.num_worker_contexts
    vectors = cdiv(edge * edge, target.vector_width(type_size))
    blocks = np.asarray(blocks, dtype=np.int64)
    return np.where(blocks > 0, w * (20 + cdiv(blocks, w) * (8 + 2 * vectors)), 0)


# ---- whole vertices (planner and codelets) ----


def worker_pieces(
    rows: np.ndarray, z_grains: np.ndarray, workers: int
) -> tuple[np.ndarray, np.ndarray]:
    """Rows and Z grains of each worker's piece (``[N, workers]``, zeros for idle workers)
    for ``rows`` uniform rows: contiguous row ranges beyond ``2 x workers`` rows, else the
    rectangle split."""
    n = rows.size
    r_out = np.zeros((n, workers), dtype=np.int64)
    z_out = np.zeros((n, workers), dtype=np.int64)
    big = rows > 2 * workers
    r_out[big, 0], z_out[big, 0] = cdiv(rows[big], workers), z_grains[big]
    small = np.flatnonzero(~big & (rows > 0))
    if small.size:
        pairs, inverse = np.unique(
            np.stack([rows[small], z_grains[small]]), axis=1, return_inverse=True
        )
        for j in range(pairs.shape[1]):
            pieces = rectangle_split(int(pairs[0, j]), int(pairs[1, j]), workers)
            sel = small[inverse.reshape(-1) == j]
            for k, (_, nr, _, nzg) in enumerate(pieces):
                r_out[sel, k], z_out[sel, k] = nr, nzg
    return r_out, z_out


def ew_product_cycles(
    target: Target,
    type_size: int,
    z_grains: np.ndarray,
    z_grain: int,
    rows: np.ndarray,
    blocks: Array,
    buckets: Array,
    grad_a: bool,
    assembly: bool = False,
) -> np.ndarray:
    """An element-wise Fwd (or own-meta-info GradA) vertex over ``buckets`` buckets of one
    matching sub-group of ``blocks`` non-zeros in ``rows`` rows each, ``z_grains`` grains of
    ``z_grain`` batch columns; the workers as PopLibs' estimator, or as the Fwd assembly
    runs (``assembly``, :func:`ew_fwd_terms`)."""
    w = target.num_worker_contexts
    r_w, z_w = worker_pieces(rows, z_grains, w)
    per_row = np.where(rows > 0, cdiv(blocks, np.maximum(rows, 1)), 0)
    worker = ew_fwd_worker(type_size, z_w * z_grain, r_w, per_row[:, None], assembly)
    walk = ew_supervisor(46 if grad_a else 30, buckets, buckets)
    return walk + w * buckets * worker.max(axis=1)


def ew_transpose_product_cycles(
    target: Target, type_size: int, z: Array, blocks: Array, buckets: Array
) -> np.ndarray:
    """An element-wise GradA vertex reading the forward meta-info (shared buckets)."""
    w = target.num_worker_contexts
    sup = ew_supervisor(68, buckets, buckets, search=44, found=0)
    return sup + w * buckets * ew_transpose_worker(type_size, z, cdiv(blocks, w))


def ew_gradw_cycles(
    target: Target, type_size: int, z: Array, rows: Array, blocks: Array
) -> np.ndarray:
    """An element-wise GradW vertex over one bucket of ``blocks`` non-zeros in ``rows`` rows."""
    w = target.num_worker_contexts
    worker = ew_gradw_worker(type_size, z, cdiv(rows, w), cdiv(blocks, w))
    return ew_supervisor(30, 1, 1) + w * worker


#: [choice] cycles of the propagation control vertices: reading the overflow info and the
#: step counter, testing the X-distance bit (PopLibs' ``BitIsSet``), writing the codes.
CONTROL_CYCLES = {"init": 40, "step": 30}

#: [choice] cycles of a dense-slice copy vertex: the exchange before it writes the slice
#: into the tile's buffer (as the Copy program it stands for would), the vertex only starts.
COPY_CYCLES = 10
