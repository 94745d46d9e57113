"""Candidates of the matmul planner that loop over ``N``: PopLibs' output-channel serial
split (the conv planner's total in ``poplin/ConvModel.cpp``: ``broadcastBeforeLoop`` plus,
per serial step, the exchange, the partial products and the reduction).

Each tile owns a block of ``block_n`` columns (of an ``N`` cut in equal blocks) and the
whole of its share of ``K``; it computes the block ``step_n`` columns per serial step. Its
``A`` block is copied to it once before the loop (when other ``N`` blocks read it too), and
each step receives the ``B`` columns of the step and reduces its partials into the output
columns, so the partials and the received operands are those of one step's columns.
"""

from __future__ import annotations

import numpy as np

from tremula.libs.poplin import estimators as est
from tremula.libs.poplin import plan as P
from tremula.libs.poplin import plan_cost as C
from tremula.poplar.intervals import distinct
from tremula.target import Target


def n_loop_candidates(
    params: P.MatMulParams,
    target: Target,
    method: np.ndarray,
    swap: np.ndarray,
    splits: list[np.ndarray],
) -> dict[str, np.ndarray]:
    """Costed ``"n"`` loop candidates (the planner's table columns): the block splits
    whose ``N`` blocks are equal and whose ``K`` share does not fit in one step, each with
    the fewest steps (whole grains of columns dividing the block) that fit: more steps of
    the same block only add per-step overheads. Each split has its ``method`` (an index
    into :data:`P.METHODS`) and ``swap``."""
    pn = np.where(swap == 1, params.m, params.n)
    grain = P.method_grains(params, target, method)[0]
    cols = [*splits, method, swap, grain]
    budget = int(params.available_memory_proportion * target.memory_bytes_per_tile)
    keep = (pn % cols[2] == 0) & (cols[2] % grain == 0) & (cols[2] > grain)
    cols = [c[keep] for c in cols]
    pieces = C._piece_range(tuple(cols[:3]), cols[7])
    one = C._temp_bytes(params, tuple(cols[:4]), (cols[5], cols[6], cols[7]), pieces)
    cols = [c[one > budget] for c in cols]
    *cols, method, swap, grain = cols
    units = cols[2] // grain
    steps = np.zeros(units.size, dtype=np.int64)
    pending = np.arange(units.size)
    for count in _divisors(distinct(units)):
        pending = pending[units[pending] >= count]
        rows = pending[units[pending] % count == 0]
        if rows.size:
            fits = _temp(params, [c[rows] for c in cols], count) <= budget
            steps[rows[fits]] = count
            pending = pending[steps[pending] == 0]
    chosen = np.flatnonzero(steps)
    table = _cost(params, target, method[chosen], [c[chosen] for c in cols], steps[chosen])
    table["method"] = method[chosen]
    table["swap"] = swap[chosen]
    return table


