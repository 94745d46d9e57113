"""``adam_var_update``: apply an update term to a weight, with LAMB's trust ratio.

``r1`` and ``r2`` are the squared norms of the weight and of the update term
(``ops.lamb_square``); with ``ratio = min(sqrt(r1), max_weight_norm) / sqrt(r2)``, forced
to 1 when ``r1`` or ``r2`` is 0 (or a Tensor ``max_weight_norm`` is 0), the weight becomes
``t - learning_rate * ratio * x``. The ratio is computed in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.popxl.ops.base import defop
from tremula.popxl.ops.var_updates.utils import (
    Hyper,
    Operands,
    checked_inputs,
    create_update,
    operand,
)
from tremula.popxl.tensor import Tensor


def trust_ratio(r1: Any, r2: Any, mwn: Any, mwn_is_tensor: bool) -> np.float32:
    """LAMB's trust ratio (float32) from the squared norms; ``mwn`` None: no clipping."""
    r1, r2 = (np.float32(np.asarray(r).reshape(())) for r in (r1, r2))
    n1 = np.sqrt(r1)
    if mwn is not None:
        n1 = np.minimum(n1, np.float32(np.asarray(mwn).reshape(())))
    forced = r1 == 0 or r2 == 0 or (mwn_is_tensor and float(np.asarray(mwn)) == 0)
    return np.float32(1.0) if forced else np.float32(n1 / np.sqrt(r2))


def _ref(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    t, x = arrays[0], arrays[1]
    r1, r2 = operand(attrs, arrays, "r1"), operand(attrs, arrays, "r2")
    mwn = operand(attrs, arrays, "max_weight_norm")
    ratio = trust_ratio(r1, r2, mwn, "max_weight_norm" in attrs["slots"])
    lr = np.float64(np.asarray(operand(attrs, arrays, "learning_rate")).reshape(()))
    step = (lr * np.float64(ratio)).astype(t.dtype)
    return [(t - step * np.asarray(x).astype(t.dtype)).astype(t.dtype)]


defop("AdamVarUpdate", lambda specs, a: [specs[0]], _ref, modifies=(0,), differentiable=False)


def adam_var_update(
    t: Tensor,
    x: Tensor,
    r1: Tensor,
    r2: Tensor,
    learning_rate: Hyper = None,
    max_weight_norm: Hyper = None,
) -> Tensor:
    """``t -= learning_rate * ratio * x`` in place, ``ratio`` LAMB's trust ratio from the
    squared norms ``r1`` (of ``t``) and ``r2`` (of ``x``) (module docstring).

    Args:
        t: the weight.
        x: the update term (``t``'s shape), e.g. from ``lamb_updater``.
        r1, r2: one-element tensors, the squared norms (``ops.lamb_square``).
        learning_rate: a number or a one-element Tensor.
        max_weight_norm: a number or a one-element Tensor clipping ``sqrt(r1)``; None
            does not clip.

    Returns:
        ``adam_var_update_out``, an alias of the updated ``t``.

    Raises:
        TypeError: a non-Tensor ``t``, ``x``, ``r1`` or ``r2``, or ``learning_rate`` None.
        ValueError: ``x`` not of ``t``'s shape, a norm of more than one element, or a
            tensor of another graph.
    """
    what = "adam_var_update"
    checked_inputs(t=t, x=x, r1=r1, r2=r2)
    if x.shape != t.shape:
        raise ValueError(
            f"{what}: x {x.id!r} has shape {x.shape}; it must have the shape {t.shape} of "
            f"t {t.id!r}"
        )
    for role, h in (("r1", r1), ("r2", r2), ("learning_rate", learning_rate)):
        if isinstance(h, Tensor) and h.nelms != 1:
            raise ValueError(f"{what}: {role} {h.id!r} must have one element, got {h.shape}")
    if isinstance(max_weight_norm, Tensor) and max_weight_norm.nelms != 1:
        raise ValueError(f"{what}: max_weight_norm {max_weight_norm.id!r} must be one element")
    if learning_rate is None:
        raise TypeError(f"{what}: learning_rate must be a popxl.Tensor or a number, got None")
    o = Operands(what)
    for role, tensor in (("t", t), ("x", x), ("r1", r1), ("r2", r2)):
        o.tensor(role, tensor)
    o.hyper("learning_rate", learning_rate)
    if max_weight_norm is not None:
        o.hyper("max_weight_norm", max_weight_norm)
    return create_update("AdamVarUpdate", o, "adam_var_update_out")
