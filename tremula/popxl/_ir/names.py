"""How PopART names Tremula's op types: the op type ``opType()`` returns, the binding class
(``popart._internal.ir.op.<Class>``) and the namespace that holds it (``op``,
``op.exchange``, ``op.collectives``).

One table of the types whose PopART names differ from the rule; every other type ``T`` is
PopART's ``T`` with class ``TOp`` (``<stem>Op`` where PopART's class names the op with
another word: ``Sub`` is ``SubtractOp``). In-place forms (``OpDefinition.inplace_of``) are
PopART's ``<T>Inplace``; those of binary ops are PopART's ``Lhs``
in-place ops (``AddInplace`` is ``AddLhsInplace``, class ``AddLhsInplaceOp``), as the op
writes its first input. Where PopART derives an in-place op's class from the out-of-place
op's (``RemoteLoadInplaceOp`` is a ``RemoteLoadOp``), ``DERIVED`` says so. ``INPUT_SLOTS``
gives PopART's input indices of the ops whose operands it indexes by role (the var
updates).
"""

from __future__ import annotations

from typing import NamedTuple


class OpName(NamedTuple):
    """PopART's names of a Tremula op type."""

    op_type: str  # what Op.opType() returns
    cls: str  # the binding class name
    namespace: str  # "" (popart._internal.ir.op), "exchange" or "collectives"


#: the types whose names differ from the rule
_NAMES: dict[str, OpName] = {
    "Repeat": OpName("Loop", "LoopOp", ""),
    "GroupNorm": OpName("GroupNormalization", "GroupNormOp", ""),
    "BatchNormInference": OpName("BatchNormalization", "BatchNormOp", ""),
    "OneHot": OpName("OneHot", "OnehotOp", ""),
    "SparseAccumulate": OpName("PopartSparseAccumulate", "SparseAccumulateOp", ""),
    "MatMulPow2Scaled": OpName("MatMul", "MatMulOp", ""),
    "ConvPow2Scaled": OpName("Conv", "ConvOp", ""),
    "ConvTransposePow2Scaled": OpName("ConvTranspose", "ConvTransposeOp", ""),
    "Pow2ScaleCastToFp8": OpName("Pow2ScaleThenCast", "Pow2ScaleThenCastOp", ""),
    "Pow2ScaleCastFromFp8": OpName("CastThenPow2Scale", "CastThenPow2ScaleOp", ""),
    # PopXL's nll_loss_with_softmax_grad makes PopART's fused loss-and-gradient op, whose
    # C++ class (op/nll.hpp) and op type are spelt with three l's
    "NllWithSoftmaxGrad": OpName("NlllWithSoftmaxGradDirect", "NlllWithSoftmaxGradDirectOp", ""),
    "IsNaN": OpName("IsNaN", "IsNaN", ""),
    "IsInf": OpName("IsInf", "IsInf", ""),
}

#: op types whose PopART class names the op with another word (and their in-place forms)
_CLASS_STEMS = {"Sub": "Subtract", "Neg": "Negate"}

#: binary ops whose in-place form writes the left-hand side (PopART's ``<T>LhsInplace``)
_LHS_INPLACE = {"Add", "Sub", "Mul", "Div", "Pow", "Fmod", "Max", "Min", "ScaledAdd"}

#: op types by namespace (PopART's ``op.exchange`` and ``op.collectives`` submodules)
_NAMESPACES = {
    "exchange": {
        "HostLoad",
        "HostStore",
        "RemoteLoad",
        "RemoteLoadInplace",
        "RemoteStore",
        "RemoteCodeLoad",
        "MultiExchange",
    },
    "collectives": {
        "ReplicatedAllReduce",
        "ReplicatedAllReduceInplace",
        "ReplicatedAllGather",
        "ReplicatedReduceScatter",
        "ReplicatedSlice",
        "AllReduce",
        "AllReduceIdenticalInputs",
        "AllReduceIdenticalGradInputs",
    },
}