def _divisors(values: np.ndarray) -> list[int]:
    """The divisors above 1 of any of ``values``, ascending."""
    out: set[int] = set()
    for v in values.tolist():
        small = [d for d in range(1, int(v**0.5) + 1) if v % d == 0]
        out.update(small)
        out.update(v // d for d in small)
    return sorted(out - {1})


def _temp(
    params: P.MatMulParams,
    cols: list[np.ndarray],
    steps: np.ndarray | int,
    pieces: C.Stage2Pieces | None = None,
) -> np.ndarray:
    """Temporary bytes per tile: the copy of the A block (when other N blocks read it),
    one step's partials and received B columns, or its partials and stage-2 buffer
    (``pieces``: of a step's block, found here if not given)."""
    bg, bm, bn, bkt, _, nm, nn, nk = cols
    s = C._size(params.in_type)
    b_blk = bg * bkt * (bn // steps)
    b_recv = np.where(nm > 1, b_blk - C._pieces(b_blk, nm)[1], 0) * s
    if pieces is None:
        pieces = C._piece_range((bg, bm, bn // steps), nk)
    part, red = C._partials_bytes(params, (bg, bm, bn // steps), nk, pieces)
    return np.where(nn > 1, bg * bm * bkt * s, 0) + np.maximum(part + b_recv, part + red)


_KEYS = (
    "bg", "bm", "bn", "bkt", "step", "ng", "nm", "nn", "nk", "serial", "share", "split",
    "stage2", "tiles", "cycles", "exchange", "compute", "reduce", "temp", "fits", "loop",
    "sn", "method", "swap",
)  # fmt: skip


def _busy(
    target: Target, recv: np.ndarray, sent: np.ndarray, own: np.ndarray, count: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(alone, paired) busy bytes of a tile receiving ``recv`` bytes of a block and
    sending its ``own`` piece (``sent``), when ``count`` tiles read the block: a super-tile
    pair reading the same block takes what both receive at twice the rate."""
    alone = np.maximum(sent, recv)
    if not (target.tiles_per_super_tile == 2 and target.supports_super_tile_send_receive):
        return alone, alone
    shared = np.maximum(recv - own, 0)
    return alone, np.where(count % 2 == 0, np.maximum(sent, recv - shared // 2), alone)


def _cost(
    params: P.MatMulParams,
    target: Target,
    method: np.ndarray,
    cols: list[np.ndarray],
    steps: np.ndarray,
) -> dict[str, np.ndarray]:
    """Cycles and temporary bytes of ``steps`` serial steps over each block's columns."""
    bg, bm, bn, bkt, ng, nm, nn, nk = cols
    s = C._size(params.in_type)
    sn = bn // steps
    a_blk, b_blk = bg * bm * bkt, bg * bkt * sn
    a_big, a_small = C._pieces(a_blk, nn)
    b_big, b_small = C._pieces(b_blk, nm)
    # before the loop: the A block to each of the nn tiles reading it (a Copy: each piece
    # sent once and received by the other tiles, a super-tile pair reading the same block
    # sharing the receive), the own piece copied on the tile
    a_alone, a_paired = _busy(target, (a_blk - a_small) * s, a_big * s, a_big * s, nn)
    copy = -(-a_big * s // target.memcpy_bytes_per_cycle)
    before = [
        np.where(nn > 1, est.exchange_cycles(target, b) + copy, 0) for b in (a_alone, a_paired)
    ]
    b_recv, b_sent = np.where(nm > 1, b_blk - b_small, 0) * s, np.where(nm > 1, b_big, 0) * s
    b_alone, b_paired = _busy(target, b_recv, b_sent, b_big * s, nm)
    each = [est.exchange_cycles(target, b) for b in (b_alone, b_paired)]
    # share "": both alone; "a": pairs reading the same A block share its broadcast; "b":
    # pairs reading the same B columns share them every step (P.SHARES order)
    options = np.stack([
        before[0] + steps * each[0], before[1] + steps * each[0], before[0] + steps * each[1]
    ])  # fmt: skip
    share = np.argmin(options, axis=0)
    exchange = options.min(axis=0)
    compute = C._step_compute(params, target, method, (bg, bm, sn, bkt))
    pieces = C._piece_range((bg, bm, sn), nk)
    reduce, split = C._reduce(params, target, (bg, bm, sn), nk, pieces), pieces.split
    temp = _temp(params, cols, steps, pieces)
    budget = int(params.available_memory_proportion * target.memory_bytes_per_tile)
    n = bg.size
    return {
        "bg": bg, "bm": bm, "bn": bn, "bkt": bkt, "step": bkt, "ng": ng, "nm": nm,
        "nn": nn, "nk": nk, "serial": steps, "share": share, "split": split,
        "stage2": C._stage2(params, nk).astype(np.int64), "tiles": ng * nm * nn * nk,
        "cycles": exchange + steps * (compute + reduce), "exchange": exchange,
        "compute": steps * compute, "reduce": steps * reduce, "temp": temp,
        "fits": (temp <= budget).astype(np.int64), "loop": np.full(n, P.LOOPS.index("n")),
        "sn": sn,
    }  # fmt: skip
