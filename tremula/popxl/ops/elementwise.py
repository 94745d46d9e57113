"""Element-wise ops, generated from one table: each entry gives the op's name, arity,
result-type rule and NumPy reference; the function and its in-place ``_`` form are made
from the entry (STYLE: families from tables, not a file per op)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula.popxl import dtypes
from tremula.popxl.ops.base import OPS, create_op, defop
from tremula.popxl.tensor import Tensor, TensorSpec


def broadcast_shape(shapes: Sequence[tuple[int, ...]], what: str) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"{what}: shapes {list(shapes)} do not broadcast") from None


@dataclass(frozen=True)
class Elementwise:
    """One element-wise op: ``name`` (the PopXL function), ``op`` (the IR type), arity,
    whether the result is bool, and its NumPy reference."""

    name: str
    op: str
    arity: int
    reference: Callable[..., Any]
    boolean: bool = False
    inplace: bool = True

    def infer(self, specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
        dts = {s.dtype for s in specs}
        if len(dts) > 1:
            names = ", ".join(sorted(d.name for d in dts))
            raise TypeError(f"{self.name}: inputs must have one dtype, got {names}")
        shape = broadcast_shape([s.shape for s in specs], self.name)
        dt = dtypes.bool if self.boolean else specs[0].dtype
        return [TensorSpec(shape, dt)]


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # the reference only: tests have SciPy

    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.fmod(a, b)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(np.asarray(a).dtype, np.integer):
        return np.trunc(a / b).astype(np.asarray(a).dtype)  # C semantics
    return a / b


TABLE: tuple[Elementwise, ...] = (
    Elementwise("add", "Add", 2, np.add),
    Elementwise("sub", "Sub", 2, np.subtract),
    Elementwise("mul", "Mul", 2, np.multiply),
    Elementwise("div", "Div", 2, _div),
    Elementwise("pow", "Pow", 2, np.power),
    Elementwise("fmod", "Fmod", 2, _fmod),
    Elementwise("maximum2", "Max", 2, np.maximum),
    Elementwise("minimum2", "Min", 2, np.minimum),
    Elementwise("equal", "Equal", 2, np.equal, boolean=True, inplace=False),
    Elementwise("greater", "Greater", 2, np.greater, boolean=True, inplace=False),
    Elementwise("less", "Less", 2, np.less, boolean=True, inplace=False),
    Elementwise("logical_and", "And", 2, np.logical_and, boolean=True, inplace=False),
    Elementwise("logical_or", "Or", 2, np.logical_or, boolean=True, inplace=False),
    Elementwise("logical_not", "Not", 1, np.logical_not, boolean=True, inplace=False),
    Elementwise("negate", "Neg", 1, np.negative),
    Elementwise("abs", "Abs", 1, np.abs),
    Elementwise("sqrt", "Sqrt", 1, np.sqrt),
    Elementwise("exp", "Exp", 1, np.exp),
    Elementwise("log", "Log", 1, np.log),
    Elementwise("log2", "Log2", 1, np.log2),
    Elementwise("sin", "Sin", 1, np.sin),
    Elementwise("cos", "Cos", 1, np.cos),
    Elementwise("tanh", "Tanh", 1, np.tanh),
    Elementwise("sigmoid", "Sigmoid", 1, lambda x: 1 / (1 + np.exp(-x))),
    Elementwise("relu", "Relu", 1, lambda x: np.maximum(x, 0)),
    Elementwise("gelu", "Gelu", 1, _gelu),
    Elementwise("geluerf", "GeluErf", 1, _gelu_erf),
    Elementwise("swish", "Swish", 1, lambda x: x / (1 + np.exp(-x))),
    Elementwise("ceil", "Ceil", 1, np.ceil),
    Elementwise("floor", "Floor", 1, np.floor),
    Elementwise("sign", "Sign", 1, lambda x: np.nan_to_num(np.sign(x))),
    Elementwise("isnan", "IsNaN", 1, np.isnan, boolean=True, inplace=False),
    Elementwise("isinf", "IsInf", 1, np.isinf, boolean=True, inplace=False),
    Elementwise("isfinite", "IsFinite", 1, np.isfinite, boolean=True, inplace=False),
)
BY_OP = {e.op: e for e in TABLE}
BY_OP.update({e.op + "Inplace": e for e in TABLE if e.inplace})


def _register(e: Elementwise) -> None:
    def reference(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return [np.asarray(e.reference(*arrays))]

    defop(e.op, e.infer, reference)
    if e.inplace:

        def infer_inplace(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
            out = e.infer(specs, attrs)[0]
            if out.shape != specs[0].shape:
                raise ValueError(
                    f"{e.name}_: the result shape {out.shape} must equal the "
                    f"shape {specs[0].shape} of the tensor updated in place"
                )
            return [out]

        defop(e.op + "Inplace", infer_inplace, reference, modifies=(0,))


def _make(e: Elementwise, inplace: bool) -> Callable[..., Tensor]:
    op_type = e.op + ("Inplace" if inplace else "")

    def fn(*args: Any) -> Tensor:
        if len(args) != e.arity:
            raise TypeError(
                f"ops.{e.name}{'_' if inplace else ''} takes {e.arity} tensor(s), got {len(args)}"
            )
        tensors = _coerce(args, e.name)
        (out,) = create_op(op_type, tensors)
        return out

    fn.__name__ = e.name + ("_" if inplace else "")
    fn.__doc__ = f"Element-wise ``{e.name}`` (NumPy reference: {e.reference!r})" + (
        "; writes the result into the first input." if inplace else "."
    )
    return fn


def _coerce(args: Sequence[Any], what: str) -> list[Tensor]:
    """Non-tensor operands become constants of the first tensor operand's dtype."""
    from tremula.popxl.tensor import constant

    first = next((a for a in args if isinstance(a, Tensor)), None)
    if first is None:
        raise TypeError(f"ops.{what}: at least one operand must be a Tensor")
    return [a if isinstance(a, Tensor) else constant(a, first.dtype) for a in args]


for _e in TABLE:
    if _e.op not in OPS:
        _register(_e)

FUNCTIONS: dict[str, Callable[..., Tensor]] = {}
for _e in TABLE:
    FUNCTIONS[_e.name] = _make(_e, False)
    if _e.inplace:
        FUNCTIONS[_e.name + "_"] = _make(_e, True)

globals().update(FUNCTIONS)
__all__ = sorted(FUNCTIONS)
