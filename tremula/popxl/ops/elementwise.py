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

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from tremula import numerics as nx
from tremula.errors import OpSetupError, OpSetupTypeError
from tremula.libs.popops import ops as popops_ops
from tremula.popxl import dtypes
from tremula.popxl.ops.base import check_in_current_graph, create_op, defop
from tremula.popxl.ops.utils import cast_if_needed, check_tensor_ipu_and_tile_set
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


def dtype_family(dt: dtypes.dtype) -> str | None:
    """The popops type family of a PopXL dtype (``half``, ``float``, ``int``, ``bool``), or
    None for dtypes no element-wise op takes (float8 codes, float64)."""
    if dt is dtypes.float16:
        return "half"
    if dt is dtypes.float32:
        return "float"
    if dt is dtypes.bool:
        return "bool"
    return "int" if dt.is_int else None


#: the PopXL dtypes of each popops type family, in the order the docs list them
FAMILY_DTYPES = {
    "half": ("float16",),
    "float": ("float32",),
    "int": ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"),
    "bool": ("bool",),
}


@dataclass(frozen=True)
class Elementwise:
    """One element-wise op: ``name`` (the PopXL function), ``op`` (the IR type), arity,
    its NumPy reference, ``popops`` (the name of the popops op it runs as: its record in
    ``tremula.libs.popops.ops`` says which dtypes it takes), whether the result is bool,
    whether it has an in-place ``_`` form, whether ``name`` is a public function of
    ``popxl.ops``, ``operands_as``: the dtype (name) operands of another dtype are cast
    to before the op (PopXL's logical ops cast theirs to bool: ``cast_if_needed``), and
    ``variadic``: the op takes one or more inputs, folding ``reference`` over them from the
    left (``((a op b) op c) ...``), and how it lowers: ``"pairwise"``, one binary op per
    further input (PopART's ``MaxOpx``: ONNX's ``Max``, which ``ops.maximum(*ts)`` makes
    with all its tensors), or ``"map"``, one popops map of the whole fold (``SumOpx``:
    the ``Sum`` of autodiff's gradient sums); one input is a copy either way;
    ``stem``: the PopXL function its output is named after, ``<stem>_out`` (default
    ``name``), the in-place form's ``<stem>_inplace_out``, a binary one's
    ``<stem>_lhs_inplace_out`` (PopART's ``AddLhsInplaceOp``)."""

    name: str
    op: str
    arity: int
    reference: Callable[..., Any]
    popops: str
    boolean: bool = False
    inplace: bool = True
    public: bool = True
    operands_as: str | None = None
    variadic: Literal["", "pairwise", "map"] = ""
    stem: str = ""

    @property
    def families(self) -> tuple[str, ...]:
        """The popops type families the op accepts (popops' record: one place)."""
        rec = popops_ops.BY_NAME[self.popops]
        return tuple(f for f in FAMILY_DTYPES if f in rec.costs)

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The names of the PopXL dtypes the op accepts."""
        return tuple(d for f in self.families for d in FAMILY_DTYPES[f])

    def check_dtypes(self, specs: Sequence[TensorSpec]) -> None:
        """Refuse operands of a dtype the op's popops function does not take. The lowering
        calls it: PopART's element-wise ops take any dtype when they are made (their
        ``setup`` copies the input's info) and the Poplar program refuses an unsupported
        one when the session is built, so a program may build ``ops.exp`` of an int32
        tensor that it never runs.

        Raises:
            OpSetupTypeError: (a ``TypeError``) naming the op, the dtype and those taken.
        """
        if specs and dtype_family(specs[0].dtype) not in self.families:
            raise OpSetupTypeError(
                f"Op {self.op} ({self.name}) does not take {specs[0].dtype.name} inputs: it "
                f"takes {', '.join(self.dtypes)}"
            )

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


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # the reference only: tests have SciPy

    return erf(x)


def _sqrt(x: np.ndarray) -> np.ndarray:
    return nx.int_sqrt(x) if x.dtype.kind in "iu" else np.sqrt(x)


TABLE: tuple[Elementwise, ...] = (
    Elementwise("add", "Add", 2, np.add, "add"),
    Elementwise("sub", "Sub", 2, np.subtract, "sub"),
    Elementwise("mul", "Mul", 2, np.multiply, "mul"),
    Elementwise("div", "Div", 2, nx.divide, "div"),
    Elementwise("pow", "Pow", 2, np.power, "pow"),
    Elementwise("fmod", "Fmod", 2, nx.remainder, "rem"),
    Elementwise("atan2", "Atan2", 2, np.arctan2, "atan2", inplace=False),
    # and ops.maximum(*ts)
    Elementwise("maximum2", "Max", 2, np.maximum, "max", variadic="pairwise", stem="maximum"),
    Elementwise("minimum2", "Min", 2, np.minimum, "min", stem="minimum"),
    # PopART's SumOp: autodiff's sum of a tensor's gradient contributions (no PopXL function)
    Elementwise("sum", "Sum", 2, np.add, "add", inplace=False, public=False, variadic="map"),
    Elementwise("equal", "Equal", 2, np.equal, "eq", boolean=True, inplace=False),
    Elementwise("greater", "Greater", 2, np.greater, "gt", boolean=True, inplace=False),
    Elementwise("less", "Less", 2, np.less, "lt", boolean=True, inplace=False),
    Elementwise(
        "logical_and",
        "And",
        2,
        np.logical_and,
        "logical_and",
        boolean=True,
        inplace=False,
        operands_as="bool",
    ),
    Elementwise(
        "logical_or",
        "Or",
        2,
        np.logical_or,
        "logical_or",
        boolean=True,
        inplace=False,
        operands_as="bool",
    ),
    Elementwise(
        "logical_not",
        "Not",
        1,
        np.logical_not,
        "logical_not",
        boolean=True,
        inplace=False,
        operands_as="bool",
    ),
    Elementwise("negate", "Neg", 1, np.negative, "neg"),
    Elementwise("abs", "Abs", 1, np.abs, "abs"),
    Elementwise("sqrt", "Sqrt", 1, _sqrt, "sqrt"),
    Elementwise("exp", "Exp", 1, np.exp, "exp"),
    Elementwise("log", "Log", 1, np.log, "log"),
    Elementwise("log2", "Log2", 1, np.log2, "log2"),
    Elementwise("sin", "Sin", 1, np.sin, "sin"),
    Elementwise("cos", "Cos", 1, np.cos, "cos"),
    Elementwise("tan", "Tan", 1, np.tan, "tan", inplace=False),
    Elementwise("asin", "Asin", 1, np.arcsin, "asin", inplace=False),
    Elementwise("erf", "Erf", 1, _erf, "erf", inplace=False),
    Elementwise("tanh", "Tanh", 1, np.tanh, "tanh"),
    Elementwise("sigmoid", "Sigmoid", 1, lambda x: 1 / (1 + np.exp(-x)), "sigmoid"),
    Elementwise("relu", "Relu", 1, lambda x: np.maximum(x, 0), "relu"),
    Elementwise("gelu", "Gelu", 1, _gelu, "gelu"),
    Elementwise("geluerf", "GeluErf", 1, _gelu_erf, "gelu_erf"),
    Elementwise("swish", "Swish", 1, lambda x: x / (1 + np.exp(-x)), "sigmoid"),
    Elementwise("ceil", "Ceil", 1, np.ceil, "ceil"),
    Elementwise("floor", "Floor", 1, np.floor, "floor"),
    Elementwise("sign", "Sign", 1, nx.sign, "sign"),
    Elementwise("isnan", "IsNaN", 1, np.isnan, "is_nan", boolean=True, inplace=False),
    Elementwise("isinf", "IsInf", 1, np.isinf, "is_inf", boolean=True, inplace=False),
    Elementwise("isfinite", "IsFinite", 1, np.isfinite, "is_finite", boolean=True, inplace=False),
)
BY_OP = {e.op: e for e in TABLE}
BY_OP.update({e.op + "Inplace": e for e in TABLE if e.inplace})


def _register(e: Elementwise) -> None:
    def reference(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        if e.variadic:  # the left fold, half rounded after each op as popops rounds it
            step = functools.partial(nx.in_compute_type, e.reference)
            return [np.asarray(functools.reduce(step, arrays))]
        return [nx.in_compute_type(e.reference, *arrays)]

    stem = e.stem or e.name
    defop(e.op, e.infer, reference, out=f"{stem}_out")
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

        out = f"{stem}_lhs_inplace_out" if e.arity == 2 else ""
        defop(e.op + "Inplace", infer_inplace, reference, (0,), inplace_of=e.op, out=out)


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
    n = len(args)  # PopXL's argument names: t (unary), lhs / rhs (binary), t0, t1, ...
    names = ("t",) if n == 1 else ("lhs", "rhs") if n == 2 else [f"t{i}" for i in range(n)]
    check_in_current_graph(e.name, **dict(zip(names, args)))  # before adding a constant
    inputs = coerce(args, e.name)
    if len(inputs) > 1:  # PopXL's binary ops check their operands' placement
        placed = {n: t for n, t, a in zip(names, inputs, args) if isinstance(a, Tensor)}
        if len(placed) > 1:  # (a constant made from a host value is placed nowhere yet)
            check_tensor_ipu_and_tile_set(**placed)
    if e.operands_as is not None:
        as_dtype = dtypes.dtype.from_name(e.operands_as)
        inputs = [cast_if_needed(t, as_dtype) for t in inputs]
    (out,) = create_op(op_type, inputs)
    return out


def document(namespace: dict[str, Any]) -> None:
    """End the docstring of each element-wise function in ``namespace`` (and of its
    in-place form) with the dtypes its record accepts, so help() says what the type check
    enforces."""
    for e in TABLE:
        for name in (e.name, e.name + "_"):
            fn = namespace.get(name)
            if fn is None or not fn.__doc__ or "\n    Dtypes:" in fn.__doc__:
                continue
            took = ", ".join(e.dtypes)
            if e.operands_as is not None:
                took = f"any (operands of another dtype are cast to {e.operands_as} first)"
            fn.__doc__ = fn.__doc__.rstrip() + f"\n\n    Dtypes: {took}.\n"
