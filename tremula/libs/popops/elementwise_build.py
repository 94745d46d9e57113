"""Building ``popops.map``: checking the operands, choosing the codelet, placing vertices.

:func:`prepare` validates everything before the graph is touched (a failed call leaves the
graph as it was); :func:`build` adds one compute set with one vertex per worker context
(at most) on every tile holding the output, following the output's tile mapping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError, TensorError
from tremula.libs import util
from tremula.libs.popops.codelets.elementwise import FAMILIES, family_for, fused_codelet
from tremula.libs.popops.expr import (
    BinaryOpType,
    Expr,
    ExprError,
    PlaceHolder,
    TernaryOpType,
    UnaryOpType,
    as_expr,
    make,
    placeholders,
    substitute,
)
from tremula.libs.popops.expr_eval import Typed, infer

#: ``map`` options (PopLibs' names) and their defaults.
OPTIONS = {"enableGenerateCodelet": "true"}


@dataclass
class Operands:
    """A checked ``map`` call: the expression, its inputs, the result shape and type."""

    expr: Expr
    inputs: list[poplar.Tensor]
    shape: tuple[int, ...]
    typed: Typed
    in_place: bool

    @property
    def dtype(self) -> poplar.Type:
        return self.typed.dtype


def as_expression(expr: Any) -> Expr:
    """An expression, or an op type applied to ``_1 .. _arity``."""
    if isinstance(expr, (UnaryOpType, BinaryOpType, TernaryOpType)):
        arity = {UnaryOpType: 1, BinaryOpType: 2, TernaryOpType: 3}[type(expr)]
        return make(expr, *(PlaceHolder(i + 1) for i in range(arity)))
    return as_expr(expr)


def parse_options(options: dict[str, Any] | None, what: str) -> dict[str, bool]:
    opts = dict(OPTIONS)
    for key, value in (options or {}).items():
        if key not in OPTIONS:
            raise GraphError(f"{what}: unknown option {key!r}; known: {sorted(OPTIONS)}")
        text = str(value).lower()
        if text not in ("true", "false"):
            raise GraphError(f"{what}: option {key!r} = {value!r}; expected 'true' or 'false'")
        opts[key] = text
    return {k: v == "true" for k, v in opts.items()}


def _check_inputs(graph: poplar.Graph, inputs: Any, what: str) -> list[poplar.Tensor]:
    if isinstance(inputs, poplar.Tensor):
        inputs = [inputs]
    inputs = list(inputs)
    if not inputs:
        raise GraphError(f"{what}: needs at least one input tensor")
    for i, t in enumerate(inputs):
        if not isinstance(t, poplar.Tensor):
            raise GraphError(
                f"{what}: input {i + 1} (_{i + 1}) is a {type(t).__name__}, not a Tensor"
            )
        if t.graph is not graph.state:
            raise GraphError(f"{what}: input {i + 1} (_{i + 1}) {t!r} belongs to another graph")
    return inputs


def _check_placeholders(expr: Expr, n: int, in_place: bool, what: str) -> None:
    used = placeholders(expr)
    missing = sorted(i for i in used if i > n)
    if missing:
        raise ExprError(
            f"{what}: expression {expr.canonical} uses _{missing[-1]} but {n} input(s) were given"
        )
    unused = [i for i in range(1, n + 1) if i not in used and not (in_place and i == 1)]
    if unused:
        raise ExprError(
            f"{what}: input(s) {', '.join(f'_{i}' for i in unused)} not used by "
            f"expression {expr.canonical} ({n} inputs given)"
        )


def _shape(inputs: Sequence[poplar.Tensor], in_place: bool, what: str) -> tuple[int, ...]:
    shapes = [t.shape for t in inputs]
    try:
        shape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = ", ".join(f"_{i + 1}: {list(s)}" for i, s in enumerate(shapes))
        raise TensorError(f"{what}: input shapes do not broadcast together ({listed})") from None
    if in_place and shapes[0] != shape:
        raise TensorError(
            f"{what}: the in-place operand _1 has shape {list(shapes[0])} but the result "
            f"has shape {list(shape)}: writing it in place would need broadcasting"
        )
    return shape


def prepare(graph: poplar.Graph, expr: Any, inputs: Any, in_place: bool, what: str) -> Operands:
    """Check a ``map`` / ``map_in_place`` call and type its expression.

    Raises:
        GraphError: inputs that are not tensors of ``graph``.
        ExprError: placeholders beyond the inputs or unused inputs, operand type
            mismatches, an op that does not support its type, an in-place result whose type
            differs from the operand's.
        TensorError: shapes that do not broadcast; an in-place operand that would need
            broadcasting; an in-place operand with aliased elements.
    """
    inputs = _check_inputs(graph, inputs, what)
    e = as_expression(expr)
    _check_placeholders(e, len(inputs), in_place, what)
    shape = _shape(inputs, in_place, what)
    typed = infer(e, tuple(t.dtype for t in inputs))
    if in_place:
        target = inputs[0]
        if typed.dtype is not target.dtype:
            raise ExprError(
                f"{what}: expression {e.canonical} gives {typed.dtype} but the in-place "
                f"operand _1 is {target.dtype}"
            )
        util.refuse_aliased(target, what, role="the in-place operand _1")
    return Operands(e, inputs, shape, typed, in_place)


def _unalias(graph: poplar.Graph, ops_: Operands, prog: poplar.Sequence) -> Operands:
    """An in-place call whose other inputs overlap the operand it writes: inputs that are
    the operand itself read it through the in-place field; other overlaps are copied first
    (a compute set may not read what it writes)."""
    target = ops_.inputs[0]
    mapping: dict[int, int] = {}
    inputs = [target]
    changed = False
    for k, t in enumerate(ops_.inputs[1:], start=2):
        if not util.overlaps(t, target):
            mapping[k] = len(inputs) + 1
            inputs.append(t)
        elif t.shape == target.shape and t.same_as(target):
            mapping[k] = 1
            changed = True
        else:
            changed = True
            copy = graph.add_variable(t.dtype, t.shape, "map/unaliased")
            util.map_like(graph, copy, target if t.shape == target.shape else None)
            prog.add(poplar.Copy(t, copy))
            mapping[k] = len(inputs) + 1
            inputs.append(copy)
    if not changed:
        return ops_
    expr = substitute(ops_.expr, mapping)
    typed = infer(expr, tuple(t.dtype for t in inputs))
    return Operands(expr, inputs, ops_.shape, typed, True)


def _codelet(
    graph: poplar.Graph, ops_: Operands, scalars: list[bool]
) -> tuple[type[poplar.Codelet], str]:
    found = family_for(ops_.typed, scalars, ops_.in_place)
    if found is None:
        types = [t.dtype for t in ops_.inputs]
        found = fused_codelet(ops_.expr, types, scalars, ops_.in_place)
        util.ensure_codelets(graph, [found[0]])
    else:
        util.ensure_codelets(graph, FAMILIES)
    return found


def grain_of(graph: poplar.Graph, dtypes: Sequence[poplar.Type]) -> int:
    """Vertex grain: the widest natural vector (in elements) of the types involved."""
    return max(graph.target.vector_width(t.size) for t in dtypes)


def compute_set_name(name: str, default: str, expr: Expr) -> str:
    text = expr.canonical
    text = text if len(text) <= 96 else text[:93] + "..."
    return f"{name or default}/{text}"


def build(
    graph: poplar.Graph,
    ops_: Operands,
    out: poplar.Tensor,
    prog: poplar.Sequence,
    name: str,
) -> None:
    """Add the compute set writing ``out`` (``ops_.inputs[0]`` when in place) and append
    its ``Execute`` to ``prog``."""
    n = out.num_elements
    if n == 0:
        return
    grain = grain_of(graph, [*(t.dtype for t in ops_.inputs), out.dtype])
    part = util.partition(graph, out, grain)  # first: fails on an unmapped in-place operand
    if ops_.in_place:
        ops_ = _unalias(graph, ops_, prog)
    scalars = [t.num_elements == 1 and n > 1 for t in ops_.inputs]
    if ops_.in_place:
        scalars[0] = False
    cls, vtype = _codelet(graph, ops_, scalars)
    fields: dict[str, Any] = {}
    for field, t, scalar in zip(cls.inputs, ops_.inputs, scalars):  # type: ignore[attr-defined]
        if scalar:
            fields[field] = t.reshape((1,))[np.zeros(part.num_vertices, dtype=np.int64)]
        elif t.shape == out.shape:
            fields[field] = part.segments(t)
        else:
            fields[field] = part.segments(t.broadcast_to(out.shape))
    if not ops_.in_place:
        fields[cls.output] = part.segments(out)  # type: ignore[attr-defined]
    cs = graph.add_compute_set(compute_set_name(name, "map", ops_.expr))
    graph.add_vertices(cs, vtype, fields, part.tiles)
    prog.add(poplar.Execute(cs))


def create_output(graph: poplar.Graph, ops_: Operands, name: str) -> poplar.Tensor:
    """The result of ``map``: mapped like the first input with the result's shape, else
    linearly with a grain of the vector width."""
    out = graph.add_variable(ops_.dtype, ops_.shape, f"{name or 'map'}/out")
    for t in ops_.inputs:
        if t.shape == ops_.shape:
            tiles = graph.tiles_of(t)
            if tiles.size == 0 or tiles.min() >= 0:
                graph.set_tile_mapping(out, tiles)
                return out
    poplar.map_tensor_linearly(graph, out, grain_size=grain_of(graph, [ops_.dtype]))
    return out
