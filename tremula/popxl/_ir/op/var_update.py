"""The variable-update ops of PopXL's bindings (``ops.var_updates``) and PopART's
``OptimizerValue``, the hyperparameter they carry.

PopXL passes a hyperparameter to its C++ op as an ``OptimizerValue``: a number becomes
``OptimizerValue(f, isConst=True)``; a Tensor is connected as an input and the op gets
``OptimizerValue(0, isConst=False)`` (PopXL's ``handle_optimizer_value``). Tremula's var-update ops
keep numbers in ``attrs["values"]`` and tensors in ``attrs["slots"]``, and
``getFactor()`` reads them back in PopART's form.
"""

from __future__ import annotations

import builtins
from typing import Any

from tremula.errors import PopartException
from tremula.popxl._ir.op.base import Op


class OptimizerValue:
    """PopART's ``OptimizerValue(val=0.0, isConst=False)``: a hyperparameter's value and
    whether it is a constant (not a tensor input)."""

    def __init__(self, val: float = 0.0, isConst: bool = False) -> None:
        self._val = float(val)
        self._const = bool(isConst)

    def val(self) -> float:
        return self._val

    def isConst(self) -> bool:
        return self._const

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OptimizerValue):
            return NotImplemented
        return (self._val, self._const) == (other._val, other._const)

    def __hash__(self) -> int:
        return hash((self._val, self._const))

    def __repr__(self) -> builtins.str:
        return f"OptimizerValue(val={self._val}, isConst={self._const})"


class VarUpdateOp(Op):
    """An op that updates its first input in place (``ops.var_updates``). Its inputs have
    PopART's indices (``names.INPUT_SLOTS``: ``accumulator_scale_``'s factor is input 2)."""

    def _hyper(self, role: builtins.str) -> OptimizerValue:
        """The hyperparameter ``role`` as PopART's op holds it."""
        if role in self.attrs.get("slots", {}):
            return OptimizerValue(0.0, False)
        values = self.attrs.get("values", {})
        return OptimizerValue(values[role], True) if role in values else OptimizerValue()


class AccumulateBaseOp(VarUpdateOp):
    """PopART's ``AccumulateBaseOp``: an update with a factor ``f`` (``getFactor()``)."""

    def getFactor(self) -> OptimizerValue:
        """The factor: ``OptimizerValue(f, True)`` for a number, ``OptimizerValue(0,
        False)`` for a Tensor (then input 2) or when none was given."""
        return self._hyper("f")

    def getAccumulationType(self) -> Any:
        """PopART's ``AccumulationType`` of the update (``_ir.AccumulationType.Add``,
        ``DampenedAdd``, ... as PopXL's ``var_updates`` choose it).

        Raises:
            PopartException: an op that records none (``AccumulatorScale``: Tremula
                keeps only its factor).
        """
        from tremula.popxl._ir.core.enums import AccumulationType

        kind = self.attrs.get("type")
        if kind is None:
            raise PopartException(f"{self.debugName()} records no accumulation type")
        return AccumulationType[kind]
