"""Element-wise expressions (PopLibs' ``popops::expr``).

An expression is an immutable tree: placeholders ``_1``, ``_2`` ... stand for the inputs of
``popops.map``, :class:`Const` for constants, and :class:`UnaryOp`, :class:`BinaryOp`,
:class:`TernaryOp` and :class:`Cast` for operations. Build trees with Python operators
(``_1 + _2 * 3``, ``-_1``, ``abs(_1)``, ``_1 < _2``, ``~_1``, ``_1 & _2``, ``_1 << 2``) or
with PopLibs' named constructors (``Add(_1, _2)``, ``Exp(_1)``, ``Select(_1, _2, _3)``,
``Clamp(_1, lo, hi)``...).

``==`` and ``!=`` are *structural* equality (so expressions can be compared and used as
dictionary keys); equality as an operation is :func:`Equal` / :func:`NotEqual`. Using an
expression as a truth value raises, so that ``if _1 < _2:`` cannot silently be true.

Every expression has a deterministic :attr:`Expr.canonical` string, e.g.
``ADD(_1,MULTIPLY(_2,3))``, used for caching and for the names of generated codelets.
Constants written without a type (``3``, ``2.5``, ``True``) take the type of the operand
they meet (``_1 + 3`` on half data adds a half 3); alone they are int, float or bool.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from tremula.errors import GraphError
from tremula.libs.popops.expr_optypes import BinaryOpType, OpType, TernaryOpType, UnaryOpType
from tremula.poplar.types import Type, as_type


class ExprError(GraphError):
    """An expression is malformed or does not fit its inputs (types, placeholders)."""


Scalar = bool | int | float


class Expr:
    """Base class of expression nodes (immutable; compare structurally)."""

    @property
    def children(self) -> tuple[Expr, ...]:
        return ()

    @cached_property
    def canonical(self) -> str:
        """A deterministic string naming the expression, e.g. ``ADD(_1,3)``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"expr<{self.canonical}>"

    def __str__(self) -> str:
        return self.canonical

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and self.canonical == other.canonical

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.canonical)

    def __bool__(self) -> bool:
        raise ExprError(
            f"the truth value of expression {self.canonical} is undefined: expressions "
            f"describe element-wise operations (use popops.map to evaluate them)"
        )

    # ---- arithmetic ----
    def __add__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.ADD, self, as_expr(o))

    def __radd__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.ADD, as_expr(o), self)

    def __sub__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.SUBTRACT, self, as_expr(o))

    def __rsub__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.SUBTRACT, as_expr(o), self)

    def __mul__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.MULTIPLY, self, as_expr(o))

    def __rmul__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.MULTIPLY, as_expr(o), self)

    def __truediv__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.DIVIDE, self, as_expr(o))

    def __rtruediv__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.DIVIDE, as_expr(o), self)

    def __mod__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.REMAINDER, self, as_expr(o))

    def __rmod__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.REMAINDER, as_expr(o), self)

    def __pow__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.POWER, self, as_expr(o))

    def __rpow__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.POWER, as_expr(o), self)

    def __neg__(self) -> Expr:
        return UnaryOp(UnaryOpType.NEGATE, self)

    def __pos__(self) -> Expr:
        return self

    def __abs__(self) -> Expr:
        return UnaryOp(UnaryOpType.ABSOLUTE, self)

    # ---- bitwise ----
    def __and__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.BITWISE_AND, self, as_expr(o))

    def __rand__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.BITWISE_AND, as_expr(o), self)

    def __or__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.BITWISE_OR, self, as_expr(o))

    def __ror__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.BITWISE_OR, as_expr(o), self)

    def __xor__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.BITWISE_XOR, self, as_expr(o))

    def __rxor__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.BITWISE_XOR, as_expr(o), self)

    def __invert__(self) -> Expr:
        return UnaryOp(UnaryOpType.BITWISE_NOT, self)

    def __lshift__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.SHIFT_LEFT, self, as_expr(o))

    def __rshift__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.SHIFT_RIGHT, self, as_expr(o))

    # ---- ordering comparisons (== / != stay structural: use Equal / NotEqual) ----
    def __lt__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.LESS_THAN, self, as_expr(o))

    def __le__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.LESS_THAN_EQUAL, self, as_expr(o))

    def __gt__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.GREATER_THAN, self, as_expr(o))

    def __ge__(self, o: Any) -> Expr:
        return BinaryOp(BinaryOpType.GREATER_THAN_EQUAL, self, as_expr(o))


