"""Gradient rules of ``popxl/ops/elementwise.py`` (and their in-place forms)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tremula.popxl import ops
from tremula.popxl.ops.base import OpNode
from tremula.popxl.tensor import Tensor
from tremula.popxl.transforms.grads.base import (
    GradContext,
    GradRule,
    Grads,
    OutputGrads,
    as_float,
    grad,
    not_differentiable,
    pick,
    sum_to,
)

# ---- binary ----


@grad("Add")
def _add(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    a, b = op.inputs
    return pick(need, lambda: sum_to(g[0], a.shape), lambda: sum_to(g[0], b.shape))


@grad("Sum")
def _sum(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    # PopART's SumOp: each input gets the gradient, summed down to its shape
    return [sum_to(g[0], t.shape) if wanted else None for t, wanted in zip(op.inputs, need)]


@grad("Sub")
def _sub(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    a, b = op.inputs
    return pick(need, lambda: sum_to(g[0], a.shape), lambda: sum_to(-g[0], b.shape))


@grad("Mul")
def _mul(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    a, b = op.inputs
    return pick(
        need,
        lambda: sum_to(g[0] * c.fwd(b), a.shape),
        lambda: sum_to(g[0] * c.fwd(a), b.shape),
    )


@grad("Div")
def _div(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    a, b = op.inputs
    return pick(
        need,
        lambda: sum_to(g[0] / c.fwd(b), a.shape),
        lambda: sum_to(-(g[0] * c.fwd(op.outputs[0]) / c.fwd(b)), b.shape),
    )


@grad("Pow")
def _pow(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    a, b = op.inputs
    return pick(
        need,
        lambda: sum_to(g[0] * c.fwd(b) * ops.pow(c.fwd(a), c.fwd(b) - 1.0), a.shape),
        lambda: sum_to(g[0] * c.fwd(op.outputs[0]) * ops.log(c.fwd(a)), b.shape),
    )


@grad("Fmod")
def _fmod(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """The dividend gets the gradient; the divisor none: PopART's FmodOp has only its
    FmodArg0GradOp (torch would give the divisor ``-trunc(a / b) * g``). That op, an
    ElementWiseBinaryArg0GradOp, reads both operands and the output, though its value
    needs none of them: so the grad graph expects them, and ``fmod_`` is refused."""
    a, b = op.inputs

    def grad_a() -> Tensor:
        for t in (a, b, op.outputs[0]):
            c.fwd(t)
        return sum_to(g[0], a.shape)

    return pick(need, grad_a, lambda: None)


@grad("Atan2")
def _atan2(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    # d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)
    y, x = op.inputs
    yv, xv = c.fwd(y), c.fwd(x)
    scaled = g[0] / (xv * xv + yv * yv)
    return pick(need, lambda: sum_to(scaled * xv, y.shape), lambda: sum_to(-(scaled * yv), x.shape))


def _arg_grads(excess: Callable[[Tensor, Tensor], Tensor]) -> GradRule:
    """Max / Min of any number of operands (``ops.maximum(*ts)``'s ONNX ``Max``, the binary
    ``maximum2`` / ``minimum2``), as PopART's MaxArgGradOp / MinArgGradOp compute it: each
    operand ``x`` gets the output gradient times ``sign(excess(x, y)) + 1`` (``y`` the
    result; ``x - y`` for max, ``y - x`` for min), summed down to ``x``'s shape. That is 1
    where ``x`` equals the result and 0 elsewhere, so every tied operand gets the whole
    gradient; where ``x - y`` is NaN (a NaN operand or result, infinities of one sign) the
    sign is 0 and the gradient passes."""

    def rule(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
        def operand(x: Tensor) -> Callable[[], Tensor]:
            def make() -> Tensor:
                mask = ops.sign(excess(c.fwd(x), c.fwd(op.outputs[0]))) + 1.0
                return sum_to(mask * g[0], x.shape)

            return make

        return pick(need, *(operand(x) for x in op.inputs))

    return rule


grad("Max")(_arg_grads(lambda x, y: x - y))
grad("Min")(_arg_grads(lambda x, y: y - x))


# ---- unary: the derivative from the input ("x") or the output ("y") ----

_SQRT_2PI = math.sqrt(2 * math.pi)
_GELU_C = math.sqrt(2 / math.pi)
_GELU_K = 0.044715


def _gelu_d(x: Tensor) -> Tensor:
    x2 = x * x
    t = ops.tanh((x + x2 * x * _GELU_K) * _GELU_C)
    return (t + 1.0) * 0.5 + x * (1.0 - t * t) * ((x2 * (3 * _GELU_K) + 1.0) * (0.5 * _GELU_C))


def _gelu_erf_d(x: Tensor) -> Tensor:
    # Phi(x) + x phi(x), with the normal CDF Phi(x) = geluerf(x) / x (1/2 at x = 0)
    at0 = as_float(ops.equal(x, 0.0), x)
    cdf = ops.geluerf(x) / (x + at0) + at0 * 0.5
    return cdf + x * ops.exp(x * x * -0.5) * (1 / _SQRT_2PI)


def _swish_d(x: Tensor) -> Tensor:
    s = ops.sigmoid(x)
    return s * (x * (1.0 - s) + 1.0)


#: op type -> (which forward value the derivative needs, the derivative from it)
UNARY: dict[str, tuple[str, Callable[[Tensor], Tensor]]] = {
    "Abs": ("x", ops.sign),
    "Sqrt": ("y", lambda y: 0.5 / y),
    "Exp": ("y", lambda y: y),
    "Log": ("x", lambda x: 1.0 / x),
    "Log2": ("x", lambda x: (1 / math.log(2)) / x),
    "Sin": ("x", ops.cos),
    "Cos": ("x", lambda x: -ops.sin(x)),
    "Tan": ("y", lambda y: 1.0 + y * y),
    "Asin": ("x", lambda x: 1.0 / ops.sqrt(1.0 - x * x)),
    "Erf": ("x", lambda x: ops.exp(x * x * -1.0) * (2 / math.sqrt(math.pi))),
    "Tanh": ("y", lambda y: 1.0 - y * y),
    "Sigmoid": ("y", lambda y: y * (1.0 - y)),
    "Relu": ("y", lambda y: as_float(ops.greater(y, 0.0), y)),
    "Gelu": ("x", _gelu_d),
    "GeluErf": ("x", _gelu_erf_d),
    "Swish": ("x", _swish_d),
}


def _unary(source: str, derivative: Callable[[Tensor], Tensor]) -> GradRule:
    def rule(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
        v = c.fwd(op.inputs[0] if source == "x" else op.outputs[0])
        return [g[0] * derivative(v)]

    return rule


for _type, (_source, _derivative) in UNARY.items():
    grad(_type)(_unary(_source, _derivative))


@grad("Neg")
def _neg(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    return [-g[0]]


not_differentiable(
    "Equal", "Greater", "Less", "And", "Or", "Not", "IsNaN", "IsInf", "IsFinite",
    "Ceil", "Floor", "Sign",
)  # fmt: skip
