"""poprand's codelets: one MultiVertex per tile writing the random values of its regions.

Every generator draws its bits from Philox4x32-10 (:mod:`.philox`) with

* key = the two words of the seed tensor,
* counter = ``(i // E, seed_modifier, replica, 0)``, where ``i`` is the element's index in
  the output's flattened order and ``E`` the elements served by one 128-bit block (4 for
  one 32-bit word per element, 2 for two words),

so an element's value is a pure function of (seed, seed modifier, flat index, replica) and
does not depend on the tile mapping or on how the elements are split into vertices. Element
``i`` takes value ``i % E`` of its block: word ``i % 4`` for one-word generators (uniform,
bernoulli, dropout, truncated normal, log-uniform), words ``(2j, 2j + 1)`` with
``j = i % 2`` for integer uniform (the first is the high half), and for the normal the
Box-Muller pair of words ``(0, 1)`` (lanes 0: cos, 1: sin) or ``(2, 3)`` (lanes 2, 3).

A vertex holds a list of regions (``out`` is a vector list) and the flat index of the first
element of each region (``starts``); ``compute`` forms the counters of every block of every
region of every vertex at once, runs Philox once over them, turns each block's words into
parameter-free values (``unit``), picks every element's value (a slice when the regions
are consecutive, as with a linear mapping) and applies the vertex parameters (``values``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from tremula import poplar
from tremula.libs.poprand import estimators as E
from tremula.libs.poprand.philox import ndtri_lower, philox4x32

_TWO_POW_M32 = 2.0**-32
_U32 = np.uint64(32)

FLOPS_PER_ELEMENT = {
    "uniform": 2,
    "normal": 2,
    "truncated_normal": 2,
    "log_uniform": 3,
    "bernoulli": 0,
    "dropout": 1,
}


def _starts(v: poplar.Batch | poplar.VertexInfo) -> np.ndarray:
    rows = list(v.state("starts"))
    return np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)


def _plan(v: poplar.Batch, per_block: int) -> dict[str, Any]:
    """Static index work for one batch: the Philox blocks every region needs and, for every
    element, the position of its value in the stream of block values."""
    sub = v.sub_lengths("out").astype(np.int64)
    region_vertex = np.repeat(np.arange(v.n), v.sub_counts("out"))
    starts = _starts(v)
    first = starts // per_block
    nblk = (starts + sub - 1) // per_block - first + 1
    blk_off = np.cumsum(nblk) - nblk
    block_ids = np.repeat(first - blk_off, nblk) + np.arange(int(nblk.sum()))
    block_vertex = np.repeat(region_vertex, nblk)
    idx = np.repeat(starts - (np.cumsum(sub) - sub), sub) + np.arange(int(sub.sum()))
    pos = np.repeat((blk_off - first) * per_block, sub) + idx
    contiguous = pos.size and pos[-1] - pos[0] == pos.size - 1 and np.all(np.diff(pos) == 1)
    plan: dict[str, Any] = {
        "blocks": block_ids.astype(np.uint32),
        "block_vertex": block_vertex,
        "elements": slice(int(pos[0]), int(pos[0]) + pos.size) if contiguous else pos,
    }
    for name in ("seed_modifier", "per_replica"):
        per_vertex = v.state(name).astype(np.uint32)
        same = per_vertex.size == 0 or np.all(per_vertex == per_vertex[0])
        plan[name] = per_vertex[:1] if same else per_vertex[block_vertex]
    return plan


def _replica_ids(v: poplar.Batch) -> np.ndarray:
    """The replica index of each row of the batch (the engine says which replicas run, so
    a replica that runs alone in a branch draws the numbers it would draw with the others)."""
    return np.asarray(v.replica_ids, dtype=np.uint32)


def draw_blocks(v: poplar.Batch, plan: dict[str, Any]) -> np.ndarray:
    """The Philox output of every block the batch needs: ``[replica, block, 4]`` uint32."""
    R = v.replicas
    seed = v.seed.reshape(R, v.n, 2)
    if np.all(seed == seed[:, :1]):
        k0, k1 = seed[:, 0, 0:1], seed[:, 0, 1:2]
    else:
        k0, k1 = seed[:, plan["block_vertex"], 0], seed[:, plan["block_vertex"], 1]
    replica = _replica_ids(v)[:, None] * plan["per_replica"]
    counter = (plan["blocks"], plan["seed_modifier"], replica, 0)
    return philox4x32(counter, (k0, k1))


def unit_uniform(w: np.ndarray) -> np.ndarray:
    """32-bit words to float64 uniforms in the open interval (0, 1)."""
    u = np.multiply(w, _TWO_POW_M32, dtype=np.float64)
    u += 0.5 * _TWO_POW_M32
    return u


class _Generator(poplar.Codelet):
    """Fields every generator has. A subclass gives ``per_block`` (elements served by one
    Philox block), ``unit`` (block words to parameter-free values, per block) and
    ``values`` (those values, one per element, to the output with the vertex's
    parameters)."""

    templates = ("T",)
    supervisor = True
    code_bytes = 384  # [proposal]
    KIND: ClassVar[str] = ""

    out = poplar.Output("T", kind="vector_list")
    seed = poplar.Input(poplar.UNSIGNED_INT, size=2)
    starts = poplar.State(poplar.UNSIGNED_INT, kind="vector")  # flat index of each region
    seed_modifier = poplar.State(poplar.UNSIGNED_INT)
    per_replica = poplar.State(poplar.UNSIGNED_INT, default=1)  # 1: replica in the counter

    @classmethod
    def per_block(cls, v: poplar.Batch | poplar.VertexInfo) -> int:
        return 4

    @classmethod
    def unit(cls, v: poplar.Batch, block: np.ndarray) -> np.ndarray:
        """``[replica, block, 4]`` words to ``[replica, block, per_block]`` values."""
        return block

    @classmethod
    def values(cls, v: poplar.Batch, unit: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def compute(cls, v: poplar.Batch) -> None:  # type: ignore[override]
        if v.n == 0:
            return
        plan = v.cached("poprand", lambda: _plan(v, cls.per_block(v)))
        stream = cls.unit(v, draw_blocks(v, plan)).reshape(v.replicas, -1)
        v.out = cls.values(v, stream[:, plan["elements"]])

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:  # type: ignore[override]
        out = v.dtype("out").name
        return E.generator(
            v.target, cls.KIND, out, v.lengths("out"), v.sub_counts("out"), v.vertex_type.name
        )

    @classmethod
    def flops(cls, v: poplar.VertexInfo) -> np.ndarray:  # type: ignore[override]
        return FLOPS_PER_ELEMENT[cls.KIND] * v.lengths("out").astype(np.float64)


def _param(v: poplar.Batch, name: str) -> Any:
    """A per-vertex parameter: one value when all vertices agree, else one per output
    element (float64 unless integer)."""
    values = v.state(name)
    if values.dtype.kind == "f":
        values = values.astype(np.float64)
    if values.size and np.all(values == values[0]):
        return values[0]
    return v.expand(values, "out")


class Uniform(_Generator):
    """Uniform in [min_val, max_val]; integers inclusive, from 64 bits (two words)."""

    name = "poprand::Uniform"
    KIND = "uniform"
    min_val = poplar.State("T")
    max_val = poplar.State("T")

    @classmethod
    def per_block(cls, v: poplar.Batch | poplar.VertexInfo) -> int:
        return 2 if v.dtype("out").name == "int" else 4

    @classmethod
    def unit(cls, v: poplar.Batch, block: np.ndarray) -> np.ndarray:
        if v.dtype("out").name != "int":
            return block
        high = block[..., 0::2].astype(np.uint64)
        high <<= _U32
        high |= block[..., 1::2]
        return high

    @classmethod
    def values(cls, v: poplar.Batch, unit: np.ndarray) -> np.ndarray:
        lo, hi = _param(v, "min_val"), _param(v, "max_val")
        if v.dtype("out").name == "int":
            return _uniform_int(unit, lo, hi)
        # lo + (hi - lo) * (w + 0.5) / 2**32 stays in [lo, hi] after rounding: no clip
        scale = (hi - lo) * _TWO_POW_M32
        x = np.multiply(unit, scale, dtype=np.float64)
        x += lo + 0.5 * scale
        return x.astype(v.dtype("out").numpy)


def _uniform_int(bits: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
    """``lo + floor(bits * span / 2**64)`` for 64-bit values, exactly: the high 32 bits of
    a 96-bit product formed from two 64-bit products."""
    span = (np.asarray(hi, np.int64) - lo + 1).astype(np.uint64)  # <= 2**32
    low = (bits & np.uint64(0xFFFFFFFF)) * span
    offset = ((bits >> _U32) * span + (low >> _U32)) >> _U32
    return (lo + offset.astype(np.int64)).astype(np.int32)


class LogUniform(_Generator):
    """Log-uniform in [min_val, max_val] (0 < min_val): exp of a uniform in the logs."""

    name = "poprand::LogUniform"
    KIND = "log_uniform"
    min_val = poplar.State(poplar.FLOAT)
    max_val = poplar.State(poplar.FLOAT)

    @classmethod
    def values(cls, v: poplar.Batch, unit: np.ndarray) -> np.ndarray:
        lo, hi = _param(v, "min_val"), _param(v, "max_val")
        log_lo = np.log(lo)
        x = unit_uniform(unit)
        x *= np.log(hi) - log_lo
        x += log_lo
        np.exp(x, out=x)
        return np.clip(x, lo, hi, out=x).astype(v.dtype("out").numpy)


class Normal(_Generator):
    """Normal(mean, stdev) by Box-Muller: words (0, 1) of a block give lanes 0 (cos) and 1
    (sin), words (2, 3) lanes 2 and 3."""

    name = "poprand::Normal"
    KIND = "normal"
    mean = poplar.State(poplar.FLOAT)
    stdev = poplar.State(poplar.FLOAT)

    @classmethod
    def unit(cls, v: poplar.Batch, block: np.ndarray) -> np.ndarray:
        radius = unit_uniform(block[..., 0::2])
        np.log(radius, out=radius)
        radius *= -2.0
        np.sqrt(radius, out=radius)
        angle = np.multiply(block[..., 1::2], 2.0 * np.pi * _TWO_POW_M32, dtype=np.float64)
        z = np.empty(block.shape, dtype=np.float64)
        np.multiply(radius, np.cos(angle), out=z[..., 0::2])
        np.multiply(radius, np.sin(angle), out=z[..., 1::2])
        return z

    @classmethod
    def values(cls, v: poplar.Batch, unit: np.ndarray) -> np.ndarray:
        x = unit * _param(v, "stdev")
        x += _param(v, "mean")
        return x.astype(v.dtype("out").numpy)


class TruncatedNormal(_Generator):
    """Normal(mean, stdev) truncated to mean +- alpha * stdev, by the inverse CDF: one draw
    per element, uniform between the two truncation quantiles."""

    name = "poprand::TruncatedNormal"
    KIND = "truncated_normal"
    mean = poplar.State(poplar.FLOAT)
    stdev = poplar.State(poplar.FLOAT)
    alpha = poplar.State(poplar.FLOAT)
    lower_tail = poplar.State(poplar.FLOAT)  # Phi(-alpha), set when the vertex is added

    @classmethod
    def values(cls, v: poplar.Batch, unit: np.ndarray) -> np.ndarray:
        tail, alpha = _param(v, "lower_tail"), _param(v, "alpha")
        mean, stdev = _param(v, "mean"), _param(v, "stdev")
        half = 0.5 - tail
        p = unit_uniform(unit)
        p *= 2.0 * half  # uniform over the quantiles, measured from Phi(-alpha)
        q = np.minimum(p, 2.0 * half - p)  # distance to the nearer truncation quantile
        q += tail
        x = ndtri_lower(q)
        np.negative(x, out=x, where=p >= half)
        x *= stdev
        x += mean
        np.clip(x, mean - alpha * stdev, mean + alpha * stdev, out=x)
        return x.astype(v.dtype("out").numpy)


class Bernoulli(_Generator):
    """1 with probability prob, else 0: the word is below ``threshold = prob * 2**32``."""

    name = "poprand::Bernoulli"
    KIND = "bernoulli"
    threshold = poplar.State(poplar.UNSIGNED_LONGLONG)

    @classmethod
    def values(cls, v: poplar.Batch, unit: np.ndarray) -> np.ndarray:
        return (unit < _param(v, "threshold")).astype(v.dtype("out").numpy)


class Dropout(_Generator):
    """out = in * scale where the element is kept (probability keep), else 0."""

    name = "poprand::Dropout"
    KIND = "dropout"
    in_ = poplar.Input("T", kind="vector_list")
    threshold = poplar.State(poplar.UNSIGNED_LONGLONG)
    scale = poplar.State(poplar.FLOAT)

    @classmethod
    def values(cls, v: poplar.Batch, unit: np.ndarray) -> np.ndarray:
        dtype = v.dtype("out").numpy
        scaled = v.in_ * np.asarray(_param(v, "scale")).astype(dtype)
        scaled[unit >= _param(v, "threshold")] = 0
        return scaled


CODELETS = [Uniform, LogUniform, Normal, TruncatedNormal, Bernoulli, Dropout]
