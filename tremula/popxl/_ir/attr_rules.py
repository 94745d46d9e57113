"""The attribute rules of the op classes whose constructors round 9 of the bindings maps
(``constructors.py`` holds the table): PopART's constructor arguments, by parameter name,
to Tremula's attributes, resolved against the inputs' specs where PopART's ``setup()``
resolves them."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError, PopartException
from tremula.popxl import dtypes
from tremula.popxl.tensor import TensorSpec


def _optional(v: Any) -> Any:
    """The value of an optional argument: PopART's ``nonstd::optional`` (an object with a
    ``value``) or the value itself (an enum member is a value)."""
    return v if isinstance(v, enum.Enum) else getattr(v, "value", v)


def _resolved_axis(axis: Any, specs: Sequence[TensorSpec], what: str) -> int:
    from tremula.popxl.ops.shape import norm_axis

    return norm_axis(int(axis), len(specs[0].shape), what, "input 0")


def reduce_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``ReduceOp(opid, axes, keepdims, settings)``: no axes (None) reduce every axis."""
    from tremula.popxl.ops.shape import norm_axes

    name = type(op).__name__
    axes = norm_axes(args["axes"], len(specs[0].shape), name, "input 0")
    return {"axes": axes, "keepdims": bool(args["keepdims"])}


def arg_extrema_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    dim = _resolved_axis(args["axis"], specs, type(op).__name__)
    return {"dim": dim, "keepdim": bool(args["keepdims"])}


def topk_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``TopKOp(opid, k, axis, largest, sorted, settings, available_memory_proportion)``;
    ``setup()`` refuses a k the axis cannot give."""
    axis = _resolved_axis(args["axis"], specs, "TopKOp")
    k, dim = int(args["k"]), specs[0].shape[axis]
    if not 1 <= k <= dim:
        raise OpSetupError(f"TopKOp: k={k} must lie in [1, {dim}] (axis {axis} of input 0)")
    return {"k": k, "axis": axis, "largest": bool(args["largest"]), "sorted": bool(args["sorted"])}


def clip_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``ClipOp(opid, min, max, settings)``: an infinite bound clips nothing; integer data
    clips at the bound rounded inwards (as ``popxl.ops.clip``)."""
    from tremula.popxl.ops.misc import _bound

    spec = specs[0]
    lo = _bound(spec, float(args["min"]), float("-inf"))  # type: ignore[arg-type]
    hi = _bound(spec, float(args["max"]), float("inf"))  # type: ignore[arg-type]
    return {"min": lo, "max": hi}


def scaled_add_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``ScaledAddOp(opid, scale_0, scale_1, settings)`` (the in-place class without the
    opid): constant scales."""
    inplace = type(op).__name__ != "ScaledAddOp"
    return {"a": float(args["scale_0"]), "b": float(args["scale_1"]), "inplace": inplace}


def dropout_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``DropoutOp(opid, ratio, settings)``: a ratio outside ``[0, 1)`` is refused when the
    op is made (PopART's ``validateRatio``)."""
    from tremula.popxl.ops.random import _ratio

    return {"p": _ratio(args["ratio"], "DropoutOp"), "seed_modifier": 0}


def random_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``RandomUniformOp(opid, shape, dataType, high, low, settings)`` and
    ``RandomNormalOp(opid, shape, dataType, mean, scale, settings)``: no data type (an
    empty ``OptionalDataType``, ``UNDEFINED`` or None) is FLOAT."""
    from tremula.popxl.ops.random import _float_dtype, _shape

    name = type(op).__name__
    dt = _optional(args["dataType"])
    undefined = dt is None or getattr(dt, "name", None) == "UNDEFINED"
    attrs = {
        "shape": _shape(args["shape"], name),
        "dtype": _float_dtype(dtypes.float32 if undefined else dt, name),
        "seed_modifier": 0,
    }
    if name == "RandomUniformOp":
        return {**attrs, "high": float(args["high"]), "low": float(args["low"])}
    return {**attrs, "mean": float(args["mean"]), "std": float(args["scale"])}


def increment_mod_attrs(
    op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]
) -> dict[str, Any]:
    inc, mod = args["increment"], args["modulus"]
    if mod == 0:
        raise OpSetupError(f"{type(op).__name__}: modulus must not be 0")
    cast = int if specs[0].dtype.is_int else float
    return {"increment": cast(inc), "modulus": cast(mod)}


def histogram_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``HistogramOp(opid, levels, absoluteOfInput, settings)`` (the levels sorted)."""
    levels = tuple(sorted(float(v) for v in args["levels"]))
    if not levels:
        raise OpSetupError("HistogramOp: levels must be a non-empty list")
    return {"levels": levels, "absolute_of_input": bool(args["absoluteOfInput"])}


