"""poplin's matmul API: ``matmul``, ``matmul_grouped``, ``matmul_acc`` and the
``create_matmul_input_*`` functions, built from a :class:`~tremula.libs.poplin.plan.Plan`.

A call validates everything first (so that a failed call leaves the graph as it was), plans
(cached), then adds: the partials variable, one compute set of block products per serial
step (``<name>/partials[/sN]``), and, when the plan has a stage 2, the compute set summing
the partials on the output's tiles (``<name>/reduce``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.poplin import build
from tremula.libs.poplin.options import (
    MatMulError,
    MatMulOptions,
    check_input_type,
    output_type,
    parse_options,
    partials_type,
)
from tremula.libs.poplin.plan import MatMulParams, Plan, plan_matmul
from tremula.target import Target


def matmul(
    graph: poplar.Graph,
    a: poplar.Tensor,
    b: poplar.Tensor,
    prog: poplar.Sequence,
    dtype: Any = None,
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """``a @ b`` for ``a [M, K]`` and ``b [K, N]`` (any views, e.g. transposes).

    Args:
        graph: the graph to add to.
        a, b: the operands, of one type (``half``, ``float`` or ``int``).
        prog: the sequence the programs are appended to.
        dtype: the result type (default: the operands' type; ``half`` or ``float`` for
            floating-point operands).
        name: debug prefix of the compute sets and variables.
        options: ``availableMemoryProportion``, ``partialsType``, ``fullyConnectedPass``.

    Returns:
        A new ``[M, N]`` tensor, laid out as the plan computes it.

    Raises:
        MatMulError: bad ranks, shapes, types or options (the graph is left unchanged).
    """
    call = _validate(graph, a, b, prog, dtype, name, options, "poplin.matmul", grouped=False)
    return build.run(call, prog, None, 1.0)[0]


def matmul_grouped(
    graph: poplar.Graph,
    a: poplar.Tensor,
    b: poplar.Tensor,
    prog: poplar.Sequence,
    dtype: Any = None,
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """``G`` independent products ``a[g] @ b[g]`` of ``a [G, M, K]`` and ``b [G, K, N]``;
    returns ``[G, M, N]``. Arguments as :func:`matmul`."""
    call = _validate(graph, a, b, prog, dtype, name, options, "poplin.matmul_grouped", True)
    return build.run(call, prog, None, 1.0)


def matmul_acc(
    graph: poplar.Graph,
    c: poplar.Tensor,
    a: poplar.Tensor,
    b: poplar.Tensor,
    scale: float,
    prog: poplar.Sequence,
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """``c += scale * (a @ b)`` in place, ``c [M, N]`` of the result type (``a``'s type or,
    for half operands, float). Returns ``c``."""
    where = "poplin.matmul_acc"
    call = _validate(graph, a, b, prog, _acc_type(c, where), name, options, where, False)
    _check_acc(call, c, scale, where, grouped=False)
    build.run(call, prog, c.expand([0]), float(scale))
    return c


def matmul_grouped_acc(
    graph: poplar.Graph,
    c: poplar.Tensor,
    a: poplar.Tensor,
    b: poplar.Tensor,
    scale: float,
    prog: poplar.Sequence,
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """``c[g] += scale * (a[g] @ b[g])`` for ``c [G, M, N]``. Returns ``c``."""
    where = "poplin.matmul_grouped_acc"
    call = _validate(graph, a, b, prog, _acc_type(c, where), name, options, where, True)
    _check_acc(call, c, scale, where, grouped=True)
    build.run(call, prog, c, float(scale))
    return c


def create_matmul_input_lhs(
    graph: poplar.Graph,
    dtype: Any,
    a_shape: Sequence[int],
    b_shape: Sequence[int],
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """A new ``a_shape`` operand ``A [M, K]`` mapped as the plan of ``A @ B``
    (``b_shape = [K, N]``) reads it: each block spread in equal pieces over the tiles that
    read it (a row-major variable of the planned frame, so the products view it in place;
    the result is a transposed view when the plan swaps)."""
    return _create(graph, dtype, a_shape, b_shape, name, options, "lhs", grouped=False)


def create_matmul_input_rhs(
    graph: poplar.Graph,
    dtype: Any,
    a_shape: Sequence[int],
    b_shape: Sequence[int],
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """A new ``b_shape`` operand ``B [K, N]`` laid out for the plan of ``A @ B``."""
    return _create(graph, dtype, a_shape, b_shape, name, options, "rhs", grouped=False)


def create_matmul_grouped_input_lhs(
    graph: poplar.Graph,
    dtype: Any,
    a_shape: Sequence[int],
    b_shape: Sequence[int],
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """A new ``[G, M, K]`` operand laid out for the plan of the grouped product."""
    return _create(graph, dtype, a_shape, b_shape, name, options, "lhs", grouped=True)


def create_matmul_grouped_input_rhs(
    graph: poplar.Graph,
    dtype: Any,
    a_shape: Sequence[int],
    b_shape: Sequence[int],
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """A new ``[G, K, N]`` operand laid out for the plan of the grouped product."""
    return _create(graph, dtype, a_shape, b_shape, name, options, "rhs", grouped=True)


def matmul_plan(
    target: Target,
    dtype: Any,
    a_shape: Sequence[int],
    b_shape: Sequence[int],
    out_dtype: Any = None,
    options: Mapping[str, Any] | None = None,
) -> Plan:
    """The plan ``matmul`` (2-D shapes) or ``matmul_grouped`` (3-D) uses on ``target``."""
    where = "poplin.matmul_plan"
    in_type = check_input_type(dtype, where, "the operand type")
    a_shape, b_shape = _as_shape(a_shape, "a_shape", where), _as_shape(b_shape, "b_shape", where)
    g, m, k, n = _shapes(a_shape, b_shape, where, len(a_shape) == 3)
    if min(g, m, k, n) == 0:
        raise MatMulError(f"{where}: shapes {a_shape} @ {b_shape} are empty")
    opts = parse_options(options, where)
    out = output_type(in_type, out_dtype, where)
    params = _params(g, m, k, n, in_type, partials_type(in_type, opts), out, opts)
    return plan_matmul(params, target)


# ---- validation ----
def _as_shape(shape: Any, what: str, where: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in shape)
        ok = all(x >= 0 and x == y for x, y in zip(out, shape))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise MatMulError(f"{where}: {what} must be a sequence of sizes >= 0, got {shape!r}")
    return out


def _acc_type(c: Any, where: str) -> Any:
    if not isinstance(c, poplar.Tensor):
        raise MatMulError(f"{where}: c must be a Tensor, got {type(c).__name__}")
    return c.dtype


def _shapes(
    a: tuple[int, ...], b: tuple[int, ...], where: str, grouped: bool
) -> tuple[int, int, int, int]:
    rank = 3 if grouped else 2
    for what, s in (("a", a), ("b", b)):
        if len(s) != rank:
            raise MatMulError(
                f"{where}: {what} must have rank {rank} "
                f"({'[G, M, K] / [G, K, N]' if grouped else '[M, K] / [K, N]'}), got shape {s}"
            )
    if grouped and a[0] != b[0]:
        raise MatMulError(
            f"{where}: group counts differ: a has shape {a} ({a[0]} groups), b has shape {b} "
            f"({b[0]} groups)"
        )
    if a[-1] != b[-2]:
        raise MatMulError(
            f"{where}: inner dimensions differ: a has shape {a} (K = {a[-1]}), b has shape "
            f"{b} (K = {b[-2]})"
        )
    g = a[0] if grouped else 1
    return int(g), int(a[-2]), int(a[-1]), int(b[-1])


def _validate(
    graph: Any,
    a: Any,
    b: Any,
    prog: Any,
    dtype: Any,
    name: str,
    options: Any,
    where: str,
    grouped: bool,
) -> build.MatMulCall:
    if not isinstance(graph, poplar.Graph):
        raise MatMulError(f"{where}: graph must be a poplar.Graph, got {type(graph).__name__}")
    for what, t in (("a", a), ("b", b)):
        if not isinstance(t, poplar.Tensor) or t.graph is not graph.state:
            raise MatMulError(f"{where}: {what} must be a Tensor of this graph, got {t!r}")
    if not isinstance(prog, poplar.Sequence):
        raise MatMulError(f"{where}: prog must be a poplar.Sequence, got {type(prog).__name__}")
    g, m, k, n = _shapes(a.shape, b.shape, where, grouped)
    in_type = check_input_type(a.dtype, where, f"a (shape {a.shape})")
    if b.dtype is not a.dtype:
        raise MatMulError(
            f"{where}: operand types differ: a {a.shape} is {a.dtype}, b {b.shape} is {b.dtype}"
        )
    opts = parse_options(options, where)
    out = output_type(in_type, dtype, where)
    for what, t in (("a", a), ("b", b)):
        _check_mapped(graph, t, what, where)
    a3, b3 = (a, b) if grouped else (a.expand([0]), b.expand([0]))
    params = _params(g, m, k, n, in_type, partials_type(in_type, opts), out, opts)
    return build.MatMulCall(graph, a3, b3, in_type, out, partials_type(in_type, opts), params, name)


def _check_mapped(graph: poplar.Graph, t: poplar.Tensor, what: str, where: str) -> None:
    first = graph.first_unmapped(t)
    if first is not None:
        raise MatMulError(
            f"{where}: {what} {t!r} has unmapped elements (first: flat index {first}); map it "
            f"(e.g. create it with create_matmul_input_*)"
        )


def _check_acc(
    call: build.MatMulCall, c: poplar.Tensor, scale: Any, where: str, grouped: bool
) -> None:
    p = call.params
    want = (p.groups, p.m, p.n) if grouped else (p.m, p.n)
    if c.graph is not call.graph.state or tuple(c.shape) != want:
        a, b = call.a.shape[3 - len(want) :], call.b.shape[3 - len(want) :]
        raise MatMulError(
            f"{where}: c must be a Tensor of this graph of shape {want} for the product of a "
            f"{a} and b {b}, got {c!r} of shape {c.shape}"
        )
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise MatMulError(f"{where}: scale must be a number, got {scale!r}")
    if call.in_type.is_integral and float(scale) != int(scale):
        raise MatMulError(f"{where}: scale {scale!r} must be an integer for int operands")
    _check_mapped(call.graph, c, "c", where)


def _params(
    g: int,
    m: int,
    k: int,
    n: int,
    in_type: poplar.Type,
    p_type: poplar.Type,
    out: poplar.Type,
    opts: MatMulOptions,
) -> MatMulParams:
    return MatMulParams(
        g,
        m,
        k,
        n,
        in_type.name,
        p_type.name,
        out.name,
        opts.available_memory_proportion,
        swappable=not opts.joint,
    )


def _create(
    graph: poplar.Graph,
    dtype: Any,
    a_shape: Sequence[int],
    b_shape: Sequence[int],
    name: str,
    options: Mapping[str, Any] | None,
    side: str,
    grouped: bool,
) -> poplar.Tensor:
    where = f"poplin.create_matmul{'_grouped' if grouped else ''}_input_{side}"
    if not isinstance(graph, poplar.Graph):
        raise MatMulError(f"{where}: graph must be a poplar.Graph, got {type(graph).__name__}")
    a_shape, b_shape = _as_shape(a_shape, "a_shape", where), _as_shape(b_shape, "b_shape", where)
    in_type = check_input_type(dtype, where, "dtype")
    g, m, k, n = _shapes(a_shape, b_shape, where, grouped)
    opts = parse_options(options, where)
    shape = a_shape if side == "lhs" else b_shape
    label = name or f"matmul_{side}"
    if g * m * k * n == 0:
        t = graph.add_variable(in_type, shape, label)
        poplar.map_tensor_linearly(graph, t)
        return t
    params = _params(g, m, k, n, in_type, partials_type(in_type, opts), in_type, opts)
    t = build.create_operand(graph, params, in_type, side, label)
    return t if grouped else t[0]
