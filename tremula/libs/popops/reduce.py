"""popops reductions: ``reduce`` and ``reduce_with_output`` over any set of dimensions with
ADD, MUL, MIN, MAX, SQUARE_ADD, LOG_ADD, LOGICAL_AND and LOGICAL_OR, planned as multi-stage
reductions across tiles.

The input's dimensions are first put in memory order (when the tensor is an affine view of
its storage, e.g. a transpose), so that stage 1 reads it in place. The planner
(:mod:`reduce_plan`, a pure function of the reduction shape, the input's tile runs, the
outputs' tiles and the fan-in bound) gives stage-1 vertices (:class:`ReduceBlock`, one per
box of each tile's data; partials stay on that tile) and, unless every output has a single
partial, later stages (:class:`ReducePartials`) that reduce groups of at most ``maxFanIn``
partials, the last one on the tiles of the outputs. Half and float data accumulate in float
(``accumType.interTile`` may make the partials between stages half for half data); the final
stage applies ``scale``, the update and the cast. ``reduce`` maps its output linearly with a
grain of the output type's vector width (like the input when no dimension is reduced).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs.popops.codelets.reduce import CODELETS
from tremula.libs.popops.reduce_ops import SPECS, Operation, as_operation
from tremula.libs.popops.reduce_plan import GroupStage, ReducePlan, TileRuns, plan_reduction
from tremula.libs.util import ensure_codelets

__all__ = ["Operation", "reduce", "reduce_with_output"]

DEFAULT_FAN_IN = 64
_OPTIONS = ("accumType.interTile", "accumType.inVertex", "maxFanIn")


def type_arg(t: poplar.Type) -> str:
    """A type as a template argument: its Poplar name, or its NumPy name when the Poplar
    name has a space (``unsigned int`` -> ``uint32``)."""
    return t.name if " " not in t.name else t.numpy.name


def check_tensor(graph: poplar.Graph, t: Any, what: str, where: str) -> poplar.Tensor:
    """``t`` as a tensor of ``graph`` (else a GraphError naming ``what``)."""
    if not isinstance(t, poplar.Tensor):
        raise GraphError(f"{where}: {what} must be a Tensor, got {type(t).__name__}")
    if t.graph is not graph.state:
        raise GraphError(f"{where}: {what} {t!r} belongs to another graph")
    return t


def check_mapped(graph: poplar.Graph, t: poplar.Tensor, what: str, where: str) -> np.ndarray:
    """The tile of every element of ``t`` (flat); a GraphError if one is unmapped."""
    tiles = graph.tiles_of(t).reshape(-1)
    if tiles.size and tiles.min() < 0:
        first = int(np.flatnonzero(tiles < 0)[0])
        raise GraphError(
            f"{where}: {what} {t!r} is not completely mapped to tiles (flat element {first} "
            f"is not); map it first, e.g. with poplar.map_tensor_linearly"
        )
    return tiles


def _check_dims(dims: int | Sequence[int], rank: int, where: str) -> tuple[int, ...]:
    items = [dims] if isinstance(dims, (int, np.integer)) else list(dims)
    for d in items:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise GraphError(f"{where}: dims must be integers, got {dims!r}")
        if not 0 <= d < rank:
            raise GraphError(
                f"{where}: dimension {d} in dims {list(items)} is out of range for a "
                f"tensor of rank {rank} (valid: 0..{rank - 1})"
            )
    if len(set(items)) != len(items):
        raise GraphError(f"{where}: dims {list(items)} repeat a dimension")
    return tuple(sorted(int(d) for d in items))


def _check_types(op: Operation, t: poplar.Type, out: poplar.Type, where: str) -> None:
    spec = SPECS[op]
    if t.numpy.kind not in spec.kinds:
        raise GraphError(
            f"{where}: operation {op.name} does not accept input of type {t}; it takes "
            f"{'bool' if spec.kinds == 'b' else 'numeric'} inputs"
            f"{' of a floating-point type' if spec.kinds == 'f' else ''}"
        )
    ok = out.numpy.kind == "f" if t.numpy.kind == "f" else out is t
    if not ok:
        allowed = "float or half" if t.numpy.kind == "f" else str(t)
        raise GraphError(
            f"{where}: output type {out} does not match input type {t} (expected {allowed})"
        )


def _parse_options(
    options: Mapping[str, Any] | None, in_type: poplar.Type, where: str
) -> tuple[poplar.Type, int]:
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(_OPTIONS))
    if unknown:
        raise GraphError(f"{where}: unknown option(s) {unknown}; known: {list(_OPTIONS)}")
    partials = in_type if in_type.numpy.kind != "f" else poplar.FLOAT
    for key in ("accumType.interTile", "accumType.inVertex"):
        if key in opts:
            value = str(opts[key]).lower()
            allowed = ("float", "half") if in_type is poplar.HALF else ("float",)
            if in_type.numpy.kind != "f" or value not in allowed:
                raise GraphError(
                    f"{where}: option {key}={opts[key]!r} is not valid for {in_type} input "
                    f"(allowed: {list(allowed) if in_type.numpy.kind == 'f' else 'none'})"
                )
            if key == "accumType.interTile":
                partials = poplar.as_type(value)
    fan_in = opts.get("maxFanIn", DEFAULT_FAN_IN)
    if isinstance(fan_in, str) and fan_in.isdigit():
        fan_in = int(fan_in)
    if isinstance(fan_in, bool) or not isinstance(fan_in, (int, np.integer)) or fan_in < 2:
        raise GraphError(f"{where}: option maxFanIn must be an integer >= 2, got {fan_in!r}")
    return partials, int(fan_in)


def memory_order(t: poplar.Tensor) -> tuple[int, ...]:
    """A permutation of ``t``'s dimensions under which its flattened addresses run in
    storage order when ``t`` is an affine view (a transpose, a dim shuffle); the identity
    otherwise."""
    addr = t.addresses
    rank = t.rank
    if rank < 2 or t.num_elements < 2:
        return tuple(range(rank))
    stride = np.zeros(rank, dtype=np.int64)
    for d in range(rank):
        if t.shape[d] > 1:
            key = [0] * rank
            key[d] = 1
            stride[d] = abs(int(addr[tuple(key)]) - int(addr[(0,) * rank]))
    perm = tuple(int(d) for d in np.argsort(-stride, kind="stable"))
    if perm == tuple(range(rank)):
        return perm
    flat = np.transpose(addr, perm).reshape(-1)
    if np.all(np.diff(flat) == 1):
        return perm
    return tuple(range(rank))


def reduce(
    graph: poplar.Graph,
    t: poplar.Tensor,
    dims: int | Sequence[int],
    op: Operation | str,
    prog: poplar.Sequence,
    name: str = "",
    options: Mapping[str, Any] | None = None,
    out_dtype: poplar.Type | str | None = None,
) -> poplar.Tensor:
    """Reduce ``t`` over ``dims`` with ``op`` (PopLibs' ``popops::reduce``).

    Args:
        graph: the graph.
        t: the input, completely mapped to tiles.
        dims: the dimensions to reduce (any set, possibly empty: a copy; all: a scalar).
        op: an :class:`Operation` (or its name).
        prog: the sequence the reduction's compute sets are appended to.
        name: debug prefix of the compute sets and temporaries.
        options: ``accumType.interTile`` (``float`` / ``half`` partials for half input),
            ``accumType.inVertex`` (``float``), ``maxFanIn`` (most partials one vertex
            reduces per output in a later stage, default 64).
        out_dtype: type of the result (default ``t``'s; half or float for float input).

    Returns:
        A new tensor of ``t``'s shape without ``dims``, mapped linearly over the tiles with
        a grain of its vector width (mapped like ``t`` when ``dims`` is empty).

    Raises:
        GraphError: ``dims`` out of range or repeated, a type the operation does not take,
            ``t`` not mapped, bad options.
    """
    where = f"reduce{f' {name!r}' if name else ''}"
    t = check_tensor(graph, t, "input", where)
    dims = _check_dims(dims, t.rank, where)
    op = as_operation(op)
    out_type = poplar.as_type(out_dtype) if out_dtype is not None else t.dtype
    _check_types(op, t.dtype, out_type, where)
    partials, fan_in = _parse_options(options, t.dtype, where)
    check_mapped(graph, t, "input", where)
    shape = tuple(s for d, s in enumerate(t.shape) if d not in dims)
    out = graph.add_variable(out_type, shape, f"{name or 'reduce'}/out")
    if not dims and t.num_elements:
        graph.set_tile_mapping(out, graph.tiles_of(t))
    else:
        grain = graph.target.vector_width(out_type.size)
        poplar.map_tensor_linearly(graph, out, grain_size=grain)
    job = _Job(graph, prog, op, 1.0, False, name or "reduce", partials, fan_in)
    _build(job, t, out, dims)
    return out


def reduce_with_output(
    graph: poplar.Graph,
    t: poplar.Tensor,
    out: poplar.Tensor,
    dims: int | Sequence[int],
    op: Operation | str,
    prog: poplar.Sequence,
    scale: float = 1.0,
    update: bool = False,
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """``out = scale * reduce(t)`` or, with ``update``, ``out += scale * reduce(t)``
    (PopLibs' ``reduceWithOutput`` with ``ReduceParams(op, update, scale)``).

    Integer outputs compute ``scale * r`` in float and truncate toward zero. The logical
    operations take neither a scale other than 1 nor ``update``.

    Args:
        graph, t, dims, op, prog, name, options: as for :func:`reduce`.
        out: the result, shaped like ``t`` without ``dims`` and mapped; its type is
            ``t``'s (half or float for float input).
        scale: a finite number.
        update: accumulate into ``out`` instead of overwriting it.

    Returns:
        ``out``.

    Raises:
        GraphError: as for :func:`reduce`, and when ``out``'s shape or type does not fit,
            ``out`` is not mapped, or ``scale`` / ``update`` do not suit the operation.
    """
    where = f"reduce_with_output{f' {name!r}' if name else ''}"
    t = check_tensor(graph, t, "input", where)
    out = check_tensor(graph, out, "out", where)
    dims = _check_dims(dims, t.rank, where)
    op = as_operation(op)
    _check_types(op, t.dtype, out.dtype, where)
    _check_out_and_scale(t, out, dims, op, scale, update, where)
    partials, fan_in = _parse_options(options, t.dtype, where)
    check_mapped(graph, t, "input", where)
    check_mapped(graph, out, "out", where)
    job = _Job(graph, prog, op, float(scale), bool(update), name or "reduce", partials, fan_in)
    _build(job, t, out, dims)
    return out


def _check_out_and_scale(
    t: poplar.Tensor,
    out: poplar.Tensor,
    dims: tuple[int, ...],
    op: Operation,
    scale: Any,
    update: bool,
    where: str,
) -> None:
    shape = tuple(s for d, s in enumerate(t.shape) if d not in dims)
    if out.shape != shape and not (shape == () and out.num_elements == 1):
        raise GraphError(
            f"{where}: out has shape {out.shape}, expected {shape} (input {t.shape} "
            f"reduced over dims {list(dims)})"
        )
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.number)):
        raise GraphError(f"{where}: scale must be a number, got {type(scale).__name__}")
    if not np.isfinite(scale):
        raise GraphError(f"{where}: scale must be finite, got {scale}")
    if SPECS[op].kinds == "b" and (scale != 1 or update):
        raise GraphError(
            f"{where}: {op.name} takes no scale (got {scale}) and no update (got {update})"
        )


@dataclass(frozen=True)
class _Job:
    """What a reduction builds with: where, which operation, and its parameters."""

    graph: poplar.Graph
    prog: poplar.Sequence
    op: Operation
    scale: float
    update: bool
    name: str
    partials: poplar.Type
    fan_in: int


def _output_positions(t: poplar.Tensor, dims: tuple[int, ...], perm: tuple[int, ...]) -> np.ndarray:
    """For each output in canonical order (kept dimensions in ``perm`` order), its flat
    position in the output tensor (kept dimensions in ``t``'s order)."""
    kept = [d for d in range(t.rank) if d not in dims]
    kept_perm = [d for d in perm if d not in dims]
    shape = [t.shape[d] for d in kept]
    n = int(np.prod(shape, dtype=np.int64))
    axes = [kept.index(d) for d in kept_perm]
    return np.arange(n, dtype=np.int64).reshape(shape).transpose(axes).reshape(-1)


def _build(job: _Job, t: poplar.Tensor, out: poplar.Tensor, dims: tuple[int, ...]) -> None:
    """Plan the reduction of ``t`` over ``dims`` into ``out`` and add its compute sets."""
    if out.num_elements == 0:
        return
    graph = job.graph
    ensure_codelets(graph, CODELETS)
    perm = memory_order(t)
    flat = t.dim_shuffle(perm).flatten()
    out_pos = _output_positions(t, dims, perm)
    out_flat = out.flatten()
    plan = plan_reduction(
        t.dim_shuffle(perm).shape,
        tuple(d in dims for d in perm),
        TileRuns.of(graph.tiles_of(flat)),
        graph.tiles_of(out_flat)[out_pos],
        job.fan_in,
        copy_partials=t.dtype is job.partials and not SPECS[job.op].square,
    )
    source = _first_stage(job, plan, flat, out_flat, out_pos)
    for k, stage in enumerate(plan.stages):
        if stage.final:
            dest = out_flat[out_pos[_expand_ranges(stage.group_outputs, stage.group_lengths)]]
        else:
            dest = graph.add_variable(
                job.partials, (stage.result_size,), f"{job.name}/partials{k + 1}"
            )
            graph.set_tile_mapping(dest, np.repeat(stage.group_tiles, stage.group_lengths))
        _later_stage(job, stage, source, dest, f"{job.name}/ReduceStage{k + 2}")
        if not stage.final:
            source = poplar.concat([dest, source])


def _later_stage(
    job: _Job, stage: GroupStage, source: poplar.Tensor, dest: poplar.Tensor, name: str
) -> None:
    """Add one later stage reading pieces of ``source`` and writing ``dest``."""
    kind = "ReducePartialsUpdate" if stage.final and job.update else "ReducePartials"
    args = f"{SPECS[job.op].then.name},{type_arg(job.partials)},{type_arg(dest.dtype)}"
    pieces = np.repeat(stage.group_lengths, stage.group_counts)
    per_vertex = np.add.reduceat(stage.group_counts, _starts(stage.vertex_groups))
    fields = {
        "partials": poplar.Segments(source[stage.piece_elements()], pieces, per_vertex),
        "out": poplar.Segments(dest, stage.group_lengths, stage.vertex_groups),
        "counts": np.split(stage.group_counts, np.cumsum(stage.vertex_groups)[:-1]),
        "scale": job.scale if stage.final else 1.0,
    }
    cs = job.graph.add_compute_set(name)
    job.graph.add_vertices(cs, f"popops::{kind}<{args}>", fields, stage.vertex_tiles)
    job.prog.add(poplar.Execute(cs))


def _starts(lengths: np.ndarray) -> np.ndarray:
    return np.r_[0, np.cumsum(lengths)[:-1]].astype(np.int64) if lengths.size else lengths


def _expand_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concat(arange(s, s + l))`` over the ranges."""
    within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(_starts(lengths), lengths)
    return np.repeat(starts, lengths) + within


def _first_stage(
    job: _Job,
    plan: ReducePlan,
    flat: poplar.Tensor,
    out_flat: poplar.Tensor,
    out_pos: np.ndarray,
) -> poplar.Tensor:
    """Add stage 1; returns the source of the next stage (the stage-1 partials followed by
    the input, or the input alone when every box is a copy), or the output when the plan is
    single-stage."""
    graph, boxes, first = job.graph, plan.vertices, plan.first
    if plan.single_stage:
        dest = out_flat[out_pos[boxes.value_outputs()]]
    elif plan.num_partials or first.computed.all():
        dest = graph.add_variable(job.partials, (plan.num_partials,), f"{job.name}/partials0")
        graph.set_tile_mapping(dest, np.repeat(boxes.tiles, boxes.values))
    else:
        return flat  # every box is a copy: the input elements are the partials
    if boxes.tiles.size:
        kind = "ReduceBlockUpdate" if plan.single_stage and job.update else "ReduceBlock"
        args = f"{job.op.name},{type_arg(flat.dtype)},{type_arg(dest.dtype)}"
        computed = np.repeat(first.computed, first.sizes)
        fields = {
            "partials": poplar.Segments(
                flat if computed.all() else flat[np.flatnonzero(computed)], boxes.sizes
            ),
            "out": poplar.Segments(dest, boxes.values),
            "groups": boxes.groups,
            "outer": boxes.outer,
            "inner": boxes.inner,
            "scale": job.scale if plan.single_stage else 1.0,
        }
        cs = graph.add_compute_set(f"{job.name}/ReduceStage1")
        graph.add_vertices(cs, f"popops::{kind}<{args}>", fields, boxes.tiles)
        job.prog.add(poplar.Execute(cs))
    if plan.single_stage or first.computed.all():
        return dest
    return poplar.concat([dest, flat])
