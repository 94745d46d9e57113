"""``popops.scaled_add_to`` (``a += s b``), ``scaled_subtract_from`` (``a -= s b``) and
``a_x_plus_b_y`` (``a = s_a a + s_b b``), in place on ``a``.

Scales are Python numbers (compiled into the vertices' state) or one-element tensors
(read by every vertex). ``a`` and ``b`` have one shape and one type (float, half or an
integer type). A scale tensor has the data's type, or float for half data. A number scale
for half data is kept in float when half cannot hold it exactly (PopLibs' rule). float
and half are computed in float32 and rounded once; integers wrap.

Codelets (worker vertices over one part of ``a``, at most one per worker context per tile
holding ``a``): ``popops::ScaledAdd1D<T,S>`` (number scales, state ``scaleA`` /
``scaleB``), ``popops::ScaledAdd1DTensor<T,S>`` (tensor ``scaleB``; state ``subtract``)
and ``popops::aXPlusbY1DTensor<T,S>`` (tensors ``scaleA`` and ``scaleB``). Estimator (PopLibs'
ScaledAdd): ``16 + 9 + cpv x (vectors - 1) + 4 x remainder`` with ``cpv`` 5 for half
data with a float scale, 3 otherwise [proposal], +1 per vector when ``a`` is scaled and +4
per tensor scale [proposal]; integers ``53 + 26 floor(n/3) + 9 (n mod 3)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError, TensorError
from tremula.libs import util
from tremula.libs.popops.codelets.elementwise import type_arg
from tremula.libs.popops.codelets.scaled_add import (
    CODELETS,
    AXPlusBY1DTensor,
    ScaledAdd,
    ScaledAdd1D,
    ScaledAdd1DTensor,
)
from tremula.libs.popops.expr_eval import scalar_value
from tremula.poplar.types import FLOAT, HALF, Type

Scale = int | float | poplar.Tensor


def _check_data(graph: poplar.Graph, a: Any, b: Any, what: str) -> None:
    for label, t in (("a", a), ("b", b)):
        if not isinstance(t, poplar.Tensor) or t.graph is not graph.state:
            raise GraphError(f"{what}: {label} must be a Tensor of this graph, got {t!r}")
    if a.shape != b.shape:
        raise TensorError(
            f"{what}: a has shape {list(a.shape)} and b {list(b.shape)}; they must match"
        )
    if a.dtype is not b.dtype:
        raise GraphError(f"{what}: a is {a.dtype} and b is {b.dtype}; they must match")
    if a.dtype.numpy.kind not in "fiu":
        raise GraphError(f"{what}: type {a.dtype} not supported (float, half or integers)")
    util.refuse_aliased(a, what, role="a")


def _scale_type(data: Type, scales: list[tuple[str, Any]], what: str) -> Type:
    """The scales' type S: the data's; for half data, float when a scale tensor is float or
    (no scale tensor being given) a number half cannot hold exactly."""
    for label, s in scales:
        if isinstance(s, poplar.Tensor):
            ok = s.dtype is data or (data is HALF and s.dtype is FLOAT)
            if not ok or s.num_elements != 1:
                raise GraphError(
                    f"{what}: {label} {s!r} must have one element of type {data}"
                    f"{' or float' if data is HALF else ''}"
                )
        elif not isinstance(s, (bool, int, float, np.generic)) or np.ndim(s) != 0:
            raise GraphError(f"{what}: {label} must be a number or a tensor, got {s!r}")
        else:
            scalar_value(s, data if data.numpy.kind != "f" else FLOAT, f"{what}: {label}")
    if data is not HALF:
        return data
    tensors = [s.dtype for _, s in scales if isinstance(s, poplar.Tensor)]
    if tensors:
        return FLOAT if FLOAT in tensors else HALF
    inexact = any(float(np.float16(s)) != float(s) for _, s in scales)
    return FLOAT if inexact else HALF


def _number(value: Any, s: Type, negate: bool) -> np.ndarray:
    """A number scale as a value of S (integers wrap, so -s works for unsigned types)."""
    v = -value if negate else value
    if s.numpy.kind in "iu":
        return np.array(int(v), dtype=np.int64).astype(s.numpy)
    return np.array(v, dtype=s.numpy)


def _scale_tensor(graph: poplar.Graph, value: Any, s: Type) -> poplar.Tensor:
    if isinstance(value, poplar.Tensor):
        return value.reshape((1,))
    const = graph.add_constant(s, (1,), _number(value, s, False), "scale")
    graph.set_tile_mapping(const, 0)
    return const


def _run(
    graph: poplar.Graph,
    a: poplar.Tensor,
    b: poplar.Tensor,
    scale_a: Any,
    scale_b: Any,
    subtract: bool,
    prog: poplar.Sequence,
    name: str,
    what: str,
    options: dict[str, Any] | None,
) -> poplar.Tensor:
    unknown = sorted(set(options or {}) - {"optimizeForSpeed"})
    if unknown:
        raise GraphError(f"{what}: unknown option(s) {unknown}; known: ['optimizeForSpeed']")
    _check_data(graph, a, b, what)
    scales = [("scale_b", scale_b)] + ([] if scale_a is None else [("scale_a", scale_a)])
    s = _scale_type(a.dtype, scales, what)
    if a.num_elements == 0:
        return a
    part = util.partition(graph, a, graph.target.vector_width(a.dtype.size))
    b = util.unaliased(graph, b, a, prog, f"{name or 'scaledAdd'}/deltas", like=a)
    scale_a, scale_b = (  # a scale tensor that is an element of a: read before a is written
        util.unaliased(graph, x, a, prog, f"{name or 'scaledAdd'}/scale")
        if isinstance(x, poplar.Tensor)
        else x
        for x in (scale_a, scale_b)
    )
    nv = part.num_vertices
    fields: dict[str, Any] = {"data": part.segments(a), "deltas": part.segments(b)}
    each = np.zeros(nv, dtype=np.int64)
    if not any(isinstance(x, poplar.Tensor) for _, x in scales):
        cls: type[ScaledAdd] = ScaledAdd1D
        fields["scaleA"] = _number(1 if scale_a is None else scale_a, s, False)
        fields["scaleB"] = _number(scale_b, s, subtract)
    elif scale_a is None:
        cls = ScaledAdd1DTensor
        fields["scaleB"] = scale_b.reshape((1,))[each]
        fields["subtract"] = subtract
    else:
        cls = AXPlusBY1DTensor
        fields["scaleA"] = _scale_tensor(graph, scale_a, s)[each]
        fields["scaleB"] = _scale_tensor(graph, scale_b, s)[each]
    util.ensure_codelets(graph, CODELETS)
    cs = graph.add_compute_set(f"{name or what.split('.')[-1]}/{cls.name.split('::')[-1]}")
    vtype = f"{cls.name}<{type_arg(a.dtype)},{type_arg(s)}>"
    graph.add_vertices(cs, vtype, fields, part.tiles)
    prog.add(poplar.Execute(cs))
    return a


def scaled_add_to(
    graph: poplar.Graph,
    a: poplar.Tensor,
    b: poplar.Tensor,
    scale: Scale,
    prog: poplar.Sequence,
    name: str = "",
    options: dict[str, Any] | None = None,
) -> poplar.Tensor:
    """``a += scale * b`` in place (PopLibs' ``scaledAddTo``).

    Args:
        graph: The graph to add to.
        a: The tensor updated; mapped to tiles, without aliased elements.
        b: A tensor of ``a``'s shape and type (copied first if it overlaps ``a``).
        scale: A number, or a one-element tensor of ``a``'s type (or float for half),
            copied first if it is an element of ``a``.
        prog: The sequence the compute set is appended to.
        name: Debug prefix of the compute set.
        options: ``{"optimizeForSpeed": ...}`` (accepted; no effect on the model).

    Returns:
        ``a``.

    Raises:
        TensorError: shapes differ, or ``a`` has aliased elements.
        GraphError: types differ or are not float, half or integers; a bad scale (its type,
            its size, a non-integral number for integer data); an unknown option.
    """
    what = "popops.scaled_add_to"
    return _run(graph, a, b, None, scale, False, prog, name, what, options)


def scaled_subtract_from(
    graph: poplar.Graph,
    a: poplar.Tensor,
    b: poplar.Tensor,
    scale: Scale,
    prog: poplar.Sequence,
    name: str = "",
    options: dict[str, Any] | None = None,
) -> poplar.Tensor:
    """``a -= scale * b`` in place (PopLibs' ``scaledSubtractFrom``); as
    :func:`scaled_add_to`."""
    what = "popops.scaled_subtract_from"
    return _run(graph, a, b, None, scale, True, prog, name, what, options)


def a_x_plus_b_y(
    graph: poplar.Graph,
    a: poplar.Tensor,
    scale_a: Scale,
    b: poplar.Tensor,
    scale_b: Scale,
    prog: poplar.Sequence,
    name: str = "",
    options: dict[str, Any] | None = None,
) -> poplar.Tensor:
    """``a = scale_a * a + scale_b * b`` in place (PopLibs' ``aXPlusbY``, argument order
    ``(A, scaleA, B, scaleB)``); scales as in :func:`scaled_add_to`. A number given with a
    tensor scale becomes a constant tensor."""
    what = "popops.a_x_plus_b_y"
    return _run(graph, a, b, scale_a, scale_b, False, prog, name, what, options)