def _const_text(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "nan"
    return repr(value)


def _type_text(t: Type) -> str:
    """A type name without spaces or commas (``unsigned int`` -> ``uint32``)."""
    return t.name if " " not in t.name else t.numpy.name


@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    """A constant; without ``dtype`` it takes the type of the operand it meets."""

    value: Scalar
    dtype: Type | None = None

    def __post_init__(self) -> None:
        v = self.value
        if isinstance(v, np.generic):
            v = v.item()
        if not isinstance(v, (bool, int, float)):
            raise ExprError(f"Const: value {self.value!r} is not a bool, int or float")
        object.__setattr__(self, "value", v)
        if self.dtype is not None:
            object.__setattr__(self, "dtype", as_type(self.dtype))

    @cached_property
    def canonical(self) -> str:
        text = _const_text(self.value)
        return text if self.dtype is None else f"{_type_text(self.dtype)}:{text}"


@dataclass(frozen=True, eq=False, repr=False)
class PlaceHolder(Expr):
    """Input ``index`` (1-based) of ``map``: ``_1`` is the first input."""

    index: int

    def __post_init__(self) -> None:
        if not isinstance(self.index, (int, np.integer)) or self.index < 1:
            raise ExprError(f"PlaceHolder: index {self.index!r} must be an integer >= 1")
        object.__setattr__(self, "index", int(self.index))

    @cached_property
    def canonical(self) -> str:
        return f"_{self.index}"


@dataclass(frozen=True, eq=False, repr=False)
class UnaryOp(Expr):
    op: UnaryOpType
    a: Expr

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.a,)

    @cached_property
    def canonical(self) -> str:
        return f"{self.op.name}({self.a.canonical})"


@dataclass(frozen=True, eq=False, repr=False)
class BinaryOp(Expr):
    op: BinaryOpType
    a: Expr
    b: Expr

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)

    @cached_property
    def canonical(self) -> str:
        return f"{self.op.name}({self.a.canonical},{self.b.canonical})"


@dataclass(frozen=True, eq=False, repr=False)
class TernaryOp(Expr):
    op: TernaryOpType
    a: Expr
    b: Expr
    c: Expr

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b, self.c)

    @cached_property
    def canonical(self) -> str:
        return f"{self.op.name}({self.a.canonical},{self.b.canonical},{self.c.canonical})"


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    """Convert ``a`` to ``dtype`` (the rules of ``popops.cast``)."""

    a: Any
    dtype: Type

    def __post_init__(self) -> None:
        object.__setattr__(self, "a", as_expr(self.a))
        object.__setattr__(self, "dtype", as_type(self.dtype))

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.a,)

    @cached_property
    def canonical(self) -> str:
        return f"CAST<{_type_text(self.dtype)}>({self.a.canonical})"


