"""The attribute getters of PopART's op classes (``SoftmaxOp.getAxis()``,
``TransposeOp.getPerm()``, ``DynamicSliceOp.getSizes()``, ...), read from the op record's
Tremula attributes: the inverse of ``constructors.py``, one table keyed by the Tremula op
type. ``classes.py`` puts them on the op type's binding class and on its in-place form's
(PopART's ``SoftmaxInplaceOp`` has ``getAxis`` too); a class derived from another
(``TiedGatherOp`` is a ``GatherOp``) inherits them.

The names and value types are those of PopART's C++ ops (``op/softmax.hpp``,
``op/dynamic/dynamicbase.hpp``, ``op/reduce.hpp``, ``op/topk.hpp``, ...): axes are
non-negative (resolved against the input, as PopART's ``setup()`` resolves them), shapes
and axis lists are Python lists, data types PopART's ``DataType``, an unset available
memory proportion ``None`` (PopART's empty ``nonstd::optional``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tremula.errors import PopartException

#: (the op record) -> the getter's value
Getter = Callable[[Any], Any]


def attr(op: Any, key: str, getter: str) -> Any:
    """The op's Tremula attribute ``key``.

    Raises:
        popart_exception: the op has no such attribute yet (an op made by
            ``Graph.createOp_<X>`` whose attributes are resolved at ``setup()``), naming the
            op and the getter.
    """
    if key not in op.attrs:
        raise PopartException(
            f"{op.debugName()}.{getter}(): the op has no {key!r} yet (its attributes are "
            f"resolved against its inputs when it is set up: call setup() first)"
        )
    return op.attrs[key]


def _get(key: str, convert: Callable[[Any], Any] = lambda v: v) -> Callable[[str], Getter]:
    """A getter reading attribute ``key`` through ``convert`` (bound to the getter's name by
    :func:`_table`, for the error message)."""
    return lambda name: lambda op: convert(attr(op, key, name))


def _int_list(v: Any) -> list[int]:
    return [int(d) for d in v]


def _pb_dtype(dt: Any) -> Any:
    return dt._pb_dtype


def _reduction(name: str) -> Any:
    from tremula.popxl._ir.core.enums import ReductionType

    return {"sum": ReductionType.Sum, "mean": ReductionType.Mean}.get(
        name, ReductionType.NoReduction
    )


def _init_type(name: str) -> Any:
    from tremula.popxl._ir.core.enums import InitType

    return InitType.NoInit if name == "undef" else InitType.Zero


def _tensor_info(op: Any, name: str) -> Any:
    from tremula.popxl._ir.tensor import TensorInfo

    dtype, shape = attr(op, "dtype", name), attr(op, "shape", name)
    return TensorInfo(dtype, shape, op.attrs.get("meta_shape", ()))


def _ctor_arg(key: str, default: Any) -> Callable[[str], Getter]:
    """A getter of a PopART constructor argument Tremula's op keeps only when it was made by
    ``Graph.createOp_<X>`` (``constructors.py``), else what PopXL's op function passes."""
    return lambda name: lambda op: op.__dict__.get("_ctor_args", {}).get(key, default())


def _act_grad() -> Any:
    from tremula.popxl._ir.tensor import TensorType

    return TensorType.ActGrad


def _set(key: str, convert: Callable[[Any], Any], unset: str) -> Callable[[str], Getter]:
    """A getter of attribute ``key`` through ``convert`` that raises where the op holds None
    (``unset`` says why, after the op and the getter)."""

    def make(name: str) -> Getter:
        def get(op: Any) -> Any:
            value = attr(op, key, name)
            if value is None:
                raise PopartException(f"{op.debugName()}.{name}(): {unset}")
            return convert(value)

        return get

    return make


_SCALE = "the scale is the op's input tensor, not a constant (read it with inTensor)"


