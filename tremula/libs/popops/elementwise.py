"""popops element-wise operations: ``map`` / ``map_in_place`` over an expression, and one
function per op of the table (``add``, ``exp``, ``select`` ... and ``add_in_place`` ...).

    from tremula.libs.popops.elementwise import add, map
    from tremula.libs.popops.expr import _1, _2, Relu

    c = add(graph, a, b, prog)                      # c = a + b
    d = map(graph, Relu(_1 * _2 + 1), [a, b], prog)  # one fused compute set

The inputs broadcast together as in NumPy. The result of ``map`` is a new tensor mapped
like the first input with the result's shape (else linearly with a grain of the vector
width); ``map_in_place`` writes the first input, which must have the result's shape and
type. An expression with several operations runs as ONE compute set of one generated
codelet (one vertex per worker context per tile holding the output); a single op runs as a
PopLibs family codelet (``popops::BinaryOp1D<ADD,float>`` ...). The option
``{"enableGenerateCodelet": "false"}`` runs one compute set per op instead.

Named functions take tensors or numbers as operands (at least one tensor; the first one for
the in-place forms): ``add(graph, a, 2.0, prog)`` adds a constant. They return their output
(the in-place forms return the tensor they wrote). Semantics per op: see ``ops.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs.popops import ops
from tremula.libs.popops.elementwise_build import (
    Operands,
    build,
    create_output,
    parse_options,
    prepare,
)
from tremula.libs.popops.expr import (
    Cast,
    Const,
    Expr,
    PlaceHolder,
    as_expr,
    count_ops,
    make,
)
from tremula.poplar import Graph, Tensor
from tremula.poplar import Sequence as Seq


def map(
    graph: poplar.Graph,
    expr: Any,
    inputs: Any,
    prog: poplar.Sequence,
    name: str = "",
    options: dict[str, Any] | None = None,
) -> poplar.Tensor:
    """Evaluate ``expr`` element-wise over ``inputs`` into a new tensor.

    Args:
        graph: The graph to add to.
        expr: An expression over placeholders ``_1 .. _n`` (``_k`` is ``inputs[k-1]``), or
            an op type (``BinaryOpType.ADD``) applied to the inputs in order.
        inputs: The tensors (broadcast together as in NumPy); every one must be used.
        prog: The sequence the compute set's ``Execute`` is appended to.
        name: Debug prefix of the compute set and output names.
        options: ``{"enableGenerateCodelet": "true" | "false"}``.

    Returns:
        The result, of the broadcast shape and the expression's type.

    Raises:
        ExprError: placeholder / input count mismatches, operand type mismatches, an op
            that does not support its type.
        TensorError: shapes that do not broadcast.
        GraphError: bad options or inputs that are not tensors of ``graph``.
    """
    what = f"popops.map({name or expr!s})"
    opts = parse_options(options, what)
    operands = prepare(graph, expr, inputs, False, what)
    if not opts["enableGenerateCodelet"] and count_ops(operands.expr) > 1:
        return _unfused(graph, operands, prog, name)
    out = create_output(graph, operands, name)
    build(graph, operands, out, prog, name)
    return out


def map_in_place(
    graph: poplar.Graph,
    expr: Any,
    inputs: Any,
    prog: poplar.Sequence,
    name: str = "",
    options: dict[str, Any] | None = None,
) -> poplar.Tensor:
    """Evaluate ``expr`` element-wise over ``inputs`` and write it into ``inputs[0]``.

    As :func:`map`, except that ``inputs[0]`` (``_1``) receives the result: it must have
    the broadcast shape and the expression's type and be mapped to tiles; ``_1`` need not
    appear in ``expr``. Other inputs overlapping ``inputs[0]`` are read before it is
    written (copied first when they are not ``inputs[0]`` itself).

    Returns:
        ``inputs[0]``.

    Raises:
        TensorError: ``inputs[0]`` would need broadcasting or has aliased elements.
        ExprError, GraphError: as :func:`map`; also when the expression's type is not
            ``inputs[0]``'s.
    """
    what = f"popops.map_in_place({name or expr!s})"
    opts = parse_options(options, what)
    operands = prepare(graph, expr, inputs, True, what)
    if not opts["enableGenerateCodelet"] and count_ops(operands.expr) > 1:
        return _unfused(graph, operands, prog, name)
    build(graph, operands, operands.inputs[0], prog, name)
    return operands.inputs[0]


def _rebuild(e: Expr, args: list[Any]) -> Expr:
    return Cast(args[0], e.dtype) if isinstance(e, Cast) else make(e.op, *args)  # type: ignore[attr-defined]


def _unfused(
    graph: poplar.Graph, operands: Operands, prog: poplar.Sequence, name: str
) -> poplar.Tensor:
    """One compute set per op, intermediate results in new tensors (PopLibs' ``map`` with
    ``enableGenerateCodelet=false``); constant sub-expressions stay inline."""
    first = [operands.inputs[0]] if operands.in_place else []

    def lower(e: Expr, root: bool) -> Expr | poplar.Tensor:
        if isinstance(e, PlaceHolder):
            return operands.inputs[e.index - 1]
        if isinstance(e, Const):
            return e
        tensors: list[poplar.Tensor] = list(first) if root else []
        args: list[Any] = []
        for k in (lower(c, False) for c in e.children):
            if isinstance(k, poplar.Tensor):
                idx = next((i for i, t in enumerate(tensors) if t is k), None)
                if idx is None:
                    tensors.append(k)
                    idx = len(tensors) - 1
                args.append(PlaceHolder(idx + 1))
            else:
                args.append(k)
        node = _rebuild(e, args)
        if not tensors:
            return node
        if root and operands.in_place:
            return map_in_place(graph, node, tensors, prog, name)
        return map(graph, node, tensors, prog, name)

    result = lower(operands.expr, True)
    assert isinstance(result, poplar.Tensor)
    return result


# ---- one function per op, generated from the table ----


def _call(
    rec: ops.Op,
    graph: poplar.Graph,
    operands: list[Any],
    prog: poplar.Sequence,
    name: str,
    options: dict[str, Any] | None,
    in_place: bool,
) -> poplar.Tensor:
    what = f"popops.{rec.name}{'_in_place' if in_place else ''}"
    tensors: list[poplar.Tensor] = []
    args: list[Expr] = []
    for i, a in enumerate(operands):
        if isinstance(a, poplar.Tensor):
            tensors.append(a)
            args.append(PlaceHolder(len(tensors)))
        elif in_place and i == 0:
            raise GraphError(f"{what}: the first operand must be a Tensor, got {a!r}")
        else:
            try:
                args.append(as_expr(a))
            except GraphError as err:
                raise GraphError(f"{what}: operand {i + 1}: {err}") from None
    if not tensors:
        raise GraphError(f"{what}: at least one operand must be a Tensor, got {operands!r}")
    fn = map_in_place if in_place else map
    return fn(graph, make(rec.op, *args), tensors, prog, name or rec.name, options)


_DOC_ARGS = {1: "a", 2: "a, b", 3: "a, b, c"}
Opts = dict[str, Any] | None
_TERNARY_DOC = {"select": "c ? a : b", "clamp": "a clamped to [b, c]"}


def _function(rec: ops.Op, in_place: bool) -> Callable[..., poplar.Tensor]:
    """``popops.<op>(graph, a[, b[, c]], prog, name="", options=None)``."""
    if rec.arity == 1:

        def fn(graph: Graph, a: Any, prog: Seq, name: str = "", options: Opts = None) -> Tensor:
            return _call(rec, graph, [a], prog, name, options, in_place)

    elif rec.arity == 2:

        def fn(  # type: ignore[misc]
            graph: Graph, a: Any, b: Any, prog: Seq, name: str = "", options: Opts = None
        ) -> Tensor:
            return _call(rec, graph, [a, b], prog, name, options, in_place)

    else:

        def fn(  # type: ignore[misc]
            graph: Graph, a: Any, b: Any, c: Any, prog: Seq, name: str = "", options: Opts = None
        ) -> Tensor:
            return _call(rec, graph, [a, b, c], prog, name, options, in_place)

    fn.__name__ = fn.__qualname__ = f"{rec.name}{'_in_place' if in_place else ''}"
    what = _TERNARY_DOC.get(rec.name, f"{rec.op.name}({_DOC_ARGS[rec.arity]})")
    result = "into ``a`` (returned)" if in_place else "into a new tensor (returned)"
    fn.__doc__ = (
        f"{what}, element-wise, {result}.\n\n"
        f"Operands are tensors (broadcast together) or numbers, at least one tensor"
        f"{' (a)' if in_place else ''}; accepted type families: {sorted(rec.costs)}. "
        f"Semantics: ``tremula.libs.popops.ops``. ``name`` prefixes the compute set; "
        f"``options`` as for ``map``."
    )
    return fn


def _install() -> list[str]:
    """Define the named functions of every op (and their aliases) in this module."""
    names = []
    for rec in ops.OPS:
        for in_place in (False, True) if rec.in_place else (False,):
            fn = _function(rec, in_place)
            for alias in (rec.name, *rec.aliases):
                full = f"{alias}_in_place" if in_place else alias
                globals()[full] = fn
                names.append(full)
    return names


__all__ = ["map", "map_in_place", *_install()]
