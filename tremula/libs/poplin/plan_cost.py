"""The matmul planner's cost model: cycles and temporary bytes per tile of every candidate
split (vectorised over the candidates' table columns), costed like the engine runs it for
operands laid out by ``create_matmul_input_*`` (see :mod:`tremula.libs.poplin.plan`).

Per serial step: the sync and exchange of the operand blocks a tile does not hold, with the
super-tile pairing that makes it cheapest (:func:`_step_exchange`), and the block product
(:func:`_step_compute`); then stage 2, or a K loop's per-step reductions. Temporaries: a
step's received operand blocks plus the partials, or the partials plus the stage-2 receive
buffer (plus a K loop's accumulator); :func:`_fit_step` picks the longest K step within the
budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from tremula import poplar
from tremula.libs.poplin import estimators as est
from tremula.target import Target

if TYPE_CHECKING:
    from tremula.libs.poplin.plan import MatMulParams

#: The planner's methods (a candidate's ``method`` column indexes this).
METHODS = ("amp", "mac")


def _cost(
    params: MatMulParams,
    target: Target,
    method: np.ndarray,
    block: tuple[np.ndarray, ...],
    blocks: tuple[np.ndarray, ...],
    step: np.ndarray,
) -> dict[str, np.ndarray]:
    """Cycles and temporary bytes per tile of each candidate (vectorised), for K steps of
    ``step`` and a tile's share of ``K`` of about ``bkt``, by its ``method`` (an index into
    :data:`METHODS`)."""
    bg, bm, bn, bkt = block
    ng, nm, nn = blocks
    serial = _cdiv(bkt, step)
    nk = _cdiv(_cdiv(params.k, step), serial)
    serial = _cdiv(_cdiv(params.k, step), nk)
    looped = serial > 1
    pieces = _piece_range((bg, bm, bn), nk)
    temp = _temp_bytes(params, (bg, bm, bn, step), (nm, nn, nk), pieces)
    temp = temp + np.where(looped, accumulator_bytes(params, pieces.big), 0)
    budget = int(params.available_memory_proportion * target.memory_bytes_per_tile)
    exchange, share = _step_exchange(params, target, (bg, bm, bn, step), (nm, nn))
    compute = _step_compute(params, target, method, (bg, bm, bn, step))
    reduce = _reduce(params, target, (bg, bm, bn), nk, pieces)
    loop = _k_loop_reduce(params, target, (bg, bm, bn), nk, serial, pieces)
    reduce = np.where(looped, loop, reduce)
    split = pieces.split
    return {
        "bg": bg, "bm": bm, "bn": bn, "bkt": bkt, "step": step, "ng": ng, "nm": nm,
        "nn": nn, "nk": nk, "serial": serial, "share": share, "split": split,
        "stage2": (_stage2(params, nk) | looped).astype(np.int64), "tiles": ng * nm * nn * nk,
        "cycles": serial * (exchange + compute) + reduce, "exchange": serial * exchange,
        "compute": serial * compute, "reduce": reduce, "temp": temp,
        "fits": (temp <= budget).astype(np.int64), "loop": looped.astype(np.int64),
        "sn": bn,
    }  # fmt: skip


def _fit_step(
    params: MatMulParams,
    target: Target,
    block: tuple[np.ndarray, ...],
    blocks: tuple[np.ndarray, ...],
    k_grain: np.ndarray,
) -> np.ndarray:
    """The K step giving the fewest serial steps whose received operand blocks and
    partials fit the memory budget, for a tile owning about ``bkt`` of ``K`` (rounded up to
    whole grains; one grain when nothing fits)."""
    bg, bm, bn, bkt = block
    nk = blocks[2]
    pieces = _piece_range((bg, bm, bn), nk)
    part, red = _partials_bytes(params, (bg, bm, bn), nk, pieces)
    step = _step_within(params, target, block, blocks, k_grain, part, red)
    # a K loop also holds its accumulator
    rows = np.flatnonzero(step < bkt)
    if rows.size and params.out_type != params.partials_type:
        sub = [tuple(x[rows] for x in group) for group in (block, blocks)]
        acc = part[rows] + accumulator_bytes(params, pieces.big[rows])
        step[rows] = _step_within(params, target, *sub, k_grain[rows], acc, red[rows])  # type: ignore[call-arg, arg-type]
    return step


def _step_within(
    params: MatMulParams,
    target: Target,
    block: tuple[np.ndarray, ...],
    blocks: tuple[np.ndarray, ...],
    k_grain: np.ndarray,
    part: np.ndarray,
    red: np.ndarray,
) -> np.ndarray:
    """:func:`_fit_step` for ``part`` bytes held besides a step's operands."""
    bg, bm, bn, bkt = block
    nm, nn = blocks[:2]
    in_size = _size(params.in_type)
    budget = int(params.available_memory_proportion * target.memory_bytes_per_tile)
    per_k = in_size * (bg * bm * (nn - 1) / nn + bg * bn * (nm - 1) / nm)  # received bytes
    room = np.maximum(budget - part, 0)
    max_k = np.where(per_k > 0, room // np.maximum(per_k, 1e-9), bkt).astype(np.int64)
    max_k = np.minimum(max_k, bkt) // k_grain * k_grain
    fits = (max_k >= np.minimum(bkt, k_grain)) & (part + red <= budget)
    step = np.where(fits, np.minimum(bkt, np.maximum(max_k, 1)), np.minimum(bkt, k_grain))
    serial = _cdiv(bkt, step)
    return np.minimum(_cdiv(_cdiv(bkt, serial), k_grain) * k_grain, bkt)


def _temp_bytes(
    params: MatMulParams,
    block: tuple[np.ndarray, ...],
    blocks: tuple[np.ndarray, ...],
    pieces: Stage2Pieces,
) -> np.ndarray:
    """Temporary bytes per tile: the partials plus a step's received operand blocks, or
    plus the stage-2 receive buffer (``pieces``: of the block ``block[:3]``)."""
    bg, bm, bn, step = block
    nm, nn, nk = blocks
    part, red = _partials_bytes(params, (bg, bm, bn), nk, pieces)
    recv = _operand_recv_bytes((bg, bm, bn, step), (nm, nn), _size(params.in_type))
    return np.maximum(part + recv, part + red)


def _pieces(d: np.ndarray | int, n: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Largest and smallest of ``n`` near-equal pieces of ``d`` (offset ``* n // d``)."""
    return _cdiv(d, n), np.asarray(d) // n


def _operand_recv_bytes(
    block: tuple[np.ndarray, ...], blocks: tuple[np.ndarray, ...], in_size: int
) -> np.ndarray:
    """Most operand bytes a tile receives in one step: its A and B blocks but the pieces it
    holds (a created operand spreads a block over the tiles that read it)."""
    bg, bm, bn, step = block
    nm, nn = blocks
    a_blk, b_blk = bg * bm * step, bg * step * bn
    return (a_blk - _pieces(a_blk, nn)[1] + b_blk - _pieces(b_blk, nm)[1]) * in_size


def _step_exchange(
    params: MatMulParams,
    target: Target,
    block: tuple[np.ndarray, ...],
    blocks: tuple[np.ndarray, ...],
) -> tuple[np.ndarray, np.ndarray]:
    """Cycles of one serial step's operand exchange (with the sync before it) on the
    busiest tile, and the super-tile pairing used (an index into :data:`SHARES`).

    A tile receives its A block but its own piece, and its B block likewise, and sends its
    pieces. When the two tiles of a super-tile read the same A block (``share`` "a": every
    row of ``N`` blocks pairs up) they take what both receive at twice the rate: the busy
    bytes are ``received - shared / 2``, ``shared`` being the A block but both pieces.
    """
    bg, bm, bn, step = block
    nm, nn = blocks
    s = _size(params.in_type)
    a_blk, b_blk = bg * bm * step, bg * step * bn
    a_big, a_small = _pieces(a_blk, nn)
    b_big, b_small = _pieces(b_blk, nm)
    a_recv = np.where(nn > 1, a_blk - a_small, 0) * s
    b_recv = np.where(nm > 1, b_blk - b_small, 0) * s
    sent = (np.where(nn > 1, a_big, 0) + np.where(nm > 1, b_big, 0)) * s
    pairs = target.tiles_per_super_tile == 2 and target.supports_super_tile_send_receive
    alone = np.maximum(sent, a_recv + b_recv)
    busy = [alone]
    for mine, other, partner, count in ((a_recv, b_recv, a_big, nn), (b_recv, a_recv, b_big, nm)):
        shared = np.maximum(mine - partner * s, 0)  # what the partner receives too
        paired = np.maximum(sent, mine - shared // 2 + other)
        busy.append(np.where(pairs & (count % 2 == 0), paired, alone))
    stacked = np.stack(busy)
    share = np.argmin(stacked, axis=0)
    return est.exchange_cycles(target, stacked.min(axis=0)), share


def _step_compute(
    params: MatMulParams, target: Target, method: np.ndarray, block: tuple[np.ndarray, ...]
) -> np.ndarray:
    """On-tile cycles of one serial step's block product, with the compute-set launch, by
    each candidate's ``method`` (an index into :data:`METHODS`)."""
    in_size, p_size = _size(params.in_type), _size(params.partials_type)
    integral = poplar.as_type(params.in_type).is_integral
    compute = np.zeros(method.shape, dtype=np.int64)
    for m in np.flatnonzero(np.bincount(method, minlength=len(METHODS))).tolist():
        rows = np.flatnonzero(method == m)
        bg, bm, bn, step = (x[rows] for x in block)
        if METHODS[m] == "amp":
            compute[rows] = est.amp_cycles(target, in_size, p_size, bg, bm, step, bn)
        else:
            compute[rows] = est.mac_cycles(target, in_size, integral, bg, bm, step, bn)
    return compute + target.compute_set_launch_cycles


def reduce_pieces(bm: np.ndarray, bn: np.ndarray, nk: np.ndarray) -> np.ndarray:
    """The stage-2 split of an output block over its ``nk`` tiles: along ``m`` (rows)
    unless cutting along ``n`` gives a smaller largest piece (an index into
    :data:`SPLITS`)."""
    by_m = _cdiv(bm, nk) * bn
    by_n = bm * _cdiv(bn, nk)
    return (by_n < by_m).astype(np.int64)


class Stage2Pieces(NamedTuple):
    """The stage-2 pieces of each candidate's output block over its ``nk`` tiles: the split
    (an index into :data:`SPLITS`) and the elements of the largest and smallest piece
    (found once per candidate table, :func:`_piece_range`, for every cost that needs
    them)."""

    split: np.ndarray
    big: np.ndarray
    small: np.ndarray


def _piece_range(block: tuple[np.ndarray, ...], nk: np.ndarray) -> Stage2Pieces:
    """The stage-2 pieces of a full block ``(bg, bm, bn)`` over ``nk`` tiles."""
    bg, bm, bn = block
    split = reduce_pieces(bm, bn, nk)
    d, other = np.where(split == 0, bm, bn), bg * np.where(split == 0, bn, bm)
    big, small = _pieces(d, nk)
    return Stage2Pieces(split, big * other, small * other)


def _reduce(
    params: MatMulParams,
    target: Target,
    block: tuple[np.ndarray, ...],
    nk: np.ndarray,
    pieces: Stage2Pieces,
) -> np.ndarray:
    """Stage-2 cycles (exchange with its sync, launch, reduction) of the block's
    ``pieces``."""
    bg, bm, bn = block
    p_size, out_size = _size(params.partials_type), _size(params.out_type)
    _, big, small = pieces
    received = (nk - 1) * big * p_size  # the other tiles' partials of its piece
    sent = (bg * bm * bn - small) * p_size  # its partials of the other pieces
    cycles = est.exchange_cycles(target, np.maximum(received, sent))
    cycles = cycles + target.compute_set_launch_cycles
    cycles = cycles + est.reduce_cycles(target, big, nk, p_size, out_size, False)
    return np.where(_stage2(params, nk), cycles, 0)


def accumulator_bytes(params: MatMulParams, big: np.ndarray) -> np.ndarray:
    """Bytes per tile of a K loop's accumulator (partials type, the tile's stage-2 piece of
    at most ``big`` elements); none when the output has the partials type (the loop
    accumulates into it)."""
    if params.out_type == params.partials_type:
        return np.zeros_like(big)
    return big * _size(params.partials_type)


def _k_loop_reduce(
    params: MatMulParams,
    target: Target,
    block: tuple[np.ndarray, ...],
    nk: np.ndarray,
    serial: np.ndarray,
    pieces: Stage2Pieces,
) -> np.ndarray:
    """Stage-2 cycles of a K loop (PopLibs' input-channel serial split, as the conv
    planner's total in ``poplin/ConvModel.cpp`` has it: a reduction and an add-in-place per
    serial step): every step sums its partials into the
    accumulator (the first writes it, the others update it), then one cast into the output
    when the types differ."""
    bg, bm, bn = block
    p_size, out_size = _size(params.partials_type), _size(params.out_type)
    _, big, small = pieces
    busy = np.maximum((nk - 1) * big * p_size, (bg * bm * bn - small) * p_size)
    step = est.exchange_cycles(target, np.where(nk > 1, busy, 0))
    step = step + target.compute_set_launch_cycles
    first = step + est.reduce_cycles(target, big, nk, p_size, p_size, False)
    later = step + est.reduce_cycles(target, big, nk, p_size, p_size, True)
    cast = target.compute_set_launch_cycles + est.reduce_cycles(
        target, big, 1, p_size, out_size, False
    )
    return first + (serial - 1) * later + (cast if out_size != p_size else 0)


def _stage2(params: MatMulParams, nk: np.ndarray) -> np.ndarray:
    """A stage 2 runs when there are several partials or they need a cast."""
    return (np.asarray(nk) > 1) | (params.partials_type != params.out_type)


def _partials_bytes(
    params: MatMulParams, block: tuple[np.ndarray, ...], nk: np.ndarray, pieces: Stage2Pieces
) -> tuple[np.ndarray, np.ndarray]:
    """(partials, stage-2 receive) bytes per tile: partials exist when there is a stage 2;
    a tile receives the other tiles' partials of its piece of the block (``pieces``)."""
    bg, bm, bn = block
    p_size = _size(params.partials_type)
    part = np.where(_stage2(params, nk), bg * bm * bn * p_size, 0)
    return part, (nk - 1) * pieces.big * p_size


def _cdiv(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    return -(-np.asarray(a) // b)


def _size(type_name: str) -> int:
    return poplar.as_type(type_name).size
