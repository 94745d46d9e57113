"""The element-wise codelets: PopLibs' op families and the codelets generated for fused
expressions.

Every codelet here is a *worker* vertex over one contiguous part of the output (``map``
places at most one per worker context per tile) and computes by evaluating a typed
expression (``expr_eval``) on its fields. They differ by how they get the
expression and by their estimators:

* op families, one class each, the op a template argument (compute dispatches on it
  through the op table): ``popops::UnaryOp1D<OP,T>``, ``popops::BinaryOp1D<OP,T>``,
  ``popops::BroadcastScalar1D<OP,T>`` (second operand one element), ``popops::Select<T>``,
  ``popops::Clamp<T>``, each with an ``InPlace`` twin. ``OP`` is the PopLibs enum name
  (``popops::UnaryOp1D<EXPONENT,half>``) and ``T`` the operand type.
* fused expressions: one class generated per canonical expression (and input layout),
  named ``popops::Fused_<hash>`` / ``popops::FusedInPlace_<hash>`` with one template
  argument per input type (``popops::Fused_1c0ffee4a2b3<float,float>``); the class's
  ``expression`` holds the readable canonical form. The hash keeps the expression text (with
  its commas and parentheses) out of the vertex-type name, which Poplar splits at commas.

Estimators (per-context cycles of one worker vertex over ``n`` elements; the tile cycles
are 6 x the busiest context plus the compute-set launch, which stands for PopLibs'
supervisor overhead), from PopLibs' ``popopsCycleEstimators.cpp``:

* UnaryOp1D: ``17 + loops(n)`` (33 for EXPONENT, 55 in place); natural-vector ops cost
  ``ceil(n / vw) x (cyclesPerLoop + 4)``, others ``ceil(n / elements) x cyclesPerLoop``.
* BinaryOp1D: ``29`` (float) / ``26`` (half) ``+ loops(n)`` with a loop overhead of 5, or 2
  for ADD / SUB / MUL on float and half; 58 in place.
* BroadcastScalar1D: ``20 + loops(n)`` with an overhead of 1 (ADD / SUB / MUL on float and
  half) or 4.
* Select / Clamp [proposal]: ``30 + loops(n)`` with an overhead of 6.
* Fused [proposal]: ``17 + 6 (v - 1) + 4 s + ceil(n / vw) x (sum of the ops' cycles per
  vector + 3 + v)`` for ``v`` vector and ``s`` scalar inputs: one loop, each op's cycles
  per vector from the table, the loads and the store once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache, partial
from typing import Any, ClassVar

import numpy as np

from tremula import numerics, poplar
from tremula.errors import ApplicationRuntimeError
from tremula.libs import jit
from tremula.libs.popops import estimators as E
from tremula.libs.popops import ops
from tremula.libs.popops.codelets import relu_kernel
from tremula.libs.popops.expr import Expr, PlaceHolder, count_ops, make
from tremula.libs.popops.expr_eval import (
    Typed,
    compile_steps,
    evaluate,
    flops_per_element,
    infer,
    integer_divisions,
    zero_divisor,
)
from tremula.poplar.types import BOOL, Type, as_type


def type_arg(t: Type) -> str:
    """A type as a template argument (no spaces: ``unsigned int`` -> ``uint32``)."""
    return t.name if " " not in t.name else t.numpy.name


def _uniform(arr: np.ndarray) -> bool:
    """Every vertex holds the same value (NaN counts as equal)."""
    first = arr[..., :1]
    return bool(np.all((arr == first) | (arr != arr)))


def _check_divisors(v: poplar.Batch, typed: Typed, args: Sequence[np.ndarray]) -> None:
    """``debug.checkIntegerDivision``: raise if an integer division or remainder of
    ``typed`` has a zero divisor element (the device would give 0)."""
    found = zero_divisor(typed, args)
    if found is None:
        return
    node, _ = found
    assert node.op is not None and node.in_type is not None
    where = typed.expr.canonical
    part = "" if node.expr.canonical == where else f" in {where}"
    raise ApplicationRuntimeError(
        f"integer division by zero in {v.compute_set or v.vertex_type.name!r} (the op's name, "
        f"then its expression): {node.op.op.name} of {node.in_type} operands "
        f"({node.expr.canonical}{part}) has a divisor of 0; without the engine option "
        f"debug.checkIntegerDivision the device gives 0 there"
    )


def _scalar_operand(v: poplar.Batch, arr: np.ndarray, like: str) -> np.ndarray:
    """A one-element-per-vertex field as an operand: broadcast when every vertex holds the
    same value (the usual case: one scalar tensor), else expanded per element."""
    if arr.shape[-1] == 0 or _uniform(arr):
        return arr[..., :1]
    return v.expand(arr, like)


def _gathered(
    v: poplar.Batch, name: str, shape: tuple[int, ...] | None, refresh: list[Any]
) -> np.ndarray | None:
    """A read-only operand with no view of device memory, in a kept buffer that
    ``refresh`` (a list of calls made before each prepared run) gathers again; shaped
    ``shape`` only when the operand was connected with that shape (its order)."""
    if shape is not None and v.source_shape(name) != shape:
        return None
    found = v.stable_gather(name, shape)
    if found is None:
        return None
    refresh.append(found[1])
    return found[0]


def _refreshed(refresh: list[Any], run: Any) -> Any:
    """``run`` after gathering the operands that need it (``run`` alone if none do)."""
    if not refresh:
        return run
    if len(refresh) == 1:
        gather = refresh[0]

        def run_one() -> None:
            gather()
            run()

        return run_one

    def run_all() -> None:
        for gather in refresh:
            gather()
        run()

    return run_all


class Elementwise(poplar.Codelet):
    """Base of the element-wise codelets: fields ``inputs`` (for ``_1``, ``_2`` ...), the
    field ``output`` written (``inputs[0]`` when in place) and which inputs are scalars."""

    inputs: ClassVar[tuple[str, ...]] = ()
    output: ClassVar[str] = "out"
    scalars: ClassVar[tuple[bool, ...]] = ()
    in_place: ClassVar[bool] = False

    @classmethod
    def typed(cls, params: dict[str, str]) -> Typed:
        raise NotImplementedError

    @classmethod
    def compute(cls, v: poplar.Batch) -> None:  # type: ignore[override]
        typed = cls.typed(v.params)
        shape = v.source_shape(cls.output)
        pairs = list(zip(cls.inputs, cls.scalars))
        nd = v.cached(
            "nd",
            lambda: (
                shape is not None
                and all(v.source_shape(f) == shape for f, s in pairs if not s)
                and all(v.reads_one_address(f) for f, s in pairs if s)
            ),
        )
        if nd:
            # every operand connected with the output's shape: N-d views (zero-copy where
            # possible: broadcast operands keep their stride-0 axes instead of a gather)
            ones = (1,) * len(shape)  # type: ignore[arg-type]  # nd: a shape
            args = [
                v[f][:, :1].reshape(v.replicas, *ones) if s else v.view(f, shape)  # type: ignore[arg-type]
                for f, s in pairs
            ]
            if v.checks:
                _check_divisors(v, typed, args)
            evaluate(typed, args, v.view(cls.output, shape))  # type: ignore[arg-type]
            return
        args = [
            _scalar_operand(v, v[f], cls.output) if s else v[f]
            for f, s in zip(cls.inputs, cls.scalars)
        ]
        if v.checks:
            _check_divisors(v, typed, args)
        evaluate(typed, args, v[cls.output])

    @classmethod
    def prepare(cls, v: poplar.Batch) -> Any:
        """A closure over views of device memory for later runs (None: keep ``compute``):
        N-d views when every operand is connected with the output's shape, else flat
        views; scalar operands as one-element views."""
        typed = cls.typed(v.params)
        if "integerDivision" in v.checks and integer_divisions(typed):
            return None  # checked in compute, run by run
        shape = v.source_shape(cls.output)
        pairs = list(zip(cls.inputs, cls.scalars))
        for nd_shape in ((shape,) if shape is not None else ()) + (None,):
            ones = (1,) * (len(nd_shape) if nd_shape is not None else 1)
            args: list[np.ndarray | None] = []
            refresh: list = []
            for f, scalar in pairs:
                view = v.stable_scalar(f) if scalar else v.stable_view(f, nd_shape)
                if view is not None and scalar:
                    view = view.reshape(v.replicas, *ones)
                if view is None and not scalar and f != cls.output:
                    view = _gathered(v, f, nd_shape, refresh)
                args.append(view)
            out = v.stable_view(cls.output, nd_shape)
            if out is not None and all(a is not None for a in args):
                run = compile_steps(typed, args, out)  # type: ignore[arg-type]
                if relu_kernel.offered(typed):  # a compiled loop from the second run on
                    run = jit.deferred(run, partial(relu_kernel.compiled, typed, args, out, run))
                return numerics.quiet(_refreshed(refresh, run))
        return None

    @classmethod
    def flops(cls, v: poplar.VertexInfo) -> np.ndarray:  # type: ignore[override]
        return flops_per_element(cls.typed(v.params)) * v.lengths(cls.output).astype(np.float64)


def _edge(direction: str, dtype: Any, scalar: bool) -> poplar.Field:
    kind = "scalar" if scalar else "vector"
    return {"in": poplar.Input, "out": poplar.Output, "inout": poplar.InOut}[direction](
        dtype, kind=kind
    )


def _make_class(
    base: type[Elementwise],
    name: str,
    templates: tuple[str, ...],
    inputs: Sequence[tuple[str, Any, bool]],
    in_place: bool,
    extra: dict[str, Any] | None = None,
) -> type[Elementwise]:
    """A codelet class: ``inputs`` are (field, dtype, scalar); the first is InOut when in
    place, else an ``out`` field (of any type: the op decides) is added."""
    attrs: dict[str, Any] = {"name": name, "templates": templates, "in_place": in_place}
    for i, (field, dtype, scalar) in enumerate(inputs):
        attrs[field] = _edge("inout" if in_place and i == 0 else "in", dtype, scalar)
    output = inputs[0][0] if in_place else "out"
    if not in_place:
        attrs["out"] = _edge("out", None, False)
    attrs.update(
        inputs=tuple(f for f, _, _ in inputs),
        output=output,
        scalars=tuple(s for _, _, s in inputs),
        **(extra or {}),
    )
    pyname = name.split("::")[-1].split("<")[0]
    return type(pyname, (base,), attrs)


# ---- op families ----


class Family(Elementwise):
    """A PopLibs op family: the op is the ``OP`` template argument (or fixed)."""

    fixed_op: ClassVar[str | None] = None  # Select / Clamp

    @classmethod
    def op_of(cls, params: dict[str, str]) -> ops.ElementwiseOp:
        return ops.get(cls.fixed_op or params["OP"])

    @classmethod
    def typed(cls, params: dict[str, str]) -> Typed:
        return _single_op(cls.fixed_op or params["OP"], params["T"])

    kind: ClassVar[str] = ""  # the family's estimator (``estimators.FAMILY_BASE``)

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:  # type: ignore[override]
        t = as_type(v.params["T"])
        n, vw = v.lengths(cls.output), v.target.vector_width(t.size)
        return E.family_cycles(cls.kind, cls.in_place, cls.op_of(v.params), t, n, vw)


@lru_cache(maxsize=1024)
def _single_op(op: str, t_name: str) -> Typed:
    """The typed expression ``OP(_1, _2 ...)`` of a family vertex type."""
    rec = ops.get(op)
    t = as_type(t_name)
    types = tuple(BOOL if i == rec.cond else t for i in range(rec.arity))
    return infer(make(rec.op, *(PlaceHolder(i + 1) for i in range(rec.arity))), types)


class _Unary(Family):
    kind = "unary"


class _Binary(Family):
    kind = "binary"


class _Broadcast(Family):
    kind = "broadcast"


class _Ternary(Family):
    kind = "ternary"


def _family(
    base: type[Family], name: str, fields: Sequence[tuple[str, Any, bool]], **kw: Any
) -> list[type[Elementwise]]:
    templates = ("T",) if "fixed_op" in kw else ("OP", "T")
    classes = []
    for in_place in (False, True):
        names = list(fields)
        if in_place:  # PopLibs names the in-place operand in1Out / inOut / data
            first = {"in": "inOut", "in1": "in1Out"}.get(names[0][0], names[0][0])
            names[0] = (first, *names[0][1:])
        cname = f"{name}InPlace" if in_place else name
        classes.append(_make_class(base, cname, templates, names, in_place, kw))
    return classes


UnaryOp1D, UnaryOp1DInPlace = _family(_Unary, "popops::UnaryOp1D", [("in", "T", False)])
BinaryOp1D, BinaryOp1DInPlace = _family(
    _Binary, "popops::BinaryOp1D", [("in1", "T", False), ("in2", "T", False)]
)
BroadcastScalar1D, BroadcastScalar1DInPlace = _family(
    _Broadcast, "popops::BroadcastScalar1D", [("data", "T", False), ("B", "T", True)]
)
_TERNARY = [("in1", "T", False), ("in2", "T", False)]
Select, SelectInPlace = _family(
    _Ternary, "popops::Select", [*_TERNARY, ("in3", BOOL, False)], fixed_op="SELECT"
)
Clamp, ClampInPlace = _family(
    _Ternary, "popops::Clamp", [*_TERNARY, ("in3", "T", False)], fixed_op="CLAMP"
)

#: Every family codelet (registered in a graph on first use).
FAMILIES: tuple[type[Elementwise], ...] = (
    UnaryOp1D,
    UnaryOp1DInPlace,
    BinaryOp1D,
    BinaryOp1DInPlace,
    BroadcastScalar1D,
    BroadcastScalar1DInPlace,
    Select,
    SelectInPlace,
    Clamp,
    ClampInPlace,
)


def family_for(
    typed: Typed, scalars: Sequence[bool], in_place: bool
) -> tuple[type[Elementwise], str] | None:
    """The family codelet and its vertex-type name for a single op applied to ``_1``,
    ``_2`` ... in order, or None when the expression needs a fused codelet."""
    rec = typed.op
    in_order = all(a.index == i for i, a in enumerate(typed.args))
    if rec is None or not in_order or len(scalars) != rec.arity:
        return None
    t = type_arg(typed.in_type)  # type: ignore[arg-type]
    if rec.arity == 3:
        if any(scalars):
            return None
        cls = {"SELECT": (Select, SelectInPlace), "CLAMP": (Clamp, ClampInPlace)}[rec.op.name]
        c = cls[in_place]
        return c, f"{c.name}<{t}>"
    if rec.arity == 2 and scalars[1] and not scalars[0]:
        c = BroadcastScalar1DInPlace if in_place else BroadcastScalar1D
    elif any(scalars):
        return None
    elif rec.arity == 2:
        c = BinaryOp1DInPlace if in_place else BinaryOp1D
    else:
        c = UnaryOp1DInPlace if in_place else UnaryOp1D
    return c, f"{c.name}<{rec.op.name},{t}>"


# ---- fused expressions ----


class Fused(Elementwise):
    """A codelet generated for one canonical expression."""

    expression: ClassVar[Expr]

    @classmethod
    def input_types(cls, params: dict[str, str]) -> tuple[Type, ...]:
        return tuple(as_type(params[f"T{i + 1}"]) for i in range(len(cls.inputs)))

    @classmethod
    def typed(cls, params: dict[str, str]) -> Typed:
        return infer(cls.expression, cls.input_types(params))

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:  # type: ignore[override]
        typed, types = cls.typed(v.params), cls.input_types(v.params)
        n = v.lengths(cls.output)
        return E.fused_cycles(typed, types, cls.scalars, cls.in_place, n, v.target)


_FUSED: dict[str, type[Elementwise]] = {}


def fused_codelet(
    expr: Expr, input_types: Sequence[Type], scalars: Sequence[bool], in_place: bool
) -> tuple[type[Elementwise], str]:
    """The codelet generated for ``expr`` (once per canonical expression, input layout and
    in-place flag) and its vertex-type name for ``input_types``."""
    layout = "".join("s" if s else "v" for s in scalars)
    key = f"{expr.canonical}|{layout}|{'inplace' if in_place else 'out'}"
    cls = _FUSED.get(key)
    if cls is None:
        digest = hashlib.sha1(key.encode()).hexdigest()[:12]
        name = f"popops::{'FusedInPlace' if in_place else 'Fused'}_{digest}"
        fields = [(f"in{i + 1}", f"T{i + 1}", s) for i, s in enumerate(scalars)]
        templates = tuple(f"T{i + 1}" for i in range(len(scalars)))
        doc = f"Fused element-wise expression {expr.canonical} (inputs: {layout})."
        extra = {"expression": expr, "__doc__": doc, "code_bytes": 96 + 32 * count_ops(expr)}
        cls = _FUSED[key] = _make_class(Fused, name, templates, fields, in_place, extra)
    args = ",".join(type_arg(t) for t in input_types)
    return cls, f"{cls.name}<{args}>"