_AXIS = {"getAxis": _get("axis", int)}
_MEMORY = {"getAvailableMemoryProportion": _get("available_memory_proportion")}
_DYNAMIC = {
    "getAxes": _get("axes", _int_list),
    "getSizes": _get("sizes", _int_list),
    "isNotOverlapping": _get("no_overlap", bool),
}
_REDUCE = {"getAxes": _get("axes", _int_list), "getKeepDims": _get("keepdims", bool)}
_ARG_EXTREMA = {"getAxis": _get("dim", int), "getKeepDims": _get("keepdim", int)}
_REMOTE = {"getRemoteBufferId": _get("buffer", lambda b: int(b.remote_buffer_id))}
_HOST = {"getHostStreamTensorId": _get("stream", lambda s: str(s.tensor_id))}

#: Tremula op type (out-of-place) -> {PopART getter: its maker}
_MAKERS: dict[str, dict[str, Callable[[str], Getter]]] = {
    "Softmax": _AXIS,
    "Concat": _AXIS,
    "OneHot": _AXIS,
    "Transpose": {"getPerm": _get("permutation", _int_list)},
    "Reshape": {"getOutShape": _get("shape", _int_list)},
    "Cast": {"toDataType": _get("dtype", _pb_dtype)},
    "Gather": {**_AXIS, **_MEMORY, "zeroOutOfRangeIndices": _get("zero_OOR", bool)},
    "Scatter": {**_AXIS, **_MEMORY},
    "DynamicSlice": _DYNAMIC,
    "DynamicUpdate": _DYNAMIC,
    "Dropout": {"getRatio": _get("p", float)},
    "TopK": {
        "getK": _get("k", int),
        **_AXIS,
        "getLargest": _get("largest", bool),
        "getSorted": _get("sorted", bool),
    },
    "GroupNorm": {"getNumGroups": _get("num_groups", int), "getEpsilon": _get("eps", float)},
    "RandomUniform": {"getLow": _get("low", float), "getHigh": _get("high", float)},
    "RandomNormal": {"getMean": _get("mean", float), "getScale": _get("std", float)},
    "ScaledAdd": {"getScale0": _set("a", float, _SCALE), "getScale1": _set("b", float, _SCALE)},
    "Clip": {"getClipMin": _get("min", float), "getClipMax": _get("max", float)},
    "ArgMax": _ARG_EXTREMA,
    "ArgMin": _ARG_EXTREMA,
    "IncrementMod": {
        "getIncrement": _get("increment", float),
        "getModulus": _get("modulus", float),
    },
    "Histogram": {
        "getLevels": _get("levels", lambda v: [float(x) for x in v]),
        "getAbsoluteOfInput": _get("absolute_of_input", bool),
    },
    "Nll": {
        "getReductionType": _get("reduction", _reduction),
        "hasIgnoreIndex": _get("ignore_index", lambda v: v is not None),
        "getIgnoreIndex": _set("ignore_index", int, "no ignore index is set"),
        "inputIsLogProbability": _get("log_prob", bool),
    },
    "Init": {
        "getTensorInfo": lambda name: lambda op: _tensor_info(op, name),
        "getTensorType": _ctor_arg("tensor_type", _act_grad),
        "getInitType": _get("init_type", _init_type),
        "getBatchAxis": _ctor_arg("batch_axis", lambda: -1),
    },
    "PrintTensor": {"getTitle": _get("title", str)},
    "RemoteLoad": _REMOTE,
    "RemoteStore": _REMOTE,
    "HostLoad": _HOST,
    "HostStore": _HOST,
}


def getters(op_type: str) -> dict[str, Callable[[Any], Any]]:
    """The getter methods of the binding class of Tremula's ``op_type`` (those of its
    out-of-place op for an in-place form; every ``Reduce<X>`` is a PopART ``ReduceOp``),
    by PopART's name."""
    from tremula.popxl.ops.base import OPS

    d = OPS.get(op_type)
    outplace = op_type if d is None else d.outplace
    table = _MAKERS.get(outplace, _REDUCE if outplace.startswith("Reduce") else {})
    made = {name: make(name) for name, make in table.items()}
    return {name: _method(name, fn) for name, fn in made.items()}


def _method(name: str, fn: Getter) -> Callable[[Any], Any]:
    def method(self: Any) -> Any:
        return fn(self)

    method.__name__ = name
    method.__doc__ = f"PopART's ``{name}()``, read from the op's attributes (``getters.py``)."
    return method
