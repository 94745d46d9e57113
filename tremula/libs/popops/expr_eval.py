"""Typing and evaluating expressions: the part of ``popops.map`` that knows no graph.

:func:`infer` gives every node of an expression its type for given input types (checking
operand types against the op table) and turns constants into NumPy scalars of their type;
:func:`evaluate` runs a typed expression on arrays (the codelets' compute); the cost
helpers sum the table's cycles over a fused expression.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

import numpy as np

from tremula import numerics
from tremula.libs.popops import ops
from tremula.libs.popops.elementwise_math import convert
from tremula.libs.popops.expr import Cast, Const, Expr, ExprError, PlaceHolder
from tremula.poplar.types import BOOL, FLOAT, INT, Type


@dataclass(frozen=True, eq=False)
class Typed:
    """An expression node with its result type; ``op`` and ``in_type`` (the type its
    operands share) for operations, ``value`` for constants, ``index`` (0-based) for
    placeholders."""

    expr: Expr
    dtype: Type
    args: tuple[Typed, ...] = ()
    op: ops.ElementwiseOp | None = None
    in_type: Type | None = None
    value: Any = None
    index: int = -1

    def nodes(self) -> list[Typed]:
        """This node and all below it, children first."""
        out: list[Typed] = []
        for a in self.args:
            out.extend(a.nodes())
        out.append(self)
        return out


def _default_type(value: bool | int | float) -> Type:
    if isinstance(value, bool):
        return BOOL
    return INT if isinstance(value, int) else FLOAT


def scalar_value(value: bool | int | float | np.generic, t: Type, what: str) -> np.generic:
    """``value`` as a NumPy scalar of ``t``; integer and bool types must hold it exactly.

    Raises:
        ExprError: ``value`` is not integral or out of range for an integer type, or not
            0 / 1 for bool (``what`` names the value in the message).
    """
    v: bool | int | float = value.item() if isinstance(value, np.generic) else value
    kind = t.numpy.kind
    exact = True
    if kind in "iu":
        info = np.iinfo(t.numpy)
        exact = float(v).is_integer() and info.min <= v <= info.max
    elif kind == "b":
        exact = v in (0, 1)
    if not exact:
        raise ExprError(f"{what}: {value!r} does not fit type {t}")
    with np.errstate(all="ignore"):
        return t.numpy.type(v)


def _natural(e: Expr, types: Sequence[Type]) -> Type | None:
    """The type of ``e`` from its inputs and typed constants alone (None when only untyped
    constants decide it)."""
    if isinstance(e, PlaceHolder):
        return types[e.index - 1] if e.index <= len(types) else None
    if isinstance(e, Const):
        return e.dtype
    if isinstance(e, Cast):
        return e.dtype
    rec = ops.BY_OP[e.op]  # type: ignore[attr-defined]
    if rec.result == "bool":
        return BOOL
    for i, c in enumerate(e.children):
        if i != rec.cond:
            t = _natural(c, types)
            if t is not None:
                return t
    return None


def _infer_op(e: Expr, types: Sequence[Type], hint: Type | None) -> Typed:
    rec = ops.BY_OP[e.op]  # type: ignore[attr-defined]
    kids = e.children
    shared = [i for i in range(len(kids)) if i != rec.cond]
    t = next((x for i in shared if (x := _natural(kids[i], types)) is not None), None)
    if t is None:
        t = hint if rec.result == "same" and hint is not None else None
    if t is None:
        t = _infer(kids[shared[0]], types, None).dtype
    args = tuple(_infer(k, types, BOOL if i == rec.cond else t) for i, k in enumerate(kids))
    for i, a in enumerate(args):
        want = BOOL if i == rec.cond else t
        if a.dtype is not want:
            raise ExprError(
                f"{rec.op.name} in {e.canonical}: operand {i + 1} ({a.expr.canonical}) has "
                f"type {a.dtype}, expected {want}"
                + (" (the condition is bool)" if i == rec.cond else " (operands share a type)")
            )
    if not rec.supports(t):
        raise ExprError(
            f"{rec.op.name} in {e.canonical}: operands of type {t} are not supported; "
            f"supported type families: {sorted(rec.costs)}"
        )
    return Typed(e, rec.result_type(t), args, rec, t)


def _infer(e: Expr, types: Sequence[Type], hint: Type | None) -> Typed:
    if isinstance(e, PlaceHolder):
        if e.index > len(types):
            raise ExprError(f"placeholder {e.canonical} used with only {len(types)} input(s)")
        return Typed(e, types[e.index - 1], index=e.index - 1)
    if isinstance(e, Const):
        t = e.dtype or hint or _default_type(e.value)
        what = f"constant {e.canonical} (meeting an operand of type {t})"
        return Typed(e, t, value=scalar_value(e.value, t, what))
    if isinstance(e, Cast):
        arg = _infer(e.a, types, None)
        return Typed(e, e.dtype, (arg,), None, arg.dtype)
    return _infer_op(e, types, hint)


@lru_cache(maxsize=4096)
def infer(expr: Expr, types: tuple[Type, ...]) -> Typed:
    """Type ``expr`` for inputs of ``types`` (``_1`` has ``types[0]``).

    Raises:
        ExprError: a placeholder beyond the inputs, operands of different types, an op
            that does not support its operand type, or a constant that does not fit.
    """
    return _infer(expr, types, None)


def _eval(
    t: Typed, inputs: Sequence[np.ndarray], out: np.ndarray | None
) -> tuple[np.ndarray, bool]:
    """(value, whether it is a temporary of this evaluation). An op whose operand is a
    temporary of the result's shape and type writes into it: a fused expression allocates
    about one array, not one per op."""
    if t.op is not None:
        vals = [_eval(a, inputs, None) for a in t.args]
        args = [v for v, _ in vals]
        if out is None:
            shape = np.broadcast_shapes(*(np.shape(v) for v in args))
            want = t.dtype.numpy
            out = next((v for v, own in vals if own and v.shape == shape and v.dtype == want), None)
        return ops.apply_quietly(t.op, t.in_type, args, out), True  # type: ignore[arg-type]
    if t.index >= 0:
        return inputs[t.index], False
    if t.args:  # a cast
        value, _ = _eval(t.args[0], inputs, None)
        converted = convert(value, t.dtype)
        return converted, converted is not value
    return t.value, False


#: the ops whose integer forms divide (``debug.checkIntegerDivision`` checks their divisors)
_DIVIDING = ("DIVIDE", "REMAINDER")


def integer_divisions(t: Typed) -> list[Typed]:
    """The integer divisions and remainders of ``t`` (``debug.checkIntegerDivision``
    checks their divisors)."""
    return [
        n
        for n in t.nodes()
        if n.op is not None
        and n.op.op.name in _DIVIDING
        and n.in_type is not None
        and n.in_type.numpy.kind in "iu"
    ]


def zero_divisor(t: Typed, inputs: Sequence[np.ndarray]) -> tuple[Typed, int] | None:
    """The first integer division or remainder of ``t`` whose divisor has a zero element
    on ``inputs``, with the flat index of that element (None: no zero divisor). The
    divisors are evaluated on their own: nothing is written."""
    for n in integer_divisions(t):
        with np.errstate(all="ignore"):
            divisor, _ = _eval(n.args[1], inputs, None)
        zeros = np.flatnonzero(np.asarray(divisor) == 0)
        if zeros.size:
            return n, int(zeros[0])
    return None


def evaluate(t: Typed, inputs: Sequence[np.ndarray], out: np.ndarray) -> None:
    """Write ``t`` evaluated on ``inputs`` (arrays broadcastable to ``out``) into ``out``.

    ``out`` may be one of the inputs (in place): only the last op writes it, after all its
    operands are computed."""
    with np.errstate(all="ignore"):  # the device computes IEEE results silently
        result, _ = _eval(t, inputs, out)
    if result is not out:
        out[...] = result


def compile_run(t: Typed, inputs: Sequence[np.ndarray], out: np.ndarray) -> Callable[[], None]:
    """:func:`evaluate` specialised to fixed arrays (views of device memory that later runs
    refill): the walk over the tree, the type decisions and the temporaries are done once,
    so a run is one NumPy call per node into preallocated buffers. The numbers are those
    of :func:`evaluate` (each op in its operand type, half through float32)."""
    return numerics.quiet(compile_steps(t, inputs, out))


def compile_steps(t: Typed, inputs: Sequence[np.ndarray], out: np.ndarray) -> Callable[[], None]:
    """:func:`compile_run` without its floating-point error guard (for a caller that adds
    it around more work, or runs inside ``numerics.quietly``)."""
    steps: list[Callable[[], None]] = []

    def build(node: Typed, target: np.ndarray | None) -> np.ndarray:
        if node.index >= 0:
            return inputs[node.index]
        if node.op is None and not node.args:
            return node.value  # a NumPy scalar of the constant's type
        compare = _compare_cast(node)
        if compare is not None:  # a comparison's bools cast to floats: written as floats
            args = [build(a, None) for a in compare.args]
            shape = np.broadcast_shapes(*(np.shape(a) for a in args))
            buf = target if target is not None and target.shape == shape else None
            if buf is None or buf.dtype != node.dtype.numpy:
                buf = np.empty(shape, dtype=node.dtype.numpy)
            ufunc: Any = compare.op.ref if compare.op is not None else None
            steps.append(partial(ufunc, *args, out=buf))
            return buf
        args = [build(a, None) for a in node.args]
        shape = np.broadcast_shapes(*(np.shape(a) for a in args))
        want = node.dtype.numpy
        buf = target if target is not None and target.shape == shape else None
        if buf is None or buf.dtype != want:
            buf = np.empty(shape, dtype=want)
        if node.op is None:  # a cast
            src = args[0]
            if np.dtype(src.dtype).kind == "f" and want.kind in "iu":  # saturating: convert
                steps.append(lambda: np.copyto(buf, convert(src, node.dtype), casting="unsafe"))
            else:  # NumPy's own cast follows popops.cast's rules here: no temporary
                steps.append(partial(np.copyto, buf, src, casting="unsafe"))
        else:
            steps.append(_op_step(node.op, node.in_type, args, buf))  # type: ignore[arg-type]
        return buf

    result = build(t, out)
    if result is not out:  # an input or constant alone, or a broadcast result
        steps.append(partial(np.copyto, out, result, casting="unsafe"))
    return sequence(steps)


def _compare_cast(node: Typed) -> Typed | None:
    """The comparison that cast ``node`` converts from bool to a float type, when the
    comparison's ufunc can write the floats itself (``np.greater(x, y, out=floats)``: its
    True / False become 1.0 / 0.0, what the cast of a bool temporary gives); else None."""
    if node.op is not None or len(node.args) != 1 or node.dtype.numpy.kind != "f":
        return None
    child = node.args[0]
    op = child.op
    if child.index >= 0 or op is None or child.in_type is None:
        return None
    if op.result != "bool" or not isinstance(op.ref, np.ufunc):
        return None
    if child.in_type.numpy == np.float16 or child.dtype.numpy != np.bool_:
        return None  # (half operands are compared through float32: ``_op_step``)
    return child


def sequence(steps: Sequence[Callable[[], None]]) -> Callable[[], None]:
    """One call that makes ``steps`` in order (the step itself when there is one, no loop
    for two or three: a fused expression's run costs its NumPy calls)."""
    if len(steps) == 1:
        return steps[0]
    if len(steps) == 2:
        first, second = steps

        def two() -> None:
            first()
            second()

        return two
    if len(steps) == 3:
        s1, s2, s3 = steps

        def three() -> None:
            s1()
            s2()
            s3()

        return three
    kept = tuple(steps)

    def run() -> None:
        for step in kept:
            step()

    return run


def _op_step(
    op: ops.ElementwiseOp, t: Type, args: list[np.ndarray], buf: np.ndarray
) -> Callable[[], None]:
    ref = op.ref
    if t.numpy == np.float16:  # half: computed in float32, rounded once into buf
        halves = [i for i, a in enumerate(args) if a.dtype == np.float16]

        def run_half() -> None:
            vals = list(args)
            for i in halves:
                vals[i] = vals[i].astype(numerics.HALF_COMPUTE)
            np.copyto(buf, ref(*vals), casting="unsafe")

        return run_half
    out_ref = op.out_ref(t) if buf.dtype == op.result_type(t).numpy else None
    if out_ref is not None:
        return partial(out_ref, *args, out=buf)  # type: ignore[return-value]  # result unused
    return lambda: np.copyto(buf, ref(*args), casting="unsafe")


def flops_per_element(t: Typed) -> int:
    """Floating-point operations per element (ops on float or half operands)."""
    return sum(
        n.op.flops
        for n in t.nodes()
        if n.op is not None and n.in_type is not None and n.in_type.is_float
    )
