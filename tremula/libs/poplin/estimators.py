"""Cycle estimators of poplin's vertices, shaped like PopLibs' own (the AMP's
``ConvPartial1x1Out`` estimator, and the ``ReduceAdd`` reduction of partials).

Each function is vectorised: the size arguments may be NumPy arrays (one entry per vertex,
or per planner candidate) and the result has their broadcast shape. The codelets' ``cycles``
and the planner call the same functions, so the plan's estimate and the profile agree.

All estimates are tile cycles of a supervisor vertex: the work is split over the
``num_worker_contexts`` workers and a worker's cycles count ``num_worker_contexts`` times
(the barrel), plus the supervisor's own overhead.
"""

from __future__ import annotations

import numpy as np

from tremula.target import Target

# ---- AMP (PopLibs' ConvPartial1x1Out estimator shape, poplin/PerformanceEstimation.hpp) ----
#: Input channels the AMP consumes per weight load (a conv unit's weights): 16 on Mk1/Mk2.
AMP_IN_CHANS = 16
#: Bytes of AMP coefficients loaded per cycle (one 64-bit load).
AMP_COEFF_LOAD_BYTES_PER_CYCLE = 8
#: Supervisor entry / exit of the vertex.
AMP_SUPERVISOR_CYCLES = 50
#: Per group of the vertex: ~12 outer set-up + ~10 for the last input-channel group.
AMP_GROUP_CYCLES = 22
#: Per extra input-channel group (partials are accumulated, not zeroed).
AMP_IN_GROUP_CYCLES = 15
#: Per pass (one weight load): ~19 loop + 6-7 set-up.
AMP_PASS_CYCLES = 26
#: Worker fixed cycles per pass (``~37-47``; 40 including the tag cycles).
AMP_WORKER_CYCLES = 40
#: Output positions that fill the AMP pipeline and are not charged ``coreCycles``.
AMP_PIPELINE_POSITIONS = 3

# ---- dot-product vertex (HMAC / VMAC shape) ----
MAC_SUPERVISOR_CYCLES = 11
MAC_WORKER_CYCLES = 12
MAC_OUTPUT_CYCLES = 5  # pointer set-up, accumulator clear, store, per output element

# ---- reduction of partials (PopLibs' ReduceAdd, popsparse/PerformanceEstimation.hpp) ----
REDUCE_WORKER_CYCLES = 32  # a worker's set-up and exit
REDUCE_PER_PARTIAL_CYCLES = 3  # per partial in each loop (load + add)
#: Loop cycles besides the partials, by (partials size, output size): float partials 7;
#: half partials "8/9" (PopLibs gives both): 8 into half outputs, 9 into float [choice].
REDUCE_LOOP_CYCLES = {(4, 4): 7, (4, 2): 7, (2, 2): 8, (2, 4): 9}
#: Outputs per loop: 4 floats or 8 halves (the accumulators).
REDUCE_LOOP_OUTPUTS = {4: 4, 2: 8}


