"""``popart._internal.ir.op.collectives``: the binding classes of Tremula's collectives ops
(generated from the op registry, see ``classes.py``; the family base, ``CollectivesBaseOp``,
with PopART's getters, is in ``collective_base.py``)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from tremula.popxl._ir.op.classes import class_named

    return class_named(name, "collectives")


def __dir__() -> list[str]:
    from tremula.popxl._ir.op.classes import classes_in

    return sorted(classes_in("collectives"))