def group_norm_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    return {"num_groups": int(args["num_groups"]), "eps": float(args["epsilon"])}


def nll_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``NllOp(opid, ignoreIndex, reduction, inputIsLogProbability, settings)``: the
    reduction a ``ReductionType``."""
    from tremula.popxl._ir.core.enums import ReductionType

    reduction = ReductionType(args["reduction"])
    names = {ReductionType.Mean: "mean", ReductionType.Sum: "sum"}
    ignore = _optional(args["ignoreIndex"])
    return {
        "ignore_index": None if ignore is None else int(ignore),
        "reduction": names.get(reduction, "none"),
        "log_prob": bool(args["inputIsLogProbability"]),
    }


def _onnx_slice(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX's (PopART's) ``Slice`` of one axis of size ``dim``: negative bounds count from
    the end, then are clamped (to ``[0, dim]``, or ``[-1, dim - 1]`` stepping backwards)."""
    if step == 0:
        raise OpSetupError("SliceOp: a step of 0 is not allowed")
    s, e = (start + dim if start < 0 else start), (end + dim if end < 0 else end)
    if step > 0:
        return slice(min(max(s, 0), dim), min(max(e, 0), dim), step)
    s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
    return slice(s, None if e < 0 else e, step)


def slice_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``SliceOp(opid, starts, ends, axes, steps, settings)``: no axes are the first
    ``len(starts)`` axes, no steps are 1s."""
    shape = specs[0].shape
    starts, ends = [int(v) for v in args["starts"]], [int(v) for v in args["ends"]]
    axes = [int(v) for v in args.get("axes") or ()] or list(range(len(starts)))
    steps = [int(v) for v in args.get("steps") or ()] or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise OpSetupError(
            f"SliceOp: starts {starts}, ends {ends}, axes {axes} and steps {steps} must have "
            f"one entry each per sliced axis"
        )
    key = [slice(None)] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        ax = _resolved_axis(a, specs, "SliceOp")
        key[ax] = _onnx_slice(s, e, st, shape[ax])
    return {"key": tuple(key)}


def subsample_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    strides = [int(s) for s in args["strides"]]
    rank = len(specs[0].shape)
    if len(strides) != rank or any(s < 1 for s in strides):
        raise OpSetupError(
            f"SubsampleOp: strides {strides} must be one integer >= 1 per axis of input 0 "
            f"(rank {rank})"
        )
    return {"key": tuple(slice(None, None, s) for s in strides)}


def split_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``SplitOp(opid, axis, split, settings)``: no sizes split the axis equally between
    the op's outputs."""
    shape = specs[0].shape
    axis = _resolved_axis(args["axis"], specs, "SplitOp")
    dim, n = shape[axis], len(op.outputs)
    sizes = [int(s) for s in args["split"]]
    if not sizes:
        if n == 0 or dim % n:
            raise OpSetupError(f"SplitOp: {n} outputs do not split axis {axis} of size {dim}")
        sizes = [dim // n] * n
    if any(s < 0 for s in sizes) or sum(sizes) != dim:
        raise OpSetupError(f"splits {sizes} invalid for dimension of size {dim}")
    keys, begin = [], 0
    for s in sizes:
        key = [slice(None)] * len(shape)
        key[axis] = slice(begin, begin + s)
        keys.append(tuple(key))
        begin += s
    return {"keys": tuple(keys)}


def dynamic_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``DynamicSliceOp`` / ``DynamicUpdateOp(opid, axes, sizes, noOverlap, settings)``."""
    name = type(op).__name__
    axes = [_resolved_axis(a, specs, name) for a in args["axes"]]
    sizes = [int(s) for s in args["sizes"]]
    if len(axes) != len(sizes) or len(set(axes)) != len(axes):
        raise OpSetupError(f"{name}: axes {axes} and sizes {sizes} must pair up")
    for ax, s in zip(axes, sizes):
        if not 1 <= s <= specs[0].shape[ax]:
            raise OpSetupError(
                f"{name}: size {s} for axis {ax} must lie in 1..{specs[0].shape[ax]}"
            )
    return {"axes": tuple(axes), "sizes": tuple(sizes), "no_overlap": bool(args["noOverlap"])}


def scatter_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``ScatterOp(opid, axis, settings, available_memory_proportion)``."""
    axis = _resolved_axis(args["axis"], specs, "ScatterOp")
    return {"axis": axis, "available_memory_proportion": args.get("available_memory_proportion")}


def print_tensor_attrs(
    op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]
) -> dict[str, Any]:
    """``PrintTensorOp(opid, printSelf, printGradient, title, settings)``, printed in
    ``print_tensor``'s default format."""
    from tremula.popxl.ops.debug import print_format

    return {
        "title": str(args["title"]),
        "print_self": bool(args["printSelf"]),
        "print_gradient": bool(args["printGradient"]),
        "format": print_format(),
    }


