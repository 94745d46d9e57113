"""``popart._internal.ir.op.exchange``: the binding classes of Tremula's exchange ops
(generated from the op registry, see ``classes.py``; ``MultiExchangeOp`` and the family base
are written out in ``multi_exchange.py``)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from tremula.popxl._ir.op.classes import class_named

    return class_named(name, "exchange")


def __dir__() -> list[str]:
    from tremula.popxl._ir.op.classes import classes_in

    return sorted(classes_in("exchange"))
