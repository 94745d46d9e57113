"""Variable updates (``popxl.ops.var_updates``): in place on the first tensor."""

from __future__ import annotations

from typing import Any

from tremula.popxl.context import make_atomic
from tremula.popxl.ops.base import create_op
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.tensor import Tensor, constant


def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:
    """``t = X``."""
    if t.shape != X.shape or t.dtype != X.dtype:
        raise ValueError(
            f"copy_var_update_: {X.id!r} ({X.dtype} {X.shape}) does not match "
            f"{t.id!r} ({t.dtype} {t.shape})"
        )
    (out,) = create_op("CopyVarUpdate", [t, X])
    return out


def accumulate_(t: Tensor, X: Tensor, f: Any = None) -> Tensor:
    """``t += f * X`` (``f`` a number, a tensor, or None for 1).

    Raises:
        TypeError: ``t`` or ``X`` is not a Tensor.
        ValueError: ``X`` does not have ``t``'s shape.
    """
    check_tensor(t, "accumulate_", "t")
    check_tensor(X, "accumulate_", "X")
    if t.shape != X.shape:
        raise ValueError(
            f"accumulate_: {X.id!r} has shape {X.shape}; it must have the shape {t.shape} of "
            f"{t.id!r}, which it is added to"
        )
    factor = f if isinstance(f, Tensor) else constant(1.0 if f is None else f, t.dtype)
    (out,) = create_op("Accumulate", [t, X, factor])
    return out


__all__ = ["accumulate_", "copy_var_update_"]

make_atomic(globals(), __all__)  # a refused call adds nothing (see popxl.ops)