def cumsum_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``CumSumOp(opid, exclusive, reverse, settings)``: the axis is input 1, a constant
    (as ``popxl.ops.cumsum`` makes it); Tremula sums inclusively, forwards."""
    if args["exclusive"] or args["reverse"]:
        raise PopartException(
            "CumSumOp: exclusive and reverse sums are not served by Tremula (popxl.ops.cumsum "
            "makes the inclusive forward sum)"
        )
    data = getattr(op.inputs[1], "_data", None)
    if data is None or np.size(data) != 1:
        raise OpSetupError(f"{op.debugName()}: the axis (input 1) must be a one-element constant")
    return {"dim": _resolved_axis(int(np.reshape(data, ())), specs, "CumSumOp")}


def onehot_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``OnehotOp(opid, axis, settings)``: the depth is input 1, a one-element constant
    whose value sizes the new axis (as ``popxl.ops.onehot`` takes it); a negative axis
    counts from the end of the output."""
    from tremula.popxl.ops.shape import norm_axis

    if len(specs) != 3:
        raise OpSetupError(
            f"{op.debugName()}: OnehotOp takes 3 inputs (indices, depth, values), got {len(specs)}"
        )
    data = getattr(op.inputs[1], "_data", None)
    if data is None or np.size(data) != 1:
        raise OpSetupError(f"{op.debugName()}: the depth (input 1) must be a one-element constant")
    n = np.reshape(data, ()).item()
    if int(n) != n or n < 1:
        raise OpSetupError(f"{op.debugName()}: the depth (input 1) must be positive, got {n!r}")
    if np.prod(specs[2].shape, dtype=np.int64) != 2:
        raise OpSetupError(f"{op.debugName()}: the values (input 2) must hold [off, on]")
    axis = norm_axis(int(args["axis"]), len(specs[0].shape), "OnehotOp", "input 0", extra=1)
    return {"num_classes": int(n), "axis": axis}


