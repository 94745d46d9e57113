"""poprand's public functions: seeded, counter-based random tensors (PopLibs' poprand).

Each function validates its arguments, creates the output mapped like ``reference``, adds
one compute set with a generator MultiVertex on every tile holding output elements, and
appends its ``Execute`` to ``prog``. Nothing is added to the graph when validation fails.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs.poprand import codelets as C
from tremula.libs.util import ensure_codelets, partition

#: The seed used when ``seed`` is None (PopLibs leaves the hardware seed as it is instead).
DEFAULT_SEED = (0x2545F491, 0x9E3779B9)
_U32_LIMIT = 2**32


class PoprandError(GraphError):
    """A poprand function got an argument it cannot honour."""


def _check_common(
    graph: poplar.Graph,
    fn: str,
    seed: poplar.Tensor | None,
    seed_modifier: int,
    reference: poplar.Tensor,
    prog: poplar.Sequence,
) -> None:
    if not isinstance(graph, poplar.Graph):
        raise PoprandError(f"{fn}: graph must be a poplar.Graph, got {type(graph).__name__}")
    for label, t in (("reference", reference), ("seed", seed)):
        if t is None and label == "seed":
            continue
        if not isinstance(t, poplar.Tensor):
            raise PoprandError(f"{fn}: {label} must be a poplar.Tensor, got {type(t).__name__}")
        if t.graph is not graph.state:
            raise PoprandError(f"{fn}: {label} {t!r} belongs to another graph")
    if seed is not None and (seed.dtype is not poplar.UNSIGNED_INT or seed.shape != (2,)):
        raise PoprandError(
            f"{fn}: seed must be a tensor of two unsigned ints (type unsigned int, shape (2,)), "
            f"got type {seed.dtype} and shape {seed.shape}"
        )
    if (
        isinstance(seed_modifier, bool)
        or not isinstance(seed_modifier, (int, np.integer))
        or not 0 <= int(seed_modifier) < _U32_LIMIT
    ):
        raise PoprandError(
            f"{fn}: seed_modifier must be an unsigned 32-bit integer in [0, 2**32), "
            f"got {seed_modifier!r}"
        )
    if reference.num_elements >= _U32_LIMIT:
        raise PoprandError(
            f"{fn}: reference has {reference.num_elements} elements; at most 2**32 - 1 supported"
        )
    if not isinstance(prog, poplar.Sequence):
        raise PoprandError(f"{fn}: prog must be a poplar.Sequence, got {type(prog).__name__}")


def _check_type(fn: str, what: str, dtype: Any, allowed: tuple[poplar.Type, ...]) -> poplar.Type:
    try:
        t = poplar.as_type(dtype)
    except (TypeError, ValueError, KeyError):
        t = None
    if t not in allowed:
        names = ", ".join(a.name for a in allowed)
        raise PoprandError(f"{fn}: {what} must be one of {names}; got {dtype!r}")
    return t


def _finite(fn: str, **values: float) -> dict[str, float]:
    out = {}
    for name, value in values.items():
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise PoprandError(f"{fn}: {name} must be a number, got {value!r}") from None
        if not math.isfinite(x):
            raise PoprandError(f"{fn}: {name} must be finite, got {value!r}")
        out[name] = x
    return out


def _check_range(fn: str, dtype: poplar.Type, lo: float, hi: float) -> None:
    if lo > hi:
        raise PoprandError(f"{fn}: min_val ({lo!r}) must not exceed max_val ({hi!r})")
    if dtype is poplar.INT:
        info = np.iinfo(np.int32)
        for name, x in (("min_val", lo), ("max_val", hi)):
            if x != int(x) or not info.min <= x <= info.max:
                raise PoprandError(
                    f"{fn}: {name} must be a 32-bit integer for an int output, got {x!r}"
                )
    elif dtype is poplar.HALF:
        for name, x in (("min_val", lo), ("max_val", hi)):
            if abs(x) > float(np.finfo(np.float16).max):
                raise PoprandError(f"{fn}: {name} {x!r} is not representable as half")


def _probability(fn: str, name: str, p: Any) -> int:
    """``p`` checked to lie in [0, 1], as the 33-bit threshold a 32-bit word is compared to."""
    x = _finite(fn, **{name: p})[name]
    if not 0.0 <= x <= 1.0:
        raise PoprandError(f"{fn}: {name} must lie in [0, 1], got {p!r}")
    return round(x * _U32_LIMIT)


def _regions(graph: poplar.Graph, reference: poplar.Tensor) -> tuple[np.ndarray, ...]:
    """One vertex per tile holding elements of ``reference``; its regions are the runs of
    consecutive flat indices among them. Returns (order, vertex tiles, region lengths,
    regions per vertex, first flat index of each region)."""
    part = partition(graph, reference, workers=1)
    order = part.order
    brk = np.zeros(order.size, dtype=bool)
    brk[part.offsets[:-1]] = True
    brk[1:] |= np.diff(order) != 1
    first = np.flatnonzero(brk)
    lengths = np.diff(np.r_[first, order.size])
    per_vertex = np.add.reduceat(brk.astype(np.int64), part.offsets[:-1])
    return order, part.tiles, lengths, per_vertex, order[first]


def generate(
    graph: poplar.Graph,
    kind: type[C._Generator],
    dtype: poplar.Type,
    seed: poplar.Tensor | None,
    seed_modifier: int,
    reference: poplar.Tensor,
    params: dict[str, Any],
    prog: poplar.Sequence,
    name: str,
    per_replica: bool = True,
    inputs: dict[str, poplar.Tensor] | None = None,
) -> poplar.Tensor:
    """Build one generator compute set (arguments already validated); see the module doc."""
    tiles = graph.tiles_of(reference)
    if tiles.size and tiles.min() < 0:
        first = int(np.flatnonzero(tiles.reshape(-1) < 0)[0])
        raise PoprandError(
            f"poprand.{kind.KIND}: element {first} (flat) of reference {reference!r} is not "
            f"mapped to a tile; map the reference before generating"
        )
    ensure_codelets(graph, C.CODELETS)
    label = name or kind.KIND
    if reference.num_elements == 0:
        return graph.add_variable(dtype, reference.shape, f"{label}/out")
    order, vertex_tiles, lengths, per_vertex, starts = _regions(graph, reference)
    out = graph.add_variable(dtype, reference.shape, f"{label}/out")
    graph.set_tile_mapping(out, tiles)
    if seed is None:
        seed = graph.add_constant(poplar.UNSIGNED_INT, (2,), DEFAULT_SEED, f"{label}/seed")
        graph.set_tile_mapping(seed, int(vertex_tiles[0]))
    n = vertex_tiles.size
    fields: dict[str, Any] = {
        "out": poplar.Segments(out.flatten()[order], lengths, per_vertex),
        "seed": seed.expand([0]).broadcast(n, 0),
        "starts": np.split(starts.astype(np.uint32), np.cumsum(per_vertex)[:-1]),
        "seed_modifier": int(seed_modifier),
        "per_replica": int(bool(per_replica)),
        **params,
    }
    for field, t in (inputs or {}).items():
        fields[field] = poplar.Segments(t.flatten()[order], lengths, per_vertex)
    cs = graph.add_compute_set(f"{label}/poprand::{kind.KIND}")
    graph.add_vertices(cs, f"{kind.name}<{dtype.name}>", fields, vertex_tiles)
    prog.add(poplar.Execute(cs))
    return out


def uniform(
    graph: poplar.Graph,
    seed: poplar.Tensor | None,
    seed_modifier: int,
    reference: poplar.Tensor,
    dtype: poplar.Type | str,
    min_val: float,
    max_val: float,
    prog: poplar.Sequence,
    name: str = "",
    *,
    per_replica: bool = True,
) -> poplar.Tensor:
    """Uniformly distributed values (PopLibs' ``poprand::uniform``).

    Float and half values lie in [min_val, max_val]; int values are integers in the
    inclusive range [min_val, max_val], drawn from 64 random bits (bias below 2**-32).

    Args:
        graph: the graph to add the generator to.
        seed: a tensor of two unsigned ints (the Philox key), or None for
            :data:`DEFAULT_SEED`.
        seed_modifier: an unsigned 32-bit value mixed into every counter; different values
            give independent streams under one seed.
        reference: the output takes its shape and tile mapping.
        dtype: FLOAT, HALF or INT.
        min_val: lower bound.
        max_val: upper bound (>= min_val).
        prog: the sequence the generator's ``Execute`` is appended to.
        name: debug prefix of the compute set and the output.
        per_replica: replicas draw different numbers (the replica index is in the
            counter); False gives every replica the same numbers.

    Returns:
        The new tensor, shaped and mapped like ``reference``.

    Raises:
        PoprandError: bad graph, seed, modifier, reference, type or range.
    """
    fn = "poprand.uniform"
    _check_common(graph, fn, seed, seed_modifier, reference, prog)
    t = _check_type(fn, "dtype", dtype, (poplar.FLOAT, poplar.HALF, poplar.INT))
    v = _finite(fn, min_val=min_val, max_val=max_val)
    _check_range(fn, t, v["min_val"], v["max_val"])
    return generate(graph, C.Uniform, t, seed, seed_modifier, reference, v, prog, name, per_replica)


def log_uniform(
    graph: poplar.Graph,
    seed: poplar.Tensor | None,
    seed_modifier: int,
    reference: poplar.Tensor,
    dtype: poplar.Type | str,
    min_val: float,
    max_val: float,
    prog: poplar.Sequence,
    base: float = math.e,
    name: str = "",
    *,
    per_replica: bool = True,
) -> poplar.Tensor:
    """Log-uniformly distributed values in [min_val, max_val] (PopLibs' ``logUniform``):
    ``log(x)`` is uniform. The distribution does not depend on ``base`` (accepted for
    PopLibs compatibility; it must be positive and not 1). FLOAT or HALF; 0 < min_val.
    Other arguments as :func:`uniform`."""
    fn = "poprand.log_uniform"
    _check_common(graph, fn, seed, seed_modifier, reference, prog)
    t = _check_type(fn, "dtype", dtype, (poplar.FLOAT, poplar.HALF))
    v = _finite(fn, min_val=min_val, max_val=max_val)
    b = _finite(fn, base=base)["base"]
    if b <= 0 or b == 1:
        raise PoprandError(f"{fn}: base must be positive and not 1, got {base!r}")
    if v["min_val"] <= 0:
        raise PoprandError(f"{fn}: min_val must be positive, got {min_val!r}")
    _check_range(fn, t, v["min_val"], v["max_val"])
    return generate(
        graph, C.LogUniform, t, seed, seed_modifier, reference, v, prog, name, per_replica
    )


def _normal_args(fn: str, mean: float, stdev: float) -> dict[str, float]:
    v = _finite(fn, mean=mean, stdev=stdev)
    if v["stdev"] < 0:
        raise PoprandError(f"{fn}: stdev must be >= 0, got {stdev!r}")
    return v


def normal(
    graph: poplar.Graph,
    seed: poplar.Tensor | None,
    seed_modifier: int,
    reference: poplar.Tensor,
    dtype: poplar.Type | str,
    mean: float,
    stdev: float,
    prog: poplar.Sequence,
    name: str = "",
    *,
    per_replica: bool = True,
) -> poplar.Tensor:
    """Normally distributed values N(mean, stdev**2) (PopLibs' ``poprand::normal``), by
    Box-Muller. FLOAT or HALF; stdev >= 0. Other arguments as :func:`uniform`."""
    fn = "poprand.normal"
    _check_common(graph, fn, seed, seed_modifier, reference, prog)
    t = _check_type(fn, "dtype", dtype, (poplar.FLOAT, poplar.HALF))
    v = _normal_args(fn, mean, stdev)
    return generate(graph, C.Normal, t, seed, seed_modifier, reference, v, prog, name, per_replica)


def truncated_normal(
    graph: poplar.Graph,
    seed: poplar.Tensor | None,
    seed_modifier: int,
    reference: poplar.Tensor,
    dtype: poplar.Type | str,
    mean: float,
    stdev: float,
    alpha: float,
    prog: poplar.Sequence,
    name: str = "",
    *,
    per_replica: bool = True,
) -> poplar.Tensor:
    """A normal N(mean, stdev**2) truncated to [mean - alpha * stdev, mean + alpha * stdev]
    (PopLibs' ``truncatedNormal``), drawn by the inverse CDF (PopLibs re-draws out-of-range
    values instead; the distribution is the same). FLOAT or HALF; stdev >= 0, alpha > 0.
    Other arguments as :func:`uniform`."""
    fn = "poprand.truncated_normal"
    _check_common(graph, fn, seed, seed_modifier, reference, prog)
    t = _check_type(fn, "dtype", dtype, (poplar.FLOAT, poplar.HALF))
    v = _normal_args(fn, mean, stdev)
    a = _finite(fn, alpha=alpha)["alpha"]
    if a <= 0:
        raise PoprandError(f"{fn}: alpha must be > 0, got {alpha!r}")
    v.update(alpha=a, lower_tail=0.5 * math.erfc(a / math.sqrt(2.0)))
    return generate(
        graph, C.TruncatedNormal, t, seed, seed_modifier, reference, v, prog, name, per_replica
    )


def bernoulli(
    graph: poplar.Graph,
    seed: poplar.Tensor | None,
    seed_modifier: int,
    reference: poplar.Tensor,
    dtype: poplar.Type | str,
    prob: float,
    prog: poplar.Sequence,
    name: str = "",
    *,
    per_replica: bool = True,
) -> poplar.Tensor:
    """1 with probability ``prob`` and 0 otherwise (PopLibs' ``poprand::bernoulli``).
    FLOAT, HALF or INT; prob in [0, 1]. Other arguments as :func:`uniform`."""
    fn = "poprand.bernoulli"
    _check_common(graph, fn, seed, seed_modifier, reference, prog)
    t = _check_type(fn, "dtype", dtype, (poplar.FLOAT, poplar.HALF, poplar.INT))
    threshold = _probability(fn, "prob", prob)
    return generate(
        graph,
        C.Bernoulli,
        t,
        seed,
        seed_modifier,
        reference,
        {"threshold": threshold},
        prog,
        name,
        per_replica,
    )


def dropout(
    graph: poplar.Graph,
    seed: poplar.Tensor | None,
    seed_modifier: int,
    input: poplar.Tensor,
    reference: poplar.Tensor | None,
    keep_probability: float,
    scale: float,
    prog: poplar.Sequence,
    name: str = "",
    *,
    per_replica: bool = True,
) -> poplar.Tensor:
    """``input * mask * scale`` with a Bernoulli(keep_probability) mask (PopLibs'
    ``poprand::dropout``).

    The output is shaped like ``input`` and mapped like ``reference`` (``input`` when None),
    which must have the input's shape: the mask of element ``i`` depends only on (seed,
    seed_modifier, i, replica), so the same seed and modifier give the same mask whatever
    the mappings, as PopLibs guarantees for a fixed reference.

    Args:
        input: FLOAT or HALF tensor to drop out.
        reference: the layout of the output, or None.
        keep_probability: probability in [0, 1] that an element is kept.
        scale: factor applied to kept elements (usually ``1 / keep_probability``).
        Others: as :func:`uniform`.

    Returns:
        The new tensor.

    Raises:
        PoprandError: bad input, reference, probability, scale, seed or modifier.
    """
    fn = "poprand.dropout"
    reference = input if reference is None else reference
    _check_common(graph, fn, seed, seed_modifier, reference, prog)
    if not isinstance(input, poplar.Tensor) or input.graph is not graph.state:
        raise PoprandError(f"{fn}: input must be a poplar.Tensor of this graph, got {input!r}")
    t = _check_type(fn, "input type", input.dtype, (poplar.FLOAT, poplar.HALF))
    if reference.shape != input.shape:
        raise PoprandError(
            f"{fn}: reference shape {reference.shape} differs from input shape {input.shape}"
        )
    threshold = _probability(fn, "keep_probability", keep_probability)
    s = _finite(fn, scale=scale)["scale"]
    if input.num_elements and graph.tiles_of(input).min() < 0:
        raise PoprandError(f"{fn}: input {input!r} has elements not mapped to a tile")
    return generate(
        graph,
        C.Dropout,
        t,
        seed,
        seed_modifier,
        reference,
        {"threshold": threshold, "scale": s},
        prog,
        name,
        per_replica,
        inputs={"in_": input},
    )
