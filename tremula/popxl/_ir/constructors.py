"""The constructor arguments of PopART's op classes that ``Graph.createOp_<X>`` /
``createConnectedOp_<X>`` map onto Tremula's op attributes (``build.py``).

PopART's op constructors take, besides the ``OperatorIdentifier`` and the ``Settings``,
the op's attributes in the C++ constructor's order (``ReshapeOp(opid, outShape, settings,
handleZero = true)``, ``InitOp(opid, info, tensorType, initType, settings, batchAxis =
-1)``, ...). Each entry here names those parameters (positional, or as keywords with or
without PopART's trailing underscore: ``axis_``) and gives the Tremula attributes, from
the arguments and the specs of the connected inputs, when the op is set up (PopART's
``setup()`` resolves a negative axis or a zero in a shape against the input). Ops that
take attributes and have no entry here are refused by the factories, naming the op.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tremula.errors import OpSetupError, PopartException
from tremula.popxl import dtypes
from tremula.popxl.tensor import TensorSpec

#: (the op, its constructor arguments by name, its input specs) -> its Tremula attributes
AttrRule = Callable[[Any, dict[str, Any], Sequence[TensorSpec]], dict[str, Any]]


class Constructor(NamedTuple):
    """A PopART constructor's attribute parameters (in order), how many are required, the
    rule giving Tremula's attributes, and whether it reads the inputs' specs (then it is
    applied at ``setup()``; otherwise when the op is made)."""

    params: tuple[str, ...]
    required: int
    rule: AttrRule
    reads_inputs: bool = True


def _axis(axis: Any, rank: int, what: str) -> int:
    if not -rank <= int(axis) < max(rank, 1):
        raise OpSetupError(f"{what}: axis {axis} is out of range for an input of rank {rank}")
    return int(axis) % rank if rank else 0


def _softmax(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    return {"axis": _axis(args["axis"], len(specs[0].shape), "SoftmaxOp")}


def _concat(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    return {"axis": _axis(args["axis"], len(specs[0].shape), "ConcatOp")}


def _transpose(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    rank = len(specs[0].shape)
    perm = tuple(int(p) for p in args["perm"]) or tuple(range(rank))[::-1]  # empty: reverse
    if sorted(perm) != list(range(rank)):
        raise OpSetupError(f"TransposeOp: {list(perm)} is not a permutation of {rank} axes")
    return {"permutation": perm}


def _reshape(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """ONNX's rules, as PopART's ``ReshapeOp``: a 0 keeps the input's dimension (when
    ``handleZero``), one -1 takes what is left."""
    in_shape = specs[0].shape
    shape = [int(s) for s in args["outShape"]]
    if args.get("handleZero", True):
        shape = [in_shape[i] if s == 0 and i < len(in_shape) else s for i, s in enumerate(shape)]
    n = math.prod(in_shape)
    if shape.count(-1) == 1:
        known = math.prod(s for s in shape if s != -1)
        if known and n % known == 0:
            shape = [n // known if s == -1 else s for s in shape]
    if any(s < 0 for s in shape) or math.prod(shape) != n:
        raise OpSetupError(
            f"ReshapeOp: cannot reshape {list(in_shape)} ({n} elements) to {list(args['outShape'])}"
        )
    return {"shape": tuple(shape)}


def _cast(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    return {"dtype": dtypes.dtype.as_dtype(args["to"])}


def _init(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    from tremula.popxl._ir.build import _spec
    from tremula.popxl._ir.core.enums import InitType

    spec = _spec(args["tensor_info"], "InitOp")
    undef = args["init_type"] == InitType.NoInit
    return {
        "shape": spec.shape,
        "dtype": spec.dtype,
        "init_type": "undef" if undef else "zero",
        "meta_shape": spec.meta_shape,
    }


def _call(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    callee = getattr(args["callee"], "_g", None)
    if callee is None:
        raise TypeError(f"CallOp: the callee must be a Graph, got {args['callee']!r}")
    return {"graphs": (callee,)}


def _ipu_copy(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    dest = args["destIpu"]
    if isinstance(dest, bool) or int(dest) != dest or dest < 0:
        raise TypeError(f"IpuCopyOp: destIpu must be a non-negative integer, got {dest!r}")
    return {"destination": int(dest)}


def _gather(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``GatherOp(opid, axis, settings, availableMemoryProportion, zeroOutOfRangeIndices)``
    (what PopXL's gather passes as ``axis_=``, ``available_memory_proportion_=``,
    ``zeroOutOfRangeIndices_=``)."""
    if specs[1].dtype not in (dtypes.int32, dtypes.uint32):
        raise OpSetupError(f"GatherOp: indices must be int32 or uint32, got {specs[1].dtype}")
    return {
        "axis": _axis(args["axis"], len(specs[0].shape), "GatherOp"),
        "available_memory_proportion": args.get("available_memory_proportion"),
        "zero_OOR": bool(args.get("zeroOutOfRangeIndices", False)),
    }


