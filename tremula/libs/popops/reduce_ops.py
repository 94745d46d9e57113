"""Reduction operations of popops: the ``Operation`` enum and one table of their properties
(combining ufunc, first-stage squaring, the operation later stages use, identity, types
accepted, cycle-table entries) with the NumPy kernels every reduce codelet shares.

The kernels reduce over axes of a reshaped array (``reduce_axes``) or over consecutive runs
of a flat array (``reduce_runs``, empty runs allowed); ``LOG_ADD`` is ``log(sum(exp(x)))``
computed stably (``m + log(sum(exp(x - m)))`` with ``m`` the maximum, ``-inf`` for an empty
or all ``-inf`` run).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


class Operation(enum.Enum):
    """PopLibs' ``popops::Operation`` for reductions."""

    ADD = "ADD"
    MUL = "MUL"
    MIN = "MIN"
    MAX = "MAX"
    SQUARE_ADD = "SQUARE_ADD"
    LOG_ADD = "LOG_ADD"
    LOGICAL_AND = "LOGICAL_AND"
    LOGICAL_OR = "LOGICAL_OR"


@dataclass(frozen=True)
class OpSpec:
    """What a reduction does and costs.

    ``ufunc`` combines values (``None`` for LOG_ADD); ``square`` squares the inputs of the
    first stage; ``then`` is the operation of the stages that combine partials; ``kinds``
    lists the NumPy dtype kinds accepted as input; ``cycles_per_vector`` and
    ``accumulating`` feed the estimators (PopLibs' reduction estimators: ADD and SQUARE_ADD use the
    accumulators, 4 floats or 8 halves a vector; MIN/MAX/MUL the natural vector width;
    LOG_ADD 23 cycles per float2 / 13 per half4; the logical ops run C++ code at ~26 cycles
    per element).
    """

    op: Operation
    ufunc: np.ufunc | None
    square: bool
    then: Operation
    kinds: str
    cycles_per_vector: float
    accumulating: bool = False

    @property
    def name(self) -> str:
        return self.op.value


SPECS: dict[Operation, OpSpec] = {
    s.op: s
    for s in (
        OpSpec(Operation.ADD, np.add, False, Operation.ADD, "fiu", 1, True),
        OpSpec(Operation.SQUARE_ADD, np.add, True, Operation.ADD, "fiu", 2, True),
        OpSpec(Operation.MUL, np.multiply, False, Operation.MUL, "fiu", 1),
        OpSpec(Operation.MIN, np.minimum, False, Operation.MIN, "fiu", 1),
        OpSpec(Operation.MAX, np.maximum, False, Operation.MAX, "fiu", 1),
        OpSpec(Operation.LOG_ADD, None, False, Operation.LOG_ADD, "f", 23),
        OpSpec(Operation.LOGICAL_AND, np.logical_and, False, Operation.LOGICAL_AND, "b", 26),
        OpSpec(Operation.LOGICAL_OR, np.logical_or, False, Operation.LOGICAL_OR, "b", 26),
    )
}


def as_operation(op: Operation | str) -> Operation:
    """``op`` as an :class:`Operation` (its name is accepted, in any case)."""
    if isinstance(op, Operation):
        return op
    if isinstance(op, str) and op.upper() in Operation.__members__:
        return Operation[op.upper()]
    from tremula.errors import GraphError

    names = ", ".join(Operation.__members__)
    raise GraphError(f"reduce: unknown operation {op!r}; expected one of {names}")


def identity(op: Operation, dtype: np.dtype) -> np.generic:
    """The value an empty reduction yields."""
    dtype = np.dtype(dtype)
    if op in (Operation.ADD, Operation.SQUARE_ADD):
        return dtype.type(0)
    if op is Operation.MUL:
        return dtype.type(1)
    if op is Operation.LOG_ADD:
        return dtype.type(-np.inf)
    if op is Operation.LOGICAL_AND:
        return np.bool_(True)
    if op is Operation.LOGICAL_OR:
        return np.bool_(False)
    big = op is Operation.MIN
    if dtype.kind == "f":
        return dtype.type(np.inf if big else -np.inf)
    if dtype.kind == "b":
        return np.bool_(big)
    info = np.iinfo(dtype)
    return dtype.type(info.max if big else info.min)


def prepare(spec: OpSpec, x: np.ndarray, acc: np.dtype, first_stage: bool) -> np.ndarray:
    """Inputs in the accumulator type, squared for SQUARE_ADD's first stage."""
    if x.dtype != acc:
        x = x.astype(acc)
    if first_stage and spec.square:
        x = np.square(x)
    return x


def _finite_or_zero(m: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(m), m, np.zeros((), m.dtype))


def reduce_axes(op: Operation, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Reduce ``x`` over ``axes`` (every reduced extent > 0)."""
    spec = SPECS[op]
    if spec.ufunc is not None:
        return spec.ufunc.reduce(x, axis=axes)
    m = np.max(x, axis=axes, keepdims=True)
    ms = _finite_or_zero(m)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s = np.sum(np.exp(x - ms), axis=axes, keepdims=True)
        return np.squeeze(np.log(s) + ms, axis=axes)


def fold_pieces(op: Operation, x: np.ndarray, axis: int) -> np.ndarray:
    """Reduce ``x`` over its piece axis ``axis`` as a ReducePartials vertex does: each
    output element starts at ``op``'s identity and combines the pieces one after another
    in piece order (``((identity op p0) op p1) ...``), whatever NumPy's ``reduce`` would
    choose (it sums an axis it runs innermost pairwise). LOG_ADD (no ufunc) is
    :func:`reduce_axes`."""
    ufunc = SPECS[op].ufunc
    if ufunc is None:
        return reduce_axes(op, x, (axis,))
    shape = x.shape[:axis] + x.shape[axis + 1 :]
    r = np.full(shape, identity(op, x.dtype), dtype=x.dtype)
    for p in range(x.shape[axis]):
        ufunc(r, np.take(x, p, axis=axis), out=r)
    return r


def reduce_runs(
    op: Operation, x: np.ndarray, lengths: np.ndarray, starts: np.ndarray | None = None
) -> np.ndarray:
    """Reduce consecutive runs of the last axis of ``x`` (``lengths`` sum to its size;
    ``starts``, their cumulative sum from 0, may be given); an empty run yields the
    identity."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    out_shape = (*x.shape[:-1], n)
    if n == 0:
        return np.zeros(out_shape, dtype=x.dtype)
    full = lengths > 0
    if not full.all():
        out = np.full(out_shape, identity(op, x.dtype), dtype=x.dtype)
        if full.any():
            out[..., full] = reduce_runs(op, x, lengths[full])
        return out
    if starts is None:
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
    return _reduceat(op, x, starts, lengths)


def _reduceat(op: Operation, x: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    spec = SPECS[op]
    if spec.ufunc is not None:
        return spec.ufunc.reduceat(x, starts, axis=-1)
    m = np.maximum.reduceat(x, starts, axis=-1)
    ms = _finite_or_zero(m)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        e = np.exp(x - np.repeat(ms, lengths, axis=-1))
        return np.log(np.add.reduceat(e, starts, axis=-1)) + ms
