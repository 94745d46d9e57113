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

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tremula.errors import OpSetupError, PopartException
from tremula.popxl import dtypes
from tremula.popxl._ir.attr_rules import (
    accumulate_attrs,
    accumulator_scale_attrs,
    arg_extrema_attrs,
    clip_attrs,
    copy_var_update_attrs,
    cumsum_attrs,
    dropout_attrs,
    dynamic_attrs,
    group_norm_attrs,
    histogram_attrs,
    increment_mod_attrs,
    matmul_attrs,
    nll_attrs,
    onehot_attrs,
    print_tensor_attrs,
    random_attrs,
    reduce_attrs,
    remote_attrs,
    scaled_add_attrs,
    scatter_attrs,
    slice_attrs,
    sparse_accumulate_attrs,
    split_attrs,
    subsample_attrs,
    topk_attrs,
)
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
    # op/argextrema.hpp, op/topk.hpp, op/clip.hpp, op/scaledadd.hpp, op/dropout.hpp,
    # op/randomuniform.hpp / randomnormal.hpp, op/incrementmod.hpp, op/histogram.hpp,
    # op/groupnorm.hpp, op/nll.hpp, op/slice.hpp, op/subsample.hpp, op/split.hpp,
    # op/dynamic/dynamicslice.hpp / dynamicupdate.hpp, op/scatter.hpp, op/printtensor.hpp,
    # op/cumsum.hpp
    "ArgMaxOp": Constructor(("axis", "keepdims"), 2, arg_extrema_attrs),
    "ArgMinOp": Constructor(("axis", "keepdims"), 2, arg_extrema_attrs),
    "TopKOp": Constructor(
        ("k", "axis", "largest", "sorted", "available_memory_proportion"), 4, topk_attrs
    ),
    "ClipOp": Constructor(("min", "max"), 2, clip_attrs),
    "ScaledAddOp": Constructor(("scale_0", "scale_1"), 2, scaled_add_attrs, False),
    "ScaledAddLhsInplaceOp": Constructor(("scale_0", "scale_1"), 2, scaled_add_attrs, False),
    "DropoutOp": Constructor(("ratio",), 1, dropout_attrs, False),
    "RandomUniformOp": Constructor(("shape", "dataType", "high", "low"), 4, random_attrs, False),
    "RandomNormalOp": Constructor(("shape", "dataType", "mean", "scale"), 4, random_attrs, False),
    "IncrementModOp": Constructor(("increment", "modulus"), 2, increment_mod_attrs),
    "IncrementModInplaceOp": Constructor(("increment", "modulus"), 2, increment_mod_attrs),
    "HistogramOp": Constructor(("levels", "absoluteOfInput"), 2, histogram_attrs, False),
    "GroupNormOp": Constructor(("num_groups", "epsilon"), 2, group_norm_attrs, False),
    "NllOp": Constructor(
        ("ignoreIndex", "reduction", "inputIsLogProbability"), 3, nll_attrs, False
    ),
    "SliceOp": Constructor(("starts", "ends", "axes", "steps"), 2, slice_attrs),
    "SliceInplaceOp": Constructor(("starts", "ends", "axes", "steps"), 2, slice_attrs),
    "SubsampleOp": Constructor(("strides",), 1, subsample_attrs),
    "SplitOp": Constructor(("axis", "split"), 2, split_attrs),
    "DynamicSliceOp": Constructor(("axes", "sizes", "noOverlap"), 3, dynamic_attrs),
    "DynamicUpdateOp": Constructor(("axes", "sizes", "noOverlap"), 3, dynamic_attrs),
    "DynamicUpdateInplaceOp": Constructor(("axes", "sizes", "noOverlap"), 3, dynamic_attrs),
    "ScatterOp": Constructor(("axis", "available_memory_proportion"), 1, scatter_attrs),
    "PrintTensorOp": Constructor(
        ("printSelf", "printGradient", "title"), 3, print_tensor_attrs, False
    ),
    "CumSumOp": Constructor(("exclusive", "reverse"), 2, cumsum_attrs),
    # op/onehot.hpp: OnehotOp(opid, axis, settings)
    "OnehotOp": Constructor(("axis",), 1, onehot_attrs),
    # op/exchange/remoteload.hpp, remotestore.hpp: RemoteLoadOp(opid, settings, rbid)
    **{
        cls: Constructor(("remoteBufferId",), 0, remote_attrs, False)
        for cls in ("RemoteLoadOp", "RemoteLoadInplaceOp", "RemoteStoreOp")
    },
    "MatMulOp": Constructor(
        (
            "availableMemoryProportion",
            "serialization",
            "outputType",
            "partialsType",
            "enableFullyConnectedPass",
        ),
        0,
        matmul_attrs,
        False,
    ),
    # op/accumulate.hpp, op/accumulatorscale.hpp, op/copyvarupdate.hpp: no opid
    "AccumulateOp": Constructor(("type", "factor"), 2, accumulate_attrs, False),
    "AccumulatorScaleOp": Constructor(("factor",), 1, accumulator_scale_attrs, False),
    "CopyVarUpdateOp": Constructor((), 0, copy_var_update_attrs, False),
    "SparseAccumulateOp": Constructor(
        ("type", "factor", "axis"), 3, sparse_accumulate_attrs, False
    ),
}


#: every ``Reduce<X>Op`` is a PopART ``ReduceOp(opid, axes, keepdims, settings)``
_REDUCE = Constructor(("axes", "keepdims"), 2, reduce_attrs)


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
