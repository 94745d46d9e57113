"""Element-wise binary ops (``popxl.ops.add`` ...): real functions over the records of
``elementwise.py``. Operands broadcast as in NumPy and must have one dtype; a host value
(a number or an array) becomes a constant of the other operand's dtype. The in-place
``_`` forms write the result into the first operand and return it (its shape must be the
result's).

Raises (every function):
    TypeError: no operand is a Tensor; ``popart.popart_exception`` (also a
        ``TypeError``) for operands of different dtypes.
    ValueError: ``popart.popart_exception`` (also a ``ValueError``) for shapes that do not
        broadcast, or an operand of another graph.
"""

from __future__ import annotations

from tremula.popxl.ops.elementwise import apply, document
from tremula.popxl.tensor import Tensor, TensorLike


def add(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """Adds two tensors element-wise.

    Args:
        lhs: A tensor.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype).

    Returns:
        ``lhs + rhs``, of the broadcast shape.
    """
    return apply("Add", lhs, rhs)


def add_(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """In-place :func:`add`: ``lhs`` is set to ``lhs + rhs`` and returned."""
    return apply("AddInplace", lhs, rhs)


def sub(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """Subtracts ``rhs`` from ``lhs`` element-wise.

    Args:
        lhs: A tensor.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype).

    Returns:
        ``lhs - rhs``, of the broadcast shape.
    """
    return apply("Sub", lhs, rhs)


def sub_(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """In-place :func:`sub`: ``lhs`` is set to ``lhs - rhs`` and returned."""
    return apply("SubInplace", lhs, rhs)


def mul(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """Multiplies two tensors element-wise.

    Args:
        lhs: A tensor.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype).

    Returns:
        ``lhs * rhs``, of the broadcast shape.
    """
    return apply("Mul", lhs, rhs)


def mul_(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """In-place :func:`mul`: ``lhs`` is set to ``lhs * rhs`` and returned."""
    return apply("MulInplace", lhs, rhs)


def div(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """Divides ``lhs`` by ``rhs`` element-wise.

    Floats divide as IEEE 754 does, silently (``1 / 0`` is ``inf``, ``0 / 0`` NaN).
    Integers divide as C does, truncating toward zero (``-7 / 2 == -3``), and the cases C
    leaves undefined give what the device gives (popops' integer ``DIVIDE`` codelet,
    ``tremula.numerics.int_divide``):

    * division by zero gives 0, with no error (the IPU has no integer divide instruction
      and the codelet does not trap); the engine option
      ``{"debug.checkIntegerDivision": "true"}`` (for example in
      ``POPLAR_ENGINE_OPTIONS``) raises instead, naming the op;
    * ``INT_MIN / -1`` overflows and wraps to ``INT_MIN``
      (``-2147483648 / -1 == -2147483648`` in int32).

    Args:
        lhs: A tensor.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype).

    Returns:
        ``lhs / rhs``, of the broadcast shape.
    """
    return apply("Div", lhs, rhs)


def div_(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """In-place :func:`div`: ``lhs`` is set to ``lhs / rhs`` and returned."""
    return apply("DivInplace", lhs, rhs)


def pow(t: Tensor, e: TensorLike) -> Tensor:
    """Raises ``t`` to the power ``e`` element-wise.

    Args:
        t: A tensor.
        e: A tensor, or a host value (made a constant of ``t``'s dtype).

    Returns:
        ``t ** e``, of the broadcast shape.
    """
    return apply("Pow", t, e)


def pow_(t: Tensor, e: TensorLike) -> Tensor:
    """In-place :func:`pow`: ``t`` is set to ``t ** e`` and returned."""
    return apply("PowInplace", t, e)


def fmod(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """The C-style remainder of ``lhs / rhs`` element-wise (the sign of ``lhs``):
    ``lhs - rhs * trunc(lhs / rhs)``.

    Floats: ``fmod(x, 0)`` is NaN, silently. Integers: the cases C leaves undefined give
    what the device gives (popops' integer ``REMAINDER`` codelet,
    ``tremula.numerics.remainder``): a remainder by zero is 0, with no error (the engine
    option ``{"debug.checkIntegerDivision": "true"}`` raises instead, naming the op), and
    ``fmod(INT_MIN, -1)`` is 0.

    Args:
        lhs: A tensor.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype).

    Returns:
        ``fmod(lhs, rhs)``, of the broadcast shape.
    """
    return apply("Fmod", lhs, rhs)


def fmod_(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """In-place :func:`fmod`: ``lhs`` is set to ``fmod(lhs, rhs)`` and returned."""
    return apply("FmodInplace", lhs, rhs)


def equal(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """Compares two tensors for equality element-wise.

    Args:
        lhs: A tensor.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype).

    Returns:
        A bool tensor, ``lhs == rhs``, of the broadcast shape.
    """
    return apply("Equal", lhs, rhs)


def greater(input: Tensor, other: TensorLike) -> Tensor:
    """Compares ``input > other`` element-wise.

    Args:
        input: A tensor.
        other: A tensor, or a host value (made a constant of ``input``'s dtype).

    Returns:
        A bool tensor, ``input > other``, of the broadcast shape.
    """
    return apply("Greater", input, other)


def less(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """Compares ``lhs < rhs`` element-wise (a Tremula extension).

    Args:
        lhs: A tensor.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype).

    Returns:
        A bool tensor, ``lhs < rhs``, of the broadcast shape.
    """
    return apply("Less", lhs, rhs)


def logical_and(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """Computes the logical AND of two tensors element-wise (operands that are not bool are
    cast to bool first, as PopXL's ``cast_if_needed``).

    Args:
        lhs: A tensor.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype).

    Returns:
        A bool tensor, ``lhs and rhs``, of the broadcast shape.
    """
    return apply("And", lhs, rhs)


def logical_or(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """Computes the logical OR of two tensors element-wise (operands that are not bool are
    cast to bool first, as PopXL's ``cast_if_needed``).

    Args:
        lhs: A tensor.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype).

    Returns:
        A bool tensor, ``lhs or rhs``, of the broadcast shape.
    """
    return apply("Or", lhs, rhs)


def atan2(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """The angle of the point ``(rhs, lhs)`` element-wise, as ``numpy.arctan2(lhs, rhs)``
    (a Tremula extension: popops' ``ATAN2``, which PopART's ``Atan2`` and ``Atan`` use).

    Args:
        lhs: A float tensor, the y coordinates.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype): the x
            coordinates.

    Returns:
        The angles in ``[-pi, pi]``, of the broadcast shape.
    """
    return apply("Atan2", lhs, rhs)


def maximum2(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """The larger of two tensors element-wise (a Tremula extension; PopXL's
    ``ops.maximum(*ts)`` takes any number of tensors).

    Args:
        lhs: A tensor.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype).

    Returns:
        ``max(lhs, rhs)``, of the broadcast shape.
    """
    return apply("Max", lhs, rhs)


def maximum2_(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """In-place :func:`maximum2`: ``lhs`` is set to ``max(lhs, rhs)`` and returned."""
    return apply("MaxInplace", lhs, rhs)


def minimum2(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """The smaller of two tensors element-wise (a Tremula extension).

    Args:
        lhs: A tensor.
        rhs: A tensor, or a host value (made a constant of ``lhs``'s dtype).

    Returns:
        ``min(lhs, rhs)``, of the broadcast shape.
    """
    return apply("Min", lhs, rhs)


def minimum2_(lhs: Tensor, rhs: TensorLike) -> Tensor:
    """In-place :func:`minimum2`: ``lhs`` is set to ``min(lhs, rhs)`` and returned."""
    return apply("MinInplace", lhs, rhs)


__all__ = [
    "add",
    "add_",
    "atan2",
    "div",
    "div_",
    "equal",
    "fmod",
    "fmod_",
    "greater",
    "less",
    "logical_and",
    "logical_or",
    "maximum2",
    "maximum2_",
    "minimum2",
    "minimum2_",
    "mul",
    "mul_",
    "pow",
    "pow_",
    "sub",
    "sub_",
]


document(globals())
