"""Element-wise unary ops (``popxl.ops.exp`` ...): real functions over the records of
``elementwise.py``. Each result has ``t``'s shape, and its dtype (bool for the
predicates); the in-place ``_`` forms write the result into ``t`` and return it.

Raises (every function):
    TypeError: ``t`` is not a Tensor.
    ValueError: ``t`` is a tensor of another graph.
"""

from __future__ import annotations

from tremula.popxl.ops.elementwise import apply, document
from tremula.popxl.tensor import Tensor


def logical_not(t: Tensor) -> Tensor:
    """Computes the logical NOT of a tensor element-wise (a tensor that is not bool is cast
    to bool first, as PopXL's ``cast_if_needed``).

    Args:
        t: The input tensor.

    Returns:
        A bool tensor, ``not t``.
    """
    return apply("Not", t)


def negate(t: Tensor) -> Tensor:
    """Negates a tensor element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``-t``.
    """
    return apply("Neg", t)


def negate_(t: Tensor) -> Tensor:
    """In-place :func:`negate`: ``t`` is set to ``-t`` and returned."""
    return apply("NegInplace", t)


def abs(t: Tensor) -> Tensor:
    """Computes the absolute value element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``|t|``.
    """
    return apply("Abs", t)


def abs_(t: Tensor) -> Tensor:
    """In-place :func:`abs`: ``t`` is set to ``|t|`` and returned."""
    return apply("AbsInplace", t)


def sqrt(t: Tensor) -> Tensor:
    """Computes the square root element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``sqrt(t)``.
    """
    return apply("Sqrt", t)


def sqrt_(t: Tensor) -> Tensor:
    """In-place :func:`sqrt`: ``t`` is set to ``sqrt(t)`` and returned."""
    return apply("SqrtInplace", t)


def exp(t: Tensor) -> Tensor:
    """Computes the exponential element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``e ** t``.
    """
    return apply("Exp", t)


def exp_(t: Tensor) -> Tensor:
    """In-place :func:`exp`: ``t`` is set to ``e ** t`` and returned."""
    return apply("ExpInplace", t)


def log(t: Tensor) -> Tensor:
    """Computes the natural logarithm element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``ln(t)``.
    """
    return apply("Log", t)


def log_(t: Tensor) -> Tensor:
    """In-place :func:`log`: ``t`` is set to ``ln(t)`` and returned."""
    return apply("LogInplace", t)


def log2(t: Tensor) -> Tensor:
    """Computes the base-2 logarithm element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``log2(t)``.
    """
    return apply("Log2", t)


def log2_(t: Tensor) -> Tensor:
    """In-place :func:`log2`: ``t`` is set to ``log2(t)`` and returned."""
    return apply("Log2Inplace", t)


def sin(t: Tensor) -> Tensor:
    """Computes the sine element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``sin(t)``.
    """
    return apply("Sin", t)


def sin_(t: Tensor) -> Tensor:
    """In-place :func:`sin`: ``t`` is set to ``sin(t)`` and returned."""
    return apply("SinInplace", t)


def cos(t: Tensor) -> Tensor:
    """Computes the cosine element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``cos(t)``.
    """
    return apply("Cos", t)


def cos_(t: Tensor) -> Tensor:
    """In-place :func:`cos`: ``t`` is set to ``cos(t)`` and returned."""
    return apply("CosInplace", t)


def tanh(t: Tensor) -> Tensor:
    """Computes the hyperbolic tangent element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``tanh(t)``.
    """
    return apply("Tanh", t)


def tanh_(t: Tensor) -> Tensor:
    """In-place :func:`tanh`: ``t`` is set to ``tanh(t)`` and returned."""
    return apply("TanhInplace", t)


def sigmoid(t: Tensor) -> Tensor:
    """Computes the logistic sigmoid element-wise (a Tremula extension).

    Args:
        t: The input tensor.

    Returns:
        ``1 / (1 + e ** -t)``.
    """
    return apply("Sigmoid", t)


def sigmoid_(t: Tensor) -> Tensor:
    """In-place :func:`sigmoid`: ``t`` is set to ``1 / (1 + e ** -t)`` and returned."""
    return apply("SigmoidInplace", t)


def relu(t: Tensor) -> Tensor:
    """Computes the rectified linear unit element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``max(t, 0)``.
    """
    return apply("Relu", t)


def relu_(t: Tensor) -> Tensor:
    """In-place :func:`relu`: ``t`` is set to ``max(t, 0)`` and returned."""
    return apply("ReluInplace", t)


def gelu(t: Tensor) -> Tensor:
    """Computes the GELU activation element-wise, with the tanh approximation.

    Args:
        t: The input tensor.

    Returns:
        ``0.5 t (1 + tanh(sqrt(2/pi) (t + 0.044715 t**3)))``.
    """
    return apply("Gelu", t)