def _update_operands(
    roles: tuple[str, ...], factor: Any, after: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The operands of a var update made through the bindings: ``roles`` connected in
    order, then the factor ``f``, an input when PopART's ``OptimizerValue`` is not constant
    (``AccumulateOp``'s input 2, ``AccumulatorScaleOp``'s too), a number otherwise, then
    the roles ``after``."""
    slots = {role: i for i, role in enumerate(roles)}
    values: dict[str, float] = {}
    if factor is not None:
        if not hasattr(factor, "isConst"):
            raise TypeError(f"expected an OptimizerValue for the factor, got {factor!r}")
        if factor.isConst():
            values["f"] = float(factor.val())
        else:
            slots["f"] = len(slots)
    for role in after:
        slots[role] = len(slots)
    return {"slots": slots, "values": values}


def accumulate_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``AccumulateOp(type, factor, settings)``: the types ``popxl.ops.var_updates`` makes
    (``Add`` takes no factor)."""
    from tremula.popxl._ir.core.enums import AccumulationType
    from tremula.popxl.ops.var_updates.accumulate import ACCUMULATIONS

    kind = AccumulationType(args["type"]).name
    if kind not in ACCUMULATIONS:
        raise PopartException(
            f"AccumulateOp: AccumulationType.{kind} is not served (Tremula serves "
            f"{sorted(ACCUMULATIONS)}, the types popxl.ops.var_updates makes)"
        )
    factor = None if kind == "Add" else args["factor"]
    return {**_update_operands(("t", "X"), factor), "type": kind}


def accumulator_scale_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]):
    return _update_operands(("t",), args["factor"])


def copy_var_update_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]):
    return _update_operands(("t", "X"), None)


def remote_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``RemoteLoadOp`` / ``RemoteLoadInplaceOp`` / ``RemoteStoreOp(opid, settings,
    remoteBufferId)``: the Ir's remote buffer of that id (a popxl ``RemoteBuffer``); the
    offset is input 1, read when the program runs."""
    from tremula.popxl._ir.ir import ir_handle

    rbid = int(args.get("remoteBufferId", -1))
    name = type(op).__name__
    if rbid < 0:
        raise PopartException(f"{name}: no remote buffer id (-1); give the buffer's id")
    return {"buffer": ir_handle(op.graph.ir)._remote_buffer(rbid, name), "offset": None}


def matmul_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``MatMulOp(opid, settings, availableMemoryProportion, serialization, outputType,
    partialsType, enableFullyConnectedPass)`` (optional values unset, or PopART's
    ``Optional*``); Tremula does not serialise matmuls."""
    from tremula.popxl._ir.op.subgraph import MatMulPartialsType, SerialiseSettingsMode

    serialise = args.get("serialization")
    mode = getattr(serialise, "mode", SerialiseSettingsMode.NoSerialisation)
    if mode != SerialiseSettingsMode.NoSerialisation:
        raise PopartException(
            f"MatMulOp: serialisation {SerialiseSettingsMode(mode).name} is not served by "
            f"Tremula (PopXL's matmul makes NoSerialisation)"
        )
    amp = _optional(args.get("availableMemoryProportion"))
    if amp is not None and not 0 < float(amp) <= 1:
        raise PopartException(f"MatMulOp: availableMemoryProportion {amp} is not in (0, 1]")
    out = _optional(args.get("outputType"))
    given = args.get("partialsType")
    partials = MatMulPartialsType.FLOAT if given is None else MatMulPartialsType(int(given))
    return {
        "available_memory_proportion": None if amp is None else float(amp),
        "output_type": None if out is None else dtypes.dtype.as_dtype(out),
        "partials_type": dtypes.float16 if partials == MatMulPartialsType.HALF else dtypes.float32,
        "fully_connected_pass": bool(args.get("enableFullyConnectedPass", True)),
    }


def sparse_accumulate_attrs(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]):
    """``SparseAccumulateOp(type, factor, axis, settings)``: ``Add`` (a factor of 1) or
    ``DampenedAdd``, as PopART's constructor accepts; the indices are input 3, the
    optional layout tensor ``W`` input 4."""
    from tremula.popxl._ir.core.enums import AccumulationType

    kind = AccumulationType(args["type"]).name
    if kind not in ("Add", "DampenedAdd"):
        raise PopartException(
            f"SparseAccumulateOp: AccumulationType.{kind} is not supported (Add or DampenedAdd)"
        )
    axis = args["axis"]
    if isinstance(axis, bool) or int(axis) != axis or axis < 0:
        raise TypeError(f"SparseAccumulateOp: axis must be a non-negative integer, got {axis!r}")
    factor = None if kind == "Add" else args["factor"]  # Add: a factor of 1
    operands = _update_operands(("t", "X"), factor, ("indices", "W"))
    return {**operands, "type": kind, "axis": int(axis)}
