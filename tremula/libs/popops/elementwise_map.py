"""popops element-wise operations: ``map`` / ``map_in_place`` over an expression, and
:func:`call_op`, which the named function of each op of the table calls (``add``, ``exp``,
``select`` ... and ``add_in_place`` ..., in the generated ``elementwise_unary.py`` and
``elementwise_binary.py``; ``elementwise.py`` gathers them all).

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


# ---- the named functions (``elementwise_unary.py``, ``elementwise_binary.py``) call this ----

#: the ``options`` argument of every element-wise function
Options = dict[str, Any] | None


def call_op(
    op: str,
    graph: poplar.Graph,
    operands: list[Any],
    prog: poplar.Sequence,
    name: str,
    options: Options,
    in_place: bool,
) -> poplar.Tensor:
    """The op named ``op`` in the table on ``operands`` (tensors or numbers, at least one
    tensor; the first one when ``in_place``): a :func:`map` or :func:`map_in_place` of
    the op over the tensors, numbers inline as constants.

    Raises:
        GraphError: no tensor operand, a number as the in-place target, or an operand that
            is neither a tensor nor a number.
    """
    rec = ops.BY_NAME[op]
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