def _stream(op: Any, args: dict[str, Any], kind: str) -> Any:
    """The popxl stream (of ``kind``) whose tensor is ``streamTensorId``."""
    from tremula.popxl import streams

    cls = getattr(streams, kind)
    tid = str(args["streamTensorId"])
    for stream in op.graph.ir._streams:
        if stream.tensor_id == tid and isinstance(stream, cls):
            return stream
    raise PopartException(
        f"{type(op).__name__}: no {kind} of tensor {tid!r} in the Ir (make one with "
        f"Graph.addStream or popxl.h2d_stream / d2h_stream)"
    )


def _host_load(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    return {"stream": _stream(op, args, "HostToDeviceStream")}


def _host_store(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    return {"stream": _stream(op, args, "DeviceToHostStream")}


def _optional(v: Any) -> Any:
    """The value of an optional argument: PopART's ``nonstd::optional`` (an object with a
    ``value``) or the value itself (an enum member is a value)."""
    return v if isinstance(v, enum.Enum) else getattr(v, "value", v)


def _resolved_axis(axis: Any, specs: Sequence[TensorSpec], what: str) -> int:
    from tremula.popxl.ops.shape import norm_axis

    return norm_axis(int(axis), len(specs[0].shape), what, "input 0")


def _reduce(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``ReduceOp(opid, axes, keepdims, settings)``: no axes (None) reduce every axis."""
    from tremula.popxl.ops.shape import norm_axes

    name = type(op).__name__
    axes = norm_axes(args["axes"], len(specs[0].shape), name, "input 0")
    return {"axes": axes, "keepdims": bool(args["keepdims"])}


def _arg_extrema(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    dim = _resolved_axis(args["axis"], specs, type(op).__name__)
    return {"dim": dim, "keepdim": bool(args["keepdims"])}


def _topk(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``TopKOp(opid, k, axis, largest, sorted, settings, available_memory_proportion)``;
    ``setup()`` refuses a k the axis cannot give."""
    axis = _resolved_axis(args["axis"], specs, "TopKOp")
    k, dim = int(args["k"]), specs[0].shape[axis]
    if not 1 <= k <= dim:
        raise OpSetupError(f"TopKOp: k={k} must lie in [1, {dim}] (axis {axis} of input 0)")
    return {"k": k, "axis": axis, "largest": bool(args["largest"]), "sorted": bool(args["sorted"])}


def _clip(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``ClipOp(opid, min, max, settings)``: an infinite bound clips nothing; integer data
    clips at the bound rounded inwards (as ``popxl.ops.clip``)."""
    from tremula.popxl.ops.misc import _bound

    spec = specs[0]
    lo = _bound(spec, float(args["min"]), float("-inf"))  # type: ignore[arg-type]
    hi = _bound(spec, float(args["max"]), float("inf"))  # type: ignore[arg-type]
    return {"min": lo, "max": hi}


def _scaled_add(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``ScaledAddOp(opid, scale_0, scale_1, settings)`` (the in-place class without the
    opid): constant scales."""
    inplace = type(op).__name__ != "ScaledAddOp"
    return {"a": float(args["scale_0"]), "b": float(args["scale_1"]), "inplace": inplace}


def _dropout(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``DropoutOp(opid, ratio, settings)``: a ratio outside ``[0, 1)`` is refused when the
    op is made (PopART's ``validateRatio``)."""
    from tremula.popxl.ops.random import _ratio

    return {"p": _ratio(args["ratio"], "DropoutOp"), "seed_modifier": 0}


def _random(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
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


def _increment_mod(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    inc, mod = args["increment"], args["modulus"]
    if mod == 0:
        raise OpSetupError(f"{type(op).__name__}: modulus must not be 0")
    cast = int if specs[0].dtype.is_int else float
    return {"increment": cast(inc), "modulus": cast(mod)}


def _histogram(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    """``HistogramOp(opid, levels, absoluteOfInput, settings)`` (the levels sorted)."""
    levels = tuple(sorted(float(v) for v in args["levels"]))
    if not levels:
        raise OpSetupError("HistogramOp: levels must be a non-empty list")
    return {"levels": levels, "absolute_of_input": bool(args["absoluteOfInput"])}


def _group_norm(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    return {"num_groups": int(args["num_groups"]), "eps": float(args["epsilon"])}


def _nll(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
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


def _slice(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
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


def _subsample(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
    strides = [int(s) for s in args["strides"]]
    rank = len(specs[0].shape)
    if len(strides) != rank or any(s < 1 for s in strides):
        raise OpSetupError(
            f"SubsampleOp: strides {strides} must be one integer >= 1 per axis of input 0 "
            f"(rank {rank})"
        )
    return {"key": tuple(slice(None, None, s) for s in strides)}


def _split(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
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


def _dynamic(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
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


def _update_operands(roles: tuple[str, ...], factor: Any) -> dict[str, Any]:
    """The operands of a var update made through the bindings: ``roles`` connected in
    order, then the factor ``f``, an input when PopART's ``OptimizerValue`` is not constant
    (``AccumulateOp``'s input 2, ``AccumulatorScaleOp``'s too), a number otherwise."""
    slots = {role: i for i, role in enumerate(roles)}
    values: dict[str, float] = {}
    if factor is not None:
        if not hasattr(factor, "isConst"):
            raise TypeError(f"expected an OptimizerValue for the factor, got {factor!r}")
        if factor.isConst():
            values["f"] = float(factor.val())
        else:
            slots["f"] = len(roles)
    return {"slots": slots, "values": values}


def _accumulate(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]) -> dict[str, Any]:
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


def _accumulator_scale(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]):
    return _update_operands(("t",), args["factor"])


def _copy_var_update(op: Any, args: dict[str, Any], specs: Sequence[TensorSpec]):
    return _update_operands(("t", "X"), None)


def made(op: Any, args: dict[str, Any]) -> None:
    """Give an op made with constructor arguments the attributes it can have now (the rest
    at ``setup()``: :func:`at_setup`); a call op modifies its callee's by-reference inputs
    and those PopART's ``modifiedInputsViaAttrs`` names."""
    ctor = constructor(type(op).__name__)
    assert ctor is not None  # bind_arguments bound the arguments to it
    op.__dict__["_ctor_args"] = args
    if not ctor.reads_inputs:
        op.attrs.update(ctor.rule(op, args, ()))
    if "destIpu" in args:  # the copy runs on its destination, as popxl's ipu_copy places it
        op.ipu = op.attrs["destination"]
    if "callee" in args:
        callee = op.attrs["graphs"][0]
        by_ref = {i for i, t in enumerate(callee.inputs) if t in callee._by_ref_inputs}
        by_ref |= {int(i) for i in args.get("modifiedInputsViaAttrs") or ()}
        op.modified = tuple(sorted(by_ref))


def at_setup(op: Any, specs: Sequence[TensorSpec]) -> None:
    """Resolve the attributes of an op made with constructor arguments against its inputs'
    specs (PopART's ``setup()``: a negative axis, a 0 or -1 in a shape)."""
    args = op.__dict__.get("_ctor_args")
    if args is not None:
        ctor = constructor(type(op).__name__)
        if ctor is not None and ctor.reads_inputs:
            op.attrs.update(ctor.rule(op, args, specs))


#: PopART class -> its constructor's attribute parameters (op/softmax.hpp, op/concat.hpp,
#: op/transpose.hpp, op/reshape.hpp, op/cast.hpp, op/init.hpp, op/call.hpp, op/ipucopy.hpp,
#: op/gather.hpp, op/exchange/hostcopy.hpp)
CONSTRUCTORS: dict[str, Constructor] = {
    "SoftmaxOp": Constructor(("axis",), 1, _softmax),
    "ConcatOp": Constructor(("axis",), 1, _concat),
    "ConcatInplaceOp": Constructor(("axis",), 1, _concat),
    "TransposeOp": Constructor(("perm",), 1, _transpose),
    "TransposeInplaceOp": Constructor(("perm",), 1, _transpose),
    "ReshapeOp": Constructor(("outShape", "handleZero"), 1, _reshape),
    "ReshapeInplaceOp": Constructor(("outShape", "handleZero"), 1, _reshape),
    "CastOp": Constructor(("to",), 1, _cast, False),
    "InitOp": Constructor(
        ("tensor_info", "tensor_type", "init_type", "batch_axis"), 3, _init, False
    ),
    "CallOp": Constructor(("callee", "modifiedInputsViaAttrs"), 1, _call, False),
    "GatherOp": Constructor(
        ("axis", "available_memory_proportion", "zeroOutOfRangeIndices"), 1, _gather
    ),
    # the source IPU comes with the input: connectInTensor(0, id, sourceIpu)
    "IpuCopyOp": Constructor(("destIpu",), 1, _ipu_copy, False),
    # HostLoadOp(opid, settings, streamTensorId), HostStoreOp likewise (op/exchange/)
    "HostLoadOp": Constructor(("streamTensorId",), 1, _host_load, False),
    "HostStoreOp": Constructor(("streamTensorId",), 1, _host_store, False),
    # op/argextrema.hpp, op/topk.hpp, op/clip.hpp, op/scaledadd.hpp,
    # op/dropout.hpp, op/randomuniform.hpp / randomnormal.hpp, op/incrementmod.hpp,
    # op/histogram.hpp, op/groupnorm.hpp, op/nll.hpp, op/slice.hpp, op/subsample.hpp,
    # op/split.hpp, op/dynamic/dynamicslice.hpp / dynamicupdate.hpp
    "ArgMaxOp": Constructor(("axis", "keepdims"), 2, _arg_extrema),
    "ArgMinOp": Constructor(("axis", "keepdims"), 2, _arg_extrema),
    "TopKOp": Constructor(
        ("k", "axis", "largest", "sorted", "available_memory_proportion"), 4, _topk
    ),
    "ClipOp": Constructor(("min", "max"), 2, _clip),
    "ScaledAddOp": Constructor(("scale_0", "scale_1"), 2, _scaled_add, False),
    "ScaledAddLhsInplaceOp": Constructor(("scale_0", "scale_1"), 2, _scaled_add, False),
    "DropoutOp": Constructor(("ratio",), 1, _dropout, False),
    "RandomUniformOp": Constructor(("shape", "dataType", "high", "low"), 4, _random, False),
    "RandomNormalOp": Constructor(("shape", "dataType", "mean", "scale"), 4, _random, False),
    "IncrementModOp": Constructor(("increment", "modulus"), 2, _increment_mod),
    "IncrementModInplaceOp": Constructor(("increment", "modulus"), 2, _increment_mod),
    "HistogramOp": Constructor(("levels", "absoluteOfInput"), 2, _histogram, False),
    "GroupNormOp": Constructor(("num_groups", "epsilon"), 2, _group_norm, False),
    "NllOp": Constructor(("ignoreIndex", "reduction", "inputIsLogProbability"), 3, _nll, False),
    "SliceOp": Constructor(("starts", "ends", "axes", "steps"), 2, _slice),
    "SliceInplaceOp": Constructor(("starts", "ends", "axes", "steps"), 2, _slice),
    "SubsampleOp": Constructor(("strides",), 1, _subsample),
    "SplitOp": Constructor(("axis", "split"), 2, _split),
    "DynamicSliceOp": Constructor(("axes", "sizes", "noOverlap"), 3, _dynamic),
    "DynamicUpdateOp": Constructor(("axes", "sizes", "noOverlap"), 3, _dynamic),
    "DynamicUpdateInplaceOp": Constructor(("axes", "sizes", "noOverlap"), 3, _dynamic),
    # op/accumulate.hpp, op/accumulatorscale.hpp, op/copyvarupdate.hpp: no opid
    "AccumulateOp": Constructor(("type", "factor"), 2, _accumulate, False),
    "AccumulatorScaleOp": Constructor(("factor",), 1, _accumulator_scale, False),
    "CopyVarUpdateOp": Constructor((), 0, _copy_var_update, False),
}


#: every ``Reduce<X>Op`` is a PopART ``ReduceOp(opid, axes, keepdims, settings)``
_REDUCE = Constructor(("axes", "keepdims"), 2, _reduce)


def constructor(class_name: str) -> Constructor | None:
    """The constructor entry of a binding class (None: its attributes are not mapped)."""
    if class_name.startswith("Reduce") and class_name.endswith("Op"):
        return _REDUCE
    return CONSTRUCTORS.get(class_name)


def bind_arguments(
    class_name: str, positional: list[Any], keywords: dict[str, Any]
) -> dict[str, Any] | None:
    """The constructor arguments by parameter name (None: the class has no entry).

    Raises:
        TypeError: too many or too few arguments, or an unknown keyword.
    """
    ctor = constructor(class_name)
    if ctor is None:
        return None
    if len(positional) > len(ctor.params):
        raise TypeError(
            f"{class_name}: {len(positional)} constructor arguments, it takes {ctor.params}"
        )
    bound = dict(zip(ctor.params, positional))
    for key, value in keywords.items():
        name = key.strip("_")
        if name not in ctor.params or name in bound:
            raise TypeError(f"{class_name}: unexpected argument {key!r} (takes {ctor.params})")
        bound[name] = value
    missing = [p for p in ctor.params[: ctor.required] if p not in bound]
    if missing:
        raise TypeError(f"{class_name}: missing constructor arguments {missing}")
    return bound
