"""The binding classes of Tremula's ops, generated from the op registry
(``tremula.popxl.ops.base.OPS``): one class per PopART op, named as PopXL's bindings name
it (``names.py``), made once on first use, with PopART's class hierarchy (family bases,
in-place classes derived from out-of-place ones: ``names.DERIVED``) and PopART's attribute
getters (``getters.py``). ``create_op`` makes
every op record as an instance of its type's class; an op type added to the registry
later (``defop``) gets its class the same way."""

from __future__ import annotations

from tremula.popxl._ir.names import DERIVED, NAMESPACE_BASES, VAR_UPDATES, op_name
from tremula.popxl._ir.op.base import Op
from tremula.popxl._ir.op.collective_base import CollectivesBaseOp
from tremula.popxl._ir.op.getters import getters
from tremula.popxl._ir.op.multi_exchange import ExchangeBaseOp, MultiExchangeOp
from tremula.popxl._ir.op.subgraph import CallOp, IfOp, IpuCopyOp, LoopOp, MatMulOp, SubgraphOp
from tremula.popxl._ir.op.var_update import AccumulateBaseOp, VarUpdateOp
from tremula.popxl.ops.base import OPS

_MODULES = {"": "popart._internal.ir.op", "exchange": "popart._internal.ir.op.exchange"}
_MODULES["collectives"] = "popart._internal.ir.op.collectives"


#: classes written out (they carry methods of their own) and family base classes
_WRITTEN: dict[str, type[Op]] = {
    "CallOp": CallOp,
    "LoopOp": LoopOp,
    "IfOp": IfOp,
    "IpuCopyOp": IpuCopyOp,
    "MatMulOp": MatMulOp,
    "MultiExchangeOp": MultiExchangeOp,
}
#: var-update ops whose PopART class is an ``AccumulateBaseOp`` (they have a factor)
_ACCUMULATES = {"Accumulate", "AccumulatorScale", "SparseAccumulate"}
BASES: dict[str, dict[str, type[Op]]] = {
    "": {
        "Op": Op,
        "SubgraphOp": SubgraphOp,
        "VarUpdateOp": VarUpdateOp,
        "AccumulateBaseOp": AccumulateBaseOp,
    },
    "exchange": {"ExchangeBaseOp": ExchangeBaseOp},
    "collectives": {"CollectivesBaseOp": CollectivesBaseOp},
}
_CLASSES: dict[str, type[Op]] = {}


def op_class(op_type: str) -> type[Op]:
    """The binding class of ops of the Tremula type ``op_type``."""
    name = op_name(op_type)
    cls = _CLASSES.get(name.cls)
    if cls is not None:
        return cls
    cls = _WRITTEN.get(name.cls)
    if cls is None:
        base = BASES[name.namespace].get(NAMESPACE_BASES.get(name.namespace, ""), Op)
        if op_type in VAR_UPDATES:
            base = AccumulateBaseOp if op_type in _ACCUMULATES else VarUpdateOp
        if op_type in DERIVED:
            base = op_class(DERIVED[op_type])
        doc = f"PopART's ``{name.cls}``: Tremula's ``{op_type}`` op (op type ``{name.op_type}``)."
        body = {"__doc__": doc, "__module__": _MODULES[name.namespace], **getters(op_type)}
        cls = type(name.cls, (base,), body)
    assert not OPS[op_type].runs_graphs or issubclass(cls, SubgraphOp)
    _CLASSES[name.cls] = cls
    return cls


def define_class(cls: type[Op]) -> type[Op]:
    """Make ``cls`` (a subclass of :class:`Op` named as PopART names its class) the binding
    class of its op type: a custom op's class written with its own binding methods. Call it
    before any op of the type is made (a class decorator)."""
    _WRITTEN[cls.__name__] = cls
    return cls


def classes_in(namespace: str) -> dict[str, type[Op]]:
    """Every binding class of ``namespace`` ("" for ``op``): the family bases and one per
    op type of the registry (ops defined later appear as they are defined)."""
    out = dict(BASES[namespace])
    for op_type in [*OPS, *DERIVED.values()]:
        if op_name(op_type).namespace == namespace:
            cls = op_class(op_type)
            out[cls.__name__] = cls
    return out


def class_named(name: str, namespace: str) -> type[Op]:
    """``popart._internal.ir.op[.namespace].<name>`` (``AttributeError`` if no such op)."""
    found = classes_in(namespace).get(name)
    if found is None:
        where = ".".join(filter(None, ("popart._internal.ir.op", namespace)))
        raise AttributeError(f"module '{where}' has no attribute '{name}'")
    return found