def as_expr(value: Any) -> Expr:
    """``value`` as an expression: an Expr unchanged, a Python or NumPy scalar as a Const."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, np.generic) and np.ndim(value) == 0:
        value = value.item()
    if isinstance(value, (bool, int, float)):
        return Const(value)
    raise ExprError(
        f"cannot use {type(value).__name__} {value!r} in an expression: expected an "
        f"expression, a placeholder (_1, _2 ...) or a number"
    )


def make(op: OpType, *args: Any) -> Expr:
    """The node applying ``op`` to ``args`` (numbers become constants)."""
    exprs = [as_expr(a) for a in args]
    want = {UnaryOpType: 1, BinaryOpType: 2, TernaryOpType: 3}[type(op)]
    if len(exprs) != want:
        raise ExprError(f"{op.name} takes {want} operand(s), got {len(exprs)}")
    if isinstance(op, UnaryOpType):
        return UnaryOp(op, *exprs)
    if isinstance(op, BinaryOpType):
        return BinaryOp(op, *exprs)
    return TernaryOp(op, *exprs)


def placeholders(e: Expr) -> set[int]:
    """The placeholder indices ``e`` uses."""
    if isinstance(e, PlaceHolder):
        return {e.index}
    out: set[int] = set()
    for c in e.children:
        out |= placeholders(c)
    return out


def count_ops(e: Expr) -> int:
    """Operations (unary, binary, ternary and casts) in ``e``."""
    own = 0 if isinstance(e, (Const, PlaceHolder)) else 1
    return own + sum(count_ops(c) for c in e.children)


def substitute(e: Expr, mapping: dict[int, int]) -> Expr:
    """``e`` with placeholder ``_i`` replaced by ``_{mapping[i]}`` (others unchanged)."""
    if isinstance(e, PlaceHolder):
        return PlaceHolder(mapping.get(e.index, e.index))
    if isinstance(e, UnaryOp):
        return UnaryOp(e.op, substitute(e.a, mapping))
    if isinstance(e, BinaryOp):
        return BinaryOp(e.op, substitute(e.a, mapping), substitute(e.b, mapping))
    if isinstance(e, TernaryOp):
        return TernaryOp(
            e.op, substitute(e.a, mapping), substitute(e.b, mapping), substitute(e.c, mapping)
        )
    if isinstance(e, Cast):
        return Cast(substitute(e.a, mapping), e.dtype)
    return e


_1, _2, _3, _4, _5, _6, _7, _8, _9 = (PlaceHolder(i) for i in range(1, 10))


def _u(op: UnaryOpType) -> Callable[[Any], Expr]:
    def ctor(a: Any) -> Expr:
        return make(op, a)

    ctor.__doc__ = f"``{op.name}(a)``"
    return ctor


def _b(op: BinaryOpType) -> Callable[[Any, Any], Expr]:
    def ctor(a: Any, b: Any) -> Expr:
        return make(op, a, b)

    ctor.__doc__ = f"``{op.name}(a, b)``"
    return ctor


def _t(op: TernaryOpType) -> Callable[[Any, Any, Any], Expr]:
    def ctor(a: Any, b: Any, c: Any) -> Expr:
        return make(op, a, b, c)

    ctor.__doc__ = f"``{op.name}(a, b, c)``"
    return ctor


# PopLibs' named constructors (popops/Expr.hpp), plus Relu, Gelu, GeluErf and Div.
Abs = _u(UnaryOpType.ABSOLUTE)
Add = _b(BinaryOpType.ADD)
And = _b(BinaryOpType.LOGICAL_AND)
Asin = _u(UnaryOpType.ASIN)
Atan2 = _b(BinaryOpType.ATAN2)
BitwiseAnd = _b(BinaryOpType.BITWISE_AND)
BitwiseNot = _u(UnaryOpType.BITWISE_NOT)
BitwiseOr = _b(BinaryOpType.BITWISE_OR)
BitwiseXnor = _b(BinaryOpType.BITWISE_XNOR)
BitwiseXor = _b(BinaryOpType.BITWISE_XOR)
Cbrt = _u(UnaryOpType.CBRT)
Ceil = _u(UnaryOpType.CEIL)
Clamp = _t(TernaryOpType.CLAMP)
Clz = _u(UnaryOpType.COUNT_LEADING_ZEROS)
Cos = _u(UnaryOpType.COS)
Divide = _b(BinaryOpType.DIVIDE)
Equal = _b(BinaryOpType.EQUAL)
Erf = _u(UnaryOpType.ERF)
Exp = _u(UnaryOpType.EXPONENT)
Exp2 = _u(UnaryOpType.EXPONENT2)
Expm1 = _u(UnaryOpType.EXPONENT_MINUS_ONE)
Floor = _u(UnaryOpType.FLOOR)
Gelu = _u(UnaryOpType.GELU)
GeluErf = _u(UnaryOpType.GELU_ERF)
Gt = _b(BinaryOpType.GREATER_THAN)
Gte = _b(BinaryOpType.GREATER_THAN_EQUAL)
Inv = _u(UnaryOpType.INVERSE)
InvStdDevToVariance = _b(BinaryOpType.INV_STD_DEV_TO_VARIANCE)
IsFinite = _u(UnaryOpType.IS_FINITE)
IsInf = _u(UnaryOpType.IS_INF)
IsNaN = _u(UnaryOpType.IS_NAN)
Log = _u(UnaryOpType.LOGARITHM)
Log1p = _u(UnaryOpType.LOGARITHM_ONE_PLUS)
Log2 = _u(UnaryOpType.LOGARITHM2)
Lt = _b(BinaryOpType.LESS_THAN)
Lte = _b(BinaryOpType.LESS_THAN_EQUAL)
Max = _b(BinaryOpType.MAXIMUM)
Min = _b(BinaryOpType.MINIMUM)
Mul = _b(BinaryOpType.MULTIPLY)
NearbyInt = _u(UnaryOpType.NEARBY_INT)
Neg = _u(UnaryOpType.NEGATE)
Not = _u(UnaryOpType.LOGICAL_NOT)
NotEqual = _b(BinaryOpType.NOT_EQUAL)
Or = _b(BinaryOpType.LOGICAL_OR)
Popcount = _u(UnaryOpType.POPCOUNT)
Pow = _b(BinaryOpType.POWER)
Relu = _u(UnaryOpType.RELU)
Rem = _b(BinaryOpType.REMAINDER)
Round = _u(UnaryOpType.ROUND)
Rsqrt = _u(UnaryOpType.RSQRT)
Select = _t(TernaryOpType.SELECT)
Shl = _b(BinaryOpType.SHIFT_LEFT)
Shr = _b(BinaryOpType.SHIFT_RIGHT)
ShrSE = _b(BinaryOpType.SHIFT_RIGHT_SIGN_EXTEND)
Sigmoid = _u(UnaryOpType.SIGMOID)
Signum = _u(UnaryOpType.SIGNUM)
Sin = _u(UnaryOpType.SIN)
Sqrt = _u(UnaryOpType.SQRT)
Square = _u(UnaryOpType.SQUARE)
Sub = _b(BinaryOpType.SUBTRACT)
Tan = _u(UnaryOpType.TAN)
Tanh = _u(UnaryOpType.TANH)
Trunc = _u(UnaryOpType.TRUNC)
VarianceToInvStdDev = _b(BinaryOpType.VARIANCE_TO_INV_STD_DEV)
Div = Divide