def gelu_(t: Tensor) -> Tensor:
    """In-place :func:`gelu`: ``t`` is set to its GELU and returned."""
    return apply("GeluInplace", t)


def geluerf(t: Tensor) -> Tensor:
    """Computes the exact GELU activation element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``0.5 t (1 + erf(t / sqrt(2)))``.
    """
    return apply("GeluErf", t)


def geluerf_(t: Tensor) -> Tensor:
    """In-place :func:`geluerf`: ``t`` is set to its exact GELU and returned."""
    return apply("GeluErfInplace", t)


def erf(t: Tensor) -> Tensor:
    """Computes the error function element-wise (a Tremula extension: popops' ``ERF``,
    which PopART's ``Erf`` uses).

    Args:
        t: A float tensor.

    Returns:
        ``erf(t) = 2 / sqrt(pi) * integral from 0 to t of exp(-s**2) ds``.
    """
    return apply("Erf", t)


def tan(t: Tensor) -> Tensor:
    """Computes the tangent element-wise (a Tremula extension: popops' ``TAN``).

    Args:
        t: A float tensor, in radians.

    Returns:
        ``tan(t)``.
    """
    return apply("Tan", t)


def asin(t: Tensor) -> Tensor:
    """Computes the arcsine element-wise (a Tremula extension: popops' ``ASIN``).

    Args:
        t: A float tensor, in ``[-1, 1]`` (NaN outside).

    Returns:
        ``arcsin(t)``, in ``[-pi/2, pi/2]``.
    """
    return apply("Asin", t)


def swish(t: Tensor) -> Tensor:
    """Computes the swish activation element-wise.

    Args:
        t: The input tensor.

    Returns:
        ``t * sigmoid(t)``.
    """
    return apply("Swish", t)


def swish_(t: Tensor) -> Tensor:
    """In-place :func:`swish`: ``t`` is set to ``t * sigmoid(t)`` and returned."""
    return apply("SwishInplace", t)


def ceil(t: Tensor) -> Tensor:
    """Rounds up element-wise (NaN stays NaN).

    Args:
        t: The input tensor.

    Returns:
        ``ceil(t)``.
    """
    return apply("Ceil", t)


def ceil_(t: Tensor) -> Tensor:
    """In-place :func:`ceil`: ``t`` is set to ``ceil(t)`` and returned."""
    return apply("CeilInplace", t)


def floor(t: Tensor) -> Tensor:
    """Rounds down element-wise (NaN stays NaN).

    Args:
        t: The input tensor.

    Returns:
        ``floor(t)``.
    """
    return apply("Floor", t)


def floor_(t: Tensor) -> Tensor:
    """In-place :func:`floor`: ``t`` is set to ``floor(t)`` and returned."""
    return apply("FloorInplace", t)


def sign(t: Tensor) -> Tensor:
    """The sign of each element: -1, 0 or 1 (0 for NaN).

    Args:
        t: The input tensor.

    Returns:
        ``sign(t)``.
    """
    return apply("Sign", t)


def sign_(t: Tensor) -> Tensor:
    """In-place :func:`sign`: ``t`` is set to ``sign(t)`` and returned."""
    return apply("SignInplace", t)


def isnan(t: Tensor) -> Tensor:
    """Tests each element for NaN.

    Args:
        t: The input tensor.

    Returns:
        A bool tensor, True where ``t`` is NaN.
    """
    return apply("IsNaN", t)


def isinf(t: Tensor) -> Tensor:
    """Tests each element for an infinity.

    Args:
        t: The input tensor.

    Returns:
        A bool tensor, True where ``t`` is infinite.
    """
    return apply("IsInf", t)


def isfinite(t: Tensor) -> Tensor:
    """Tests each element for a finite value.

    Args:
        t: The input tensor.

    Returns:
        A bool tensor, True where ``t`` is neither NaN nor infinite.
    """
    return apply("IsFinite", t)


__all__ = [
    "abs",
    "abs_",
    "asin",
    "ceil",
    "ceil_",
    "cos",
    "cos_",
    "erf",
    "exp",
    "exp_",
    "floor",
    "floor_",
    "gelu",
    "gelu_",
    "geluerf",
    "geluerf_",
    "isfinite",
    "isinf",
    "isnan",
    "log",
    "log2",
    "log2_",
    "log_",
    "logical_not",
    "negate",
    "negate_",
    "relu",
    "relu_",
    "sigmoid",
    "sigmoid_",
    "sign",
    "sign_",
    "sin",
    "sin_",
    "sqrt",
    "sqrt_",
    "swish",
    "swish_",
    "tan",
    "tanh",
    "tanh_",
]


document(globals())
