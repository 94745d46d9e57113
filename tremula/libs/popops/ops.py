"""The element-wise op table: ONE record per op.

A record (:class:`ElementwiseOp`) gives the op's PopLibs enum member, its function name
(``add`` ...), its NumPy reference implementation, its result-type rule, the types it accepts and
its cost per type family. Everything else is derived from the table: the ``popops.add`` ...
functions and their in-place forms, the type checks of expressions, the codelets' compute (which
dispatches on the op through the table) and their cycle estimates.

Semantics
---------
* The operands of an op share one type (``SELECT``'s condition is bool); the result has
  that type, or bool for comparisons, ``IS_FINITE`` / ``IS_INF`` / ``IS_NAN``.
* **half** arithmetic is computed in float32 and each op's result is rounded to half
  (round to nearest even), as the IPU's mixed-precision units do; a fused expression rounds
  after every op, so fusing never changes a result.
* **Integers follow C**: ``DIVIDE`` truncates toward zero, ``REMAINDER`` has the sign of
  the dividend, overflow wraps (two's complement). Where C is undefined Tremula defines:
  integer division or remainder by zero gives 0; shift amounts are taken modulo the bit
  width; ``SHIFT_RIGHT`` is logical (zeros in) and ``SHIFT_RIGHT_SIGN_EXTEND`` arithmetic;
  ``SQRT`` of an integer is the truncated root (negative gives 0).
* ``ROUND`` rounds halves away from zero (C ``round``); ``NEARBY_INT`` to even.
* ``CLAMP(x, lo, hi)`` is ``x < lo ? lo : (x > hi ? hi : x)`` (PopLibs' order: ``lo`` wins
  when ``lo > hi``); ``SELECT(a, b, c)`` is ``c ? a : b``.
* Floating-point exceptions are not raised: 1/0 is inf, log(-1) NaN, as on the IPU.

Costs
-----
``costs`` maps a type family (``float``, ``half``, ``int`` for every integer type, ``bool``)
to a :class:`Cost`: PopLibs' perf tables (``popopsCycleEstimators.cpp``) give
``cyclesPerLoop`` either per natural 64-bit vector (:func:`N`; the codelet adds its loop
overhead) or per ``elements`` elements (:func:`E`; no overhead). The families listed are the
types the op accepts. Values not in PopLibs' tables are marked ``# [proposal]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tremula import numerics as nx
from tremula.libs.popops import elementwise_math as m
from tremula.libs.popops.expr import BinaryOpType, OpType, TernaryOpType, UnaryOpType
from tremula.poplar.types import BOOL, HALF, Type


def family(t: Type) -> str:
    """The cost family of a type: ``half``, ``float``, ``int`` or ``bool``."""
    if t is HALF:
        return "half"
    kind = t.numpy.kind
    return {"f": "float", "b": "bool"}.get(kind, "int")


@dataclass(frozen=True)
class Cost:
    """``cycles`` per loop iteration over one natural vector (``elements == 0``, PopLibs'
    ``naturalVectorWidth``: the codelet adds its loop overhead) or over ``elements``
    elements (no overhead)."""

    cycles: float
    elements: int = 0

    def loop_cycles(self, n: np.ndarray, vector_width: int, overhead: float) -> np.ndarray:
        """Inner-loop cycles over ``n`` elements."""
        n = np.asarray(n, dtype=np.int64)
        if self.elements == 0:
            return -(-n // vector_width) * (self.cycles + overhead)
        return -(-n // self.elements) * self.cycles

    def per_element(self, vector_width: int) -> float:
        return self.cycles / (self.elements or vector_width)


def N(cycles: float) -> Cost:
    """``cycles`` per natural 64-bit vector."""
    return Cost(cycles)


def E(cycles: float, elements: int = 1) -> Cost:
    """``cycles`` per ``elements`` elements."""
    return Cost(cycles, elements)


@dataclass(frozen=True)
class ElementwiseOp:
    """One element-wise op: see the module docstring."""

    op: OpType
    name: str
    ref: Callable[..., np.ndarray]
    costs: Mapping[str, Cost]
    result: str = "same"  # "same": the operand type; "bool"
    aliases: tuple[str, ...] = ()
    fast: bool = False  # ADD / SUB / MUL: assembly codelet, loop overhead 2 on float/half
    cond: int | None = None  # position of a bool condition operand
    flops: int = 1  # floating-point operations per element (float and half only)
    in_place: bool = field(default=True)  # a popops.<name>_in_place function exists
    writes_out: bool = False  # ``ref`` takes ``out=`` (as ufuncs do), elementwise-safe
    #: the ufunc ``ref`` calls for float operands (``DIVIDE``: IEEE division), which can
    #: write into ``out`` where ``ref`` itself (integer rules too) cannot
    float_ufunc: np.ufunc | None = None

    def __post_init__(self) -> None:
        if self.result not in ("same", "bool"):
            raise ValueError(f"op {self.name}: result rule {self.result!r} is not same / bool")

    @property
    def arity(self) -> int:
        return {UnaryOpType: 1, BinaryOpType: 2, TernaryOpType: 3}[type(self.op)]

    @property
    def takes_out(self) -> bool:
        """Whether ``ref`` can write its result into an ``out`` array that may alias an
        operand (ufuncs, and refs marked ``writes_out``)."""
        return self.writes_out or isinstance(self.ref, np.ufunc)

    def out_ref(self, t: Type) -> Callable[..., np.ndarray] | None:
        """What computes the op on operands of type ``t`` into an ``out=`` array (which may
        alias an operand): ``ref`` where it takes ``out``, the float ufunc it calls for a
        float type, else None."""
        if self.takes_out:
            return self.ref
        return self.float_ufunc if t.numpy.kind == "f" else None

    def supports(self, t: Type) -> bool:
        return family(t) in self.costs

    def result_type(self, t: Type) -> Type:
        return BOOL if self.result == "bool" else t

    def cost(self, t: Type) -> Cost:
        return self.costs[family(t)]


U, B, T = UnaryOpType, BinaryOpType, TernaryOpType


def _fh(f: Cost, h: Cost, **more: Cost) -> dict[str, Cost]:
    return {"float": f, "half": h, **more}


def _cmp(
    op: BinaryOpType, name: str, ref: np.ufunc, aliases: tuple[str, ...] = ()
) -> ElementwiseOp:
    costs = {"float": N(2), "half": N(2), "int": E(3), "bool": E(3)}  # [proposal]
    return ElementwiseOp(op, name, ref, costs, "bool", aliases, in_place=False)


def _xnor(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.invert(np.bitwise_xor(a, b))


def _relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0), out=out)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


def _sqrt(x: np.ndarray) -> np.ndarray:
    return np.sqrt(x) if x.dtype.kind == "f" else nx.int_sqrt(x)


def _var_to_isd(v: np.ndarray, eps: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(v + eps)


def _isd_to_var(s: np.ndarray, eps: np.ndarray) -> np.ndarray:
    return 1 / (s * s) - eps


def _select(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.where(c, a, b)


def _clamp(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.where(x < lo, lo, np.where(x > hi, hi, x))


_INTS = {"int": E(2)}  # [proposal] integer bit operations: 2 cycles per element
_BITS = {"int": N(1), "bool": E(2)}  # [proposal] 64-bit logic ops on integers
_STD = _fh(N(10), N(20))  # [proposal] variance <-> inverse standard deviation
_SELECT = {"float": N(2), "half": N(2), "int": E(2), "bool": E(2)}  # [proposal]

ELEMENTWISE_OPS: tuple[ElementwiseOp, ...] = (
    # ---- arithmetic (ADD/SUB/MUL: 1 per vector; int: 7 per element) ----
    ElementwiseOp(B.ADD, "add", np.add, _fh(N(1), N(1), int=E(7)), fast=True),
    ElementwiseOp(B.SUBTRACT, "sub", np.subtract, _fh(N(1), N(1), int=E(7)), fast=True),
    ElementwiseOp(B.MULTIPLY, "mul", np.multiply, _fh(N(1), N(1), int=E(7)), fast=True),
    ElementwiseOp(
        B.DIVIDE, "div", nx.divide, _fh(N(16), N(16), int=E(40)), float_ufunc=np.divide
    ),  # [proposal]
    ElementwiseOp(B.POWER, "pow", np.power, _fh(E(100), E(100)), flops=10),  # [proposal]
    ElementwiseOp(B.REMAINDER, "rem", nx.remainder, _fh(E(18), E(18), int=E(40))),  # [proposal]
    ElementwiseOp(B.MINIMUM, "min", np.minimum, _fh(N(1), N(1), int=E(2))),  # [proposal]
    ElementwiseOp(B.MAXIMUM, "max", np.maximum, _fh(N(1), N(1), int=E(2))),  # [proposal]
    ElementwiseOp(B.ATAN2, "atan2", np.arctan2, _fh(N(272), N(578)), flops=20),
    ElementwiseOp(B.VARIANCE_TO_INV_STD_DEV, "variance_to_inv_std_dev", _var_to_isd, _STD),
    ElementwiseOp(B.INV_STD_DEV_TO_VARIANCE, "inv_std_dev_to_variance", _isd_to_var, _STD),
    ElementwiseOp(U.NEGATE, "neg", np.negative, _fh(N(1), N(1), int=E(2))),  # [proposal]
    ElementwiseOp(U.ABSOLUTE, "abs", np.abs, _fh(N(1), N(1), int=E(2))),
    ElementwiseOp(U.SQUARE, "square", np.square, _fh(N(1), N(1), int=E(7))),  # [proposal]
    ElementwiseOp(U.INVERSE, "inv", np.reciprocal, _fh(N(8), N(8))),  # [proposal]
    ElementwiseOp(
        U.SIGNUM,
        "signum",
        nx.sign,
        _fh(N(2), N(2), int=E(3)),
        aliases=("sign",),
        writes_out=True,
    ),  # [proposal]
    # ---- roots, exponentials, logarithms (PopLibs' perf tables where listed) ----
    ElementwiseOp(U.SQRT, "sqrt", _sqrt, _fh(N(10), N(23), int=E(110))),
    ElementwiseOp(U.RSQRT, "rsqrt", _rsqrt, _fh(N(8), N(19))),
    ElementwiseOp(U.CBRT, "cbrt", np.cbrt, _fh(E(60), E(60))),  # [proposal]
    ElementwiseOp(U.EXPONENT, "exp", np.exp, _fh(N(6), N(4))),
    ElementwiseOp(U.EXPONENT2, "exp2", np.exp2, _fh(N(6), N(4))),  # [proposal] as EXPONENT
    ElementwiseOp(U.EXPONENT_MINUS_ONE, "expm1", np.expm1, _fh(N(8), N(6))),  # [proposal]
    ElementwiseOp(U.LOGARITHM, "log", np.log, _fh(N(12), N(4))),
    ElementwiseOp(U.LOGARITHM2, "log2", np.log2, _fh(N(12), N(4))),  # [proposal] as LOGARITHM
    ElementwiseOp(U.LOGARITHM_ONE_PLUS, "log1p", np.log1p, _fh(N(14), N(6))),  # [proposal]
    # ---- trigonometric and activations ----
    ElementwiseOp(U.SIN, "sin", np.sin, _fh(E(2300), E(25))),
    ElementwiseOp(U.COS, "cos", np.cos, _fh(E(2300), E(25))),
    ElementwiseOp(U.TAN, "tan", np.tan, _fh(E(5100), E(5700))),
    ElementwiseOp(U.ASIN, "asin", np.arcsin, _fh(E(150), E(150))),  # [proposal]
    ElementwiseOp(U.TANH, "tanh", np.tanh, _fh(N(12), N(4))),
    ElementwiseOp(U.SIGMOID, "sigmoid", m.sigmoid, _fh(N(12), N(6)), writes_out=True),
    ElementwiseOp(
        U.RELU, "relu", _relu, _fh(N(3), N(3), int=E(2)), writes_out=True
    ),  # int: [proposal]
    ElementwiseOp(U.GELU, "gelu", m.gelu_tanh, _fh(N(24), N(10)), flops=8),  # [proposal]
    ElementwiseOp(U.GELU_ERF, "gelu_erf", m.gelu_erf, _fh(N(40), N(16)), flops=10),  # [proposal]
    ElementwiseOp(U.ERF, "erf", m.erf, _fh(N(30), N(12)), flops=8),  # [proposal]
    # ---- rounding (CEIL/FLOOR: 2 per vector) ----
    ElementwiseOp(U.CEIL, "ceil", np.ceil, _fh(N(2), N(2))),
    ElementwiseOp(U.FLOOR, "floor", np.floor, _fh(N(2), N(2))),
    ElementwiseOp(U.ROUND, "round", nx.round_half_away, _fh(N(2), N(2))),  # [proposal]
    ElementwiseOp(U.TRUNC, "trunc", np.trunc, _fh(N(2), N(2))),  # [proposal]
    ElementwiseOp(U.NEARBY_INT, "nearby_int", nx.round_half_even, _fh(N(2), N(2))),  # [proposal]
    # ---- classification, comparison and logic [proposal] ----
    ElementwiseOp(U.IS_FINITE, "is_finite", np.isfinite, _fh(N(2), N(2)), "bool", in_place=False),
    ElementwiseOp(U.IS_INF, "is_inf", np.isinf, _fh(N(2), N(2)), "bool", in_place=False),
    ElementwiseOp(U.IS_NAN, "is_nan", np.isnan, _fh(N(2), N(2)), "bool", in_place=False),
    _cmp(B.EQUAL, "eq", np.equal),
    _cmp(B.NOT_EQUAL, "neq", np.not_equal, ("ne",)),
    _cmp(B.LESS_THAN, "lt", np.less),
    _cmp(B.LESS_THAN_EQUAL, "lteq", np.less_equal, ("le",)),
    _cmp(B.GREATER_THAN, "gt", np.greater),
    _cmp(B.GREATER_THAN_EQUAL, "gteq", np.greater_equal, ("ge",)),
    ElementwiseOp(B.LOGICAL_AND, "logical_and", np.logical_and, {"bool": E(2)}, "bool"),
    ElementwiseOp(B.LOGICAL_OR, "logical_or", np.logical_or, {"bool": E(2)}, "bool"),
    ElementwiseOp(U.LOGICAL_NOT, "logical_not", np.logical_not, {"bool": E(2)}, "bool"),
    # ---- bitwise (integers; bool as logic) [proposal] ----
    ElementwiseOp(B.BITWISE_AND, "bitwise_and", np.bitwise_and, _BITS),
    ElementwiseOp(B.BITWISE_OR, "bitwise_or", np.bitwise_or, _BITS),
    ElementwiseOp(B.BITWISE_XOR, "bitwise_xor", np.bitwise_xor, _BITS),
    ElementwiseOp(B.BITWISE_XNOR, "bitwise_xnor", _xnor, _BITS),
    ElementwiseOp(U.BITWISE_NOT, "bitwise_not", np.invert, _BITS),
    ElementwiseOp(B.SHIFT_LEFT, "shift_left", m.shift_left, _INTS),
    ElementwiseOp(B.SHIFT_RIGHT, "shift_right", m.shift_right, _INTS),
    ElementwiseOp(
        B.SHIFT_RIGHT_SIGN_EXTEND, "shift_right_sign_extend", m.shift_right_sign_extend, _INTS
    ),
    ElementwiseOp(U.POPCOUNT, "popcount", m.popcount, _INTS),
    ElementwiseOp(U.COUNT_LEADING_ZEROS, "count_leading_zeros", m.count_leading_zeros, _INTS),
    # ---- ternary [proposal]: one compare-and-select per vector ----
    ElementwiseOp(T.SELECT, "select", _select, _SELECT, cond=2, flops=0),
    ElementwiseOp(T.CLAMP, "clamp", _clamp, _fh(N(2), N(2), int=E(4)), flops=2),
)
del U, B, T

#: The table keyed by op enum member and by function name (aliases included).
BY_OP: dict[OpType, ElementwiseOp] = {rec.op: rec for rec in ELEMENTWISE_OPS}
BY_NAME: dict[str, ElementwiseOp] = {
    n: rec for rec in ELEMENTWISE_OPS for n in (rec.name, *rec.aliases)
}


def get(op: OpType | str) -> ElementwiseOp:
    """The record of an op, by enum member, enum name (``"ADD"``) or function name."""
    if isinstance(op, str):
        rec = BY_NAME.get(op)
        if rec is None:
            for kind in (UnaryOpType, BinaryOpType, TernaryOpType):
                if op in kind.__members__:
                    return BY_OP[kind[op]]
            raise KeyError(f"no element-wise op named {op!r}")
        return rec
    return BY_OP[op]


def apply(
    op: ElementwiseOp, t: Type, args: Sequence[np.ndarray], out: np.ndarray | None = None
) -> np.ndarray:
    """Run ``op`` on operands of type ``t`` (arrays or 0-d constants, broadcastable); half
    is computed in float32 and rounded once. With ``out`` (of the result type) the result
    may be written there directly; the returned array holds it either way."""
    with np.errstate(all="ignore"):
        return apply_quietly(op, t, args, out)


def apply_quietly(
    op: ElementwiseOp, t: Type, args: Sequence[np.ndarray], out: np.ndarray | None = None
) -> np.ndarray:
    """:func:`apply` for callers that already silence floating-point warnings (one
    ``np.errstate`` around a whole fused expression, not one per op)."""
    result = op.result_type(t).numpy
    if t is HALF:
        args = [a.astype(nx.HALF_COMPUTE) if a.dtype == np.float16 else a for a in args]
    if out is not None and out.dtype == result:
        ref = op.out_ref(t)
        if ref is not None:
            return ref(*args, out=out)
    r = np.asarray(op.ref(*args))
    return r if r.dtype == result else r.astype(result)


def cast_cost(src: Type, dst: Type) -> Cost:
    """Cycles of converting ``src`` to ``dst`` (PopLibs' Cast: pipelined loops over atoms
    of 2 or 4 elements; 64-bit destinations 4-5 cycles per element)."""
    sizes = {src.size, dst.size}
    if dst.size == 8:
        return E(5)
    if {family(src), family(dst)} == {"float", "half"}:
        return E(2, 4)  # [proposal] f32v4tof16 / f16v4tof32 pipelined
    if sizes == {4}:
        return E(2, 2)  # [proposal] 32-bit int <-> float
    return E(3)  # [proposal] narrow integer or bool conversions: one element at a time
