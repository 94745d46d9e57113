"""Element-wise ops: one table of op records (:data:`TABLE`: the PopXL function, the IR
op type, arity, result type and NumPy reference) and :func:`apply`, which the public
functions of ``unary.py`` and ``binary.py`` call (each a real function with its own
signature and docstring; ``tests/popxl/test_popxl_surface.py`` checks that every record
with a public name has its function, and its in-place ``_`` form where it has one).

Adding an element-wise op: a row here, its function(s) in ``unary.py`` or ``binary.py``, a
lowering in ``tremula/lowering/elementwise.py`` and a gradient rule in
``transforms/grads/elementwise.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula.errors import OpSetupError, OpSetupTypeError
from tremula.popxl import dtypes
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.tensor import Tensor, TensorSpec


def broadcast_shape(shapes: Sequence[tuple[int, ...]], what: str) -> tuple[int, ...]:
    """The NumPy broadcast of ``shapes``.

    Raises:
        OpSetupError: (``popart.popart_exception`` and ``ValueError``) shapes that do not
            broadcast, in PopART's words.
    """
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        frames = " and ".join(str(list(s)) for s in shapes)
        raise OpSetupError(
            f"np broadcasting failed on 'Op {what}', frames {frames} are not aligned "
            f"(shapes {list(shapes)} do not broadcast)"
        ) from None


@dataclass(frozen=True)
class Elementwise:
    """One element-wise op: ``name`` (the PopXL function), ``op`` (the IR type), arity,
    whether the result is bool, its NumPy reference, whether it has an in-place ``_`` form
    and whether ``name`` is a public function of ``popxl.ops``."""

    name: str
    op: str
    arity: int
    reference: Callable[..., Any]
    boolean: bool = False
    inplace: bool = True
    public: bool = True

    def infer(self, specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
        if len({s.dtype for s in specs}) > 1:
            kinds = " and ".join(s.dtype._popart for s in specs)
            shapes = " and ".join(str(list(s.shape)) for s in specs)
            raise OpSetupTypeError(
                f"np broadcasting failed on Op {self.op}, incompatible types {kinds} (shapes "
                f"{shapes}): the inputs of {self.name} must have one dtype"
            )
        shape = broadcast_shape([s.shape for s in specs], self.op)
        dt = dtypes.bool if self.boolean else specs[0].dtype
        return [TensorSpec(shape, dt)]


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # the reference only: tests have SciPy

    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.fmod(a, b)


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # the reference only: tests have SciPy

    return erf(x)


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
    Elementwise("atan2", "Atan2", 2, np.arctan2, inplace=False),
    Elementwise("maximum2", "Max", 2, np.maximum),  # ops.maximum(*ts) builds Max ops too
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
    Elementwise("tan", "Tan", 1, np.tan, inplace=False),
    Elementwise("asin", "Asin", 1, np.arcsin, inplace=False),
    Elementwise("erf", "Erf", 1, _erf, inplace=False),
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
                raise OpSetupError(
                    f"np broadcasting failed on 'Op {e.op}Inplace': the result shape "
                    f"{list(out.shape)} must equal the shape {list(specs[0].shape)} of the "
                    f"tensor {e.name}_ updates in place"
                )
            return [out]

        defop(e.op + "Inplace", infer_inplace, reference, modifies=(0,))


for _e in TABLE:
    _register(_e)


def coerce(args: Sequence[Any], what: str) -> list[Tensor]:
    """Non-tensor operands become constants of the first tensor operand's dtype.

    Raises:
        TypeError: no operand is a Tensor.
    """
    from tremula.popxl.tensor import constant

    first = next((a for a in args if isinstance(a, Tensor)), None)
    if first is None:
        raise TypeError(f"ops.{what}: at least one operand must be a Tensor")
    return [a if isinstance(a, Tensor) else constant(a, first.dtype) for a in args]


def apply(op_type: str, *args: Any) -> Tensor:
    """Add the element-wise op ``op_type`` (a type of :data:`TABLE`, ``Inplace`` for the
    in-place form) on ``args`` (host values become constants) and return its output."""
    e = BY_OP[op_type]
    (out,) = create_op(op_type, coerce(args, e.name))
    return out
