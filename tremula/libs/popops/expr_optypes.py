"""PopLibs' element-wise operation types (``popops::expr::UnaryOpType``, ``BinaryOpType``,
``TernaryOpType``): the vocabulary of :mod:`tremula.libs.popops.expr`, which re-exports them,
and the keys of the op table (:mod:`tremula.libs.popops.ops`).
"""

from __future__ import annotations

import enum


class UnaryOpType(enum.Enum):
    """PopLibs' ``popops::expr::UnaryOpType`` (``GELU`` is a Tremula extension: the tanh
    approximation, popnn's ``NonLinearityType::GELU``)."""

    ABSOLUTE = "ABSOLUTE"
    ASIN = "ASIN"
    BITWISE_NOT = "BITWISE_NOT"
    CBRT = "CBRT"
    CEIL = "CEIL"
    COS = "COS"
    COUNT_LEADING_ZEROS = "COUNT_LEADING_ZEROS"
    ERF = "ERF"
    EXPONENT = "EXPONENT"
    EXPONENT2 = "EXPONENT2"
    EXPONENT_MINUS_ONE = "EXPONENT_MINUS_ONE"
    FLOOR = "FLOOR"
    GELU = "GELU"
    GELU_ERF = "GELU_ERF"
    INVERSE = "INVERSE"
    IS_FINITE = "IS_FINITE"
    IS_INF = "IS_INF"
    IS_NAN = "IS_NAN"
    LOGARITHM = "LOGARITHM"
    LOGARITHM2 = "LOGARITHM2"
    LOGARITHM_ONE_PLUS = "LOGARITHM_ONE_PLUS"
    LOGICAL_NOT = "LOGICAL_NOT"
    NEARBY_INT = "NEARBY_INT"
    NEGATE = "NEGATE"
    POPCOUNT = "POPCOUNT"
    RELU = "RELU"
    ROUND = "ROUND"
    RSQRT = "RSQRT"
    SIGMOID = "SIGMOID"
    SIGNUM = "SIGNUM"
    SIN = "SIN"
    SQRT = "SQRT"
    SQUARE = "SQUARE"
    TAN = "TAN"
    TANH = "TANH"
    TRUNC = "TRUNC"


class BinaryOpType(enum.Enum):
    """PopLibs' ``popops::expr::BinaryOpType``."""

    ADD = "ADD"
    ATAN2 = "ATAN2"
    BITWISE_AND = "BITWISE_AND"
    BITWISE_OR = "BITWISE_OR"
    BITWISE_XOR = "BITWISE_XOR"
    BITWISE_XNOR = "BITWISE_XNOR"
    DIVIDE = "DIVIDE"
    EQUAL = "EQUAL"
    GREATER_THAN = "GREATER_THAN"
    GREATER_THAN_EQUAL = "GREATER_THAN_EQUAL"
    INV_STD_DEV_TO_VARIANCE = "INV_STD_DEV_TO_VARIANCE"
    LESS_THAN = "LESS_THAN"
    LESS_THAN_EQUAL = "LESS_THAN_EQUAL"
    LOGICAL_AND = "LOGICAL_AND"
    LOGICAL_OR = "LOGICAL_OR"
    MAXIMUM = "MAXIMUM"
    MINIMUM = "MINIMUM"
    MULTIPLY = "MULTIPLY"
    NOT_EQUAL = "NOT_EQUAL"
    POWER = "POWER"
    REMAINDER = "REMAINDER"
    SHIFT_LEFT = "SHIFT_LEFT"
    SHIFT_RIGHT = "SHIFT_RIGHT"
    SHIFT_RIGHT_SIGN_EXTEND = "SHIFT_RIGHT_SIGN_EXTEND"
    SUBTRACT = "SUBTRACT"
    VARIANCE_TO_INV_STD_DEV = "VARIANCE_TO_INV_STD_DEV"


class TernaryOpType(enum.Enum):
    """PopLibs' ``popops::expr::TernaryOpType``: ``SELECT(a, b, c)`` is ``c ? a : b``;
    ``CLAMP(x, lo, hi)`` is ``x < lo ? lo : (x > hi ? hi : x)``."""

    CLAMP = "CLAMP"
    SELECT = "SELECT"


OpType = UnaryOpType | BinaryOpType | TernaryOpType