def _ceil_div(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    return -(-np.asarray(a, dtype=np.int64) // np.asarray(b, dtype=np.int64))


def amp_load_elems(target: Target, in_size: int) -> int:
    """AMP input-load elements per cycle (= 64 bits / element size)."""
    if in_size <= 2:
        return target.fp16_conv_unit_input_load_elems_per_cycle
    return target.fp32_conv_unit_input_load_elems_per_cycle


def amp_out_chans(target: Target, in_size: int, partials_size: int) -> int:
    """Output channels per AMP pass: one per conv unit."""
    return target.conv_units(in_size, partials_size)


def amp_cycles(
    target: Target,
    in_size: int,
    partials_size: int,
    g: np.ndarray | int,
    m: np.ndarray | int,
    k: np.ndarray | int,
    n: np.ndarray | int,
) -> np.ndarray:
    """Tile cycles of an AMP partial vertex computing ``g`` products ``[m, k] @ [k, n]``.

    ``m`` rows are the AMP's output positions (split over the workers), ``k`` its input
    channels (groups of :data:`AMP_IN_CHANS`), ``n`` its output channels (one pass per
    ``conv_units``). Per pass the weights are loaded and each worker runs its positions
    through the AMP at ``coreCycles = AMP_IN_CHANS / inputLoadElems`` cycles each. The
    estimate is never below ``MACs / max_macs_per_cycle_per_tile``.
    """
    W = target.num_worker_contexts
    units = amp_out_chans(target, in_size, partials_size)
    core = _ceil_div(AMP_IN_CHANS, amp_load_elems(target, in_size))
    weight_load = _ceil_div(units * AMP_IN_CHANS * in_size, AMP_COEFF_LOAD_BYTES_PER_CYCLE)
    g, m, k, n = (np.asarray(x, dtype=np.int64) for x in (g, m, k, n))
    in_groups = _ceil_div(k, AMP_IN_CHANS)
    passes = _ceil_div(n, units)
    per_worker = _ceil_div(m, W)
    inner = W * (AMP_WORKER_CYCLES + np.maximum(per_worker - AMP_PIPELINE_POSITIONS, 0) * core)
    per_group = (
        AMP_GROUP_CYCLES
        + np.maximum(in_groups - 1, 0) * AMP_IN_GROUP_CYCLES
        + in_groups * passes * (AMP_PASS_CYCLES + weight_load + inner)
    )
    cycles = AMP_SUPERVISOR_CYCLES + g * per_group
    peak = _ceil_div(g * m * k * n, target.max_macs_per_cycle_per_tile(in_size, partials_size))
    return np.maximum(cycles, peak)


def mac_cycles(
    target: Target,
    in_size: int,
    integral: bool,
    g: np.ndarray | int,
    m: np.ndarray | int,
    k: np.ndarray | int,
    n: np.ndarray | int,
) -> np.ndarray:
    """Tile cycles of a dot-product vertex (no AMP): each worker takes a share of the
    ``g * m * n`` outputs and computes each as a dot product of length ``k``, one 64-bit
    vector per cycle (float / half), or one element per two cycles for integers."""
    W = target.num_worker_contexts
    g, m, k, n = (np.asarray(x, dtype=np.int64) for x in (g, m, k, n))
    outputs = _ceil_div(g * m * n, W)
    if integral:
        per_output = MAC_OUTPUT_CYCLES + 2 * k
    else:
        per_output = MAC_OUTPUT_CYCLES + _ceil_div(k, target.vector_width(in_size))
    return MAC_SUPERVISOR_CYCLES + W * (MAC_WORKER_CYCLES + outputs * per_output)


def reduce_cycles(
    target: Target,
    n_out: np.ndarray | int,
    partials: np.ndarray | int,
    partials_size: int,
    out_size: int,
    accumulate: bool,
) -> np.ndarray:
    """Tile cycles of PopLibs' ``ReduceAdd`` vertex (the reduction of matmul and convolution
    partials, as ``popsparse/PerformanceEstimation.hpp`` costs it) summing ``partials``
    partials into each of ``n_out`` outputs: each loop handles 4 float or 8 half outputs in
    ``3 x partials + 7`` cycles (half partials: 8 or 9), the loops are shared by the
    workers, and a worker costs 32 more: ``W x (32 + (3 depth + c) x ceil(loops / W))``,
    ``loops = ceil(n_out / width)``. When ``accumulate`` (``out += scale x sum``) each loop
    also loads and scales the output (+1).
    """
    W = target.num_worker_contexts
    psize = 4 if partials_size >= 4 else 2
    width = REDUCE_LOOP_OUTPUTS[psize]
    loop = REDUCE_LOOP_CYCLES[(psize, 4 if out_size >= 4 else 2)] + int(accumulate)
    n_out, partials = np.asarray(n_out, dtype=np.int64), np.asarray(partials, dtype=np.int64)
    loops = _ceil_div(_ceil_div(n_out, width), W)
    worker = REDUCE_WORKER_CYCLES + (REDUCE_PER_PARTIAL_CYCLES * partials + loop) * loops
    return W * worker


def exchange_cycles(target: Target, busy_bytes: np.ndarray | int) -> np.ndarray:
    """An internal exchange moving ``busy_bytes`` (max of sent and received) on a tile,
    with the sync before it; 0 when nothing moves (the engine's rule: sync, fixed cost,
    ``ceil(bytes / exchange_bytes_per_cycle)``)."""
    busy = np.asarray(busy_bytes, dtype=np.int64)
    cost = (
        target.max_ipu_sync_delay
        + target.exchange_fixed_cycles
        + _ceil_div(busy, target.exchange_bytes_per_cycle)
    )
    return np.where(busy > 0, cost, 0)