#: the family base class each namespace's ops share, and the var-update family
NAMESPACE_BASES = {"exchange": "ExchangeBaseOp", "collectives": "CollectivesBaseOp"}
VAR_UPDATES = {
    "Accumulate",
    "AccumulatorScale",
    "SparseAccumulate",
    "CopyVarUpdate",
    "AdamVarUpdate",
}
#: op types whose PopART class derives from another op's class (C++: ``class
#: RemoteLoadInplaceOp : public RemoteLoadOp``, and so on)
DERIVED = {
    "RemoteLoadInplace": "RemoteLoad",
    "ReplicatedAllReduceInplace": "ReplicatedAllReduce",
    "DynamicUpdateInplace": "DynamicUpdate",
    "ConcatInplace": "Concat",
    "DetachInplace": "Detach",  # op/detach.hpp
    "ScaledAddInplace": "ScaledAdd",  # op/scaledadd.hpp: ScaledAddLhsInplaceOp
    "TiedGather": "Gather",  # op/tiedgather.hpp: class TiedGatherOp final : public GatherOp
    "GroupedGather": "Gather",  # PopART's grouped gather is a GatherOp with a group size
    # popxl-addons' all-reduces: ``class ReplicatedAllReduceStridedOp : public
    # ReplicatedAllReduceOp`` (and the TP one)
    "ReplicatedAllReduceStrided": "ReplicatedAllReduce",
    "ReplicatedAllReduceTP": "ReplicatedAllReduce",
}
#: ops PopART marks as optimizer ops (``Op.isOptimizerOp``): the variable updates and the
#: optimizer steps they are made from
OPTIMIZER_OPS = VAR_UPDATES | {"AdamUpdater", "LambSquare"}

#: view-changing ops, whose output is their input seen through another shape, order or
#: region: PopART's ``isOutplaceViewChange()`` (a copy) and ``isInplaceViewChange()`` (an
#: alias), op/reshape.hpp, op/transpose.hpp, op/slice.hpp
OUTPLACE_VIEW_CHANGES = frozenset({"Reshape", "Transpose", "Slice"})
INPLACE_VIEW_CHANGES = frozenset({"ReshapeInplace", "TransposeInplace", "SliceInplace"})


#: PopART's input index of each operand, by op type (Tremula's role names: ``attrs["slots"]``
#: maps a role to its position in ``op.inputs``); PopART leaves the indices of absent
#: operands unconnected (op/accumulate.hpp, op/adamupdater.hpp, op/adamvarupdate.hpp)
INPUT_SLOTS: dict[str, dict[str, int]] = {
    "Accumulate": {"t": 0, "X": 1, "f": 2},
    "AccumulatorScale": {"t": 0, "f": 2},
    "SparseAccumulate": {"t": 0, "X": 1, "f": 2, "indices": 3, "W": 4},
    "CopyVarUpdate": {"t": 0, "X": 1},
    "AdamUpdater": {
        "w": 0,
        "m": 1,
        "v": 2,
        "step": 3,
        "weight_decay": 4,
        "beta1": 5,
        "beta2": 6,
        "epsilon": 7,
    },
    "AdamVarUpdate": {
        "t": 0,
        "x": 1,
        "r1": 2,
        "r2": 3,
        "learning_rate": 4,
        "max_weight_norm": 5,
    },
}


def op_name(op_type: str) -> OpName:
    """PopART's names of the Tremula op type ``op_type``."""
    named = _NAMES.get(op_type)
    if named is not None:
        return named
    from tremula.popxl.ops.base import OPS  # the IR's op definitions

    namespace = next((ns for ns, types in _NAMESPACES.items() if op_type in types), "")
    d = OPS.get(op_type)
    base = op_type if d is None else d.outplace  # an in-place form: its out-of-place op's
    stem = _CLASS_STEMS.get(base, base)
    if base != op_type and base in _LHS_INPLACE:
        return OpName(f"{base}LhsInplace", f"{stem}LhsInplaceOp", namespace)
    suffix = "Inplace" if base != op_type else ""
    return OpName(op_type, f"{stem}{suffix}Op", namespace)
