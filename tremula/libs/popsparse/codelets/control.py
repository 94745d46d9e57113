"""The control of the propagation phase: the schedule of an overflow info as
step codes, and the vertices on the control tile that read it at run time."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from tremula import poplar
from tremula.libs.popsparse import estimators as est
from tremula.libs.popsparse.layout import DIMS, propagation_steps


def schedule(
    partition: tuple[int, int, int], overflow_info: np.ndarray, return_home: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The propagation steps of an overflow info (:func:`layout.propagation_steps`) as
    codes: per step, the shift (0 none, ``1 + 2 dim + buffer written``), the compute
    (0 none, ``1 + buffer``) and the buffer then current. Shifts along a dimension of one
    partition move nothing and are dropped (so is a step left with nothing to do).
    ``return_home`` appends the shifts that bring every bucket back to its own PN (GradW,
    whose partial buckets travel)."""
    steps = propagation_steps(partition, overflow_info)
    moves: list[tuple[int | None, bool]] = [
        (None if s.shift is None else DIMS.index(s.shift), s.compute) for s in steps
    ]
    if return_home and steps:
        offset = steps[-1].offset
        for d in (2, 1, 0):
            moves += [(d, False)] * ((partition[d] - offset[d]) % partition[d])
    shift, comp, bufs = [], [], []
    buf = 0
    for k, (d, compute) in enumerate(moves):  # type: ignore[assignment]
        moved = d is not None and partition[d] > 1
        if k and not moved and not compute:
            continue
        if moved:
            buf ^= 1
        shift.append(1 + 2 * d + buf if moved else 0)
        comp.append(1 + buf if compute else 0)
        bufs.append(buf)
    return (
        np.array(shift, dtype=np.uint32),
        np.array(comp, dtype=np.uint32),
        np.array(bufs, dtype=np.uint32),
    )


class _Control(poplar.Codelet):
    """One step of the propagation loop's control on the control tile: the codes of step
    ``step`` of the schedule the overflow info gives (see :func:`schedule`)."""

    overflow_info = poplar.Input(poplar.UNSIGNED_SHORT)
    step = poplar.InOut(poplar.UNSIGNED_INT, kind="scalar")
    compute_code = poplar.Output(poplar.UNSIGNED_INT, kind="scalar")
    shift_code = poplar.Output(poplar.UNSIGNED_INT, kind="scalar")
    buffer = poplar.InOut(poplar.UNSIGNED_INT, kind="scalar")
    more = poplar.Output(poplar.UNSIGNED_INT, kind="scalar")
    px = poplar.State(poplar.UNSIGNED_INT)
    py = poplar.State(poplar.UNSIGNED_INT)
    pz = poplar.State(poplar.UNSIGNED_INT)
    return_home = poplar.State(poplar.UNSIGNED_INT)
    init: ClassVar[bool] = False

    @classmethod
    def compute(cls, v: poplar.Batch) -> None:
        info = v.overflow_info  # [replica, words]; one vertex
        part = (int(v.px[0]), int(v.py[0]), int(v.pz[0]))
        home = bool(v.return_home[0])
        cache = v.cached("schedules", dict)
        if info.shape[0] == 1 or (info == info[:1]).all():  # replicas agree (the usual case)
            rows, inverse = info[:1], np.zeros(info.shape[0], dtype=np.int64)
        else:
            rows, inverse = np.unique(info, axis=0, return_inverse=True)
        tables = []
        for row in rows:
            key = row.tobytes()
            if key not in cache:
                cache[key] = schedule(part, row, home)
            tables.append(cache[key])
        inverse = inverse.reshape(-1)
        count = np.array([t[0].size for t in tables], dtype=np.int64)[inverse]
        i = np.zeros_like(count) if cls.init else v.step[:, 0].astype(np.int64)
        live = i < count
        codes = np.zeros((3, info.shape[0]), dtype=np.uint32)  # shift, compute, buffer
        codes[2] = v.buffer[:, 0]
        for k, table in enumerate(tables):
            sel = np.flatnonzero((inverse == k) & live)
            for c in range(3):
                codes[c, sel] = table[c][i[sel]]
        v.more = live.astype(np.uint32)[:, None]
        if cls.init:  # nothing runs yet: step 0 is read by the loop's first condition
            v.step = 0
            v.buffer = 0
            v.compute_code = 0
            v.shift_code = 0
            return
        v.shift_code = codes[0][:, None]
        v.compute_code = codes[1][:, None]
        v.buffer = codes[2][:, None]
        v.step = np.where(live, i + 1, i).astype(np.uint32)[:, None]

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:
        return np.full(v.n, est.CONTROL_CYCLES["init" if cls.init else "step"])


class PropagationInit(_Control):
    """Start of the propagation phase: step 0, ``more`` when the schedule has steps."""

    name = "popsparse::PropagationInit"
    init = True


class PropagationStep(_Control):
    """The codes of the next step (the loop's condition), then ``step += 1``."""

    name = "popsparse::PropagationStep"
