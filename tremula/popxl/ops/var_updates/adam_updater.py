"""The optimiser update terms of ``popxl.ops.var_updates``: ``adam_updater``,
``lamb_updater`` and ``adamax_updater`` (one op type, ``AdamUpdater``, whose ``mode`` is
PopART's ``AdamMode``).

From the first and second moments ``m``, ``v`` (and the weight ``w``, step ``t``, weight
decay ``wd``, ``beta1``, ``beta2``, ``epsilon``):

1. If ``time_step`` is given it is incremented in place first (``t <- t + 1``): the
   caller's tensor changes.
2. Bias corrections ``c1 = 1 - beta1^t``, ``c2 = 1 - beta2^t`` (Adam, Lamb, and ``c1`` for
   AdaMax); 1 without ``time_step`` (the "NoBias" modes, which ignore the betas).
3. Adam / Lamb: ``x = (m / c1) / (sqrt(v / c2) + eps)`` (``eps`` outside the square root);
   AdaMax: ``x = (m / c1) / (v + eps)``.
4. ``x += wd * w`` when ``wd`` is a Tensor or a non-zero number.

``m / c1`` is cast to ``v``'s dtype, in which the rest is computed; the result has ``w``'s
dtype when ``w`` is connected (only with weight decay), else ``m``'s. LAMB's trust ratio is
applied by ``adam_var_update``.
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
from tremula.popxl.tensor import Tensor, TensorSpec

#: PopART's AdamMode values this op takes: (bias corrected, AdaMax denominator)
MODES = {
    "Adam": (True, False),
    "AdamNoBias": (False, False),
    "Lamb": (True, False),
    "LambNoBias": (False, False),
    "AdaMax": (True, True),
}


def _infer(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    slots = attrs["slots"]
    m = specs[slots["m"]]
    dtype = specs[slots["w"]].dtype if "w" in slots else m.dtype
    return [TensorSpec(m.shape, dtype)]


def reference(
    arrays: Sequence[np.ndarray], attrs: dict[str, Any], step: float | None = None
) -> np.ndarray:
    """The update term in float64 from the op's inputs; ``step`` is the time step after its
    increment (the connected one plus 1 by default)."""
    bias, adamax = MODES[attrs["mode"]]

    def get(role: str) -> Any:
        value = operand(attrs, arrays, role)
        return None if value is None else np.asarray(value, np.float64)

    m, v = arrays[attrs["slots"]["m"]], arrays[attrs["slots"]["v"]]
    if step is None and "step" in attrs["slots"]:
        step = float(get("step").reshape(())) + 1
    c1 = c2 = 1.0
    if bias:
        c1 = 1 - get("beta1").reshape(()) ** step
        c2 = 1 - get("beta2").reshape(()) ** step if not adamax else 1.0
    mc = (np.asarray(m, np.float64) / c1).astype(v.dtype).astype(np.float64)
    vw, eps = np.asarray(v, np.float64), get("epsilon").reshape(())
    x = mc / (vw + eps) if adamax else mc / (np.sqrt(vw / c2) + eps)
    if "w" in attrs["slots"]:
        x = x + get("weight_decay").reshape(()) * get("w")
    return x


def _ref(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    slots = attrs["slots"]
    dtype = arrays[slots["w"]].dtype if "w" in slots else arrays[slots["m"]].dtype
    return [reference(arrays, attrs).astype(dtype)]


defop("AdamUpdater", _infer, _ref, differentiable=False)


def _check_like(m: Tensor, what: str, **others: Tensor | None) -> None:
    for role, t in others.items():
        if t is not None and t.shape != m.shape:
            raise ValueError(
                f"{what}: {role} {t.id!r} has shape {t.shape}; it must have the shape "
                f"{m.shape} of acc_first_order {m.id!r}"
            )


def _check_scalars(what: str, **hypers: Hyper) -> None:
    for role, h in hypers.items():
        if isinstance(h, Tensor) and h.nelms != 1:
            raise ValueError(f"{what}: {role} {h.id!r} must have one element, got {h.shape}")


def _wants_decay(weight_decay: Hyper) -> bool:
    return isinstance(weight_decay, Tensor) or (weight_decay is not None and weight_decay != 0)


def _updater(
    kind: str,
    m: Tensor,
    v: Tensor,
    weight: Tensor | None,
    time_step: Tensor | None,
    weight_decay: Hyper,
    beta1: Hyper,
    beta2: Hyper,
    epsilon: Hyper,
) -> Tensor:
    what = f"{kind.lower()}_updater"
    checked_inputs(
        acc_first_order=m,
        acc_second_order=v,
        weight=weight,
        time_step=time_step,
        **({"weight_decay": weight_decay} if isinstance(weight_decay, Tensor) else {}),
    )
    decay = _wants_decay(weight_decay)
    if decay and weight is None:
        raise ValueError("Weight decay requires weight to not be None.")
    if kind == "AdaMax":
        if time_step is None:
            raise ValueError("AdaMax requires time_step to not be None.")
        mode = "AdaMax"
    else:
        if time_step is not None and (beta1 is None or beta2 is None):
            raise ValueError("Bias correction requires both beta1 and beta2 to not be None.")
        mode = kind if time_step is not None else f"{kind}NoBias"
    _check_like(m, what, acc_second_order=v, weight=weight if decay else None)
    _check_scalars(what, time_step=time_step, weight_decay=weight_decay, beta1=beta1)
    _check_scalars(what, beta2=beta2, epsilon=epsilon)
    o = Operands(what)
    o.tensor("m", m)
    o.tensor("v", v)
    if decay:
        o.tensor("w", weight)  # type: ignore[arg-type]
        o.hyper("weight_decay", weight_decay)
    if time_step is not None:
        o.tensor("step", time_step)
    o.hyper("beta1", beta1)
    if kind != "AdaMax":
        o.hyper("beta2", beta2)
    o.hyper("epsilon", epsilon)
    return create_update("AdamUpdater", o, f"{what}_out", modified=("step",), mode=mode)


def adam_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: Hyper = None,
    beta1: Hyper = None,
    beta2: Hyper = None,
    epsilon: Hyper = 1e-07,
) -> Tensor:
    """Adam's update term (module docstring); ``time_step`` is incremented in place.

    Args:
        acc_first_order: ``m``, the first moment.
        acc_second_order: ``v``, the second moment (``m``'s shape).
        weight: ``w``, needed (and connected) only with weight decay.
        time_step: the step ``t`` (one element): bias correction when given.
        weight_decay: None, a number or a one-element Tensor.
        beta1, beta2: numbers or one-element Tensors; required with ``time_step``.
        epsilon: a number or a one-element Tensor.

    Returns:
        A new tensor of ``m``'s shape, of ``w``'s dtype when ``w`` is connected, else
        ``m``'s.

    Raises:
        ValueError: "Weight decay requires weight to not be None.", "Bias correction
            requires both beta1 and beta2 to not be None.", shapes that differ, a tensor
            of another graph or IPU.
        TypeError: a non-Tensor moment, or a hyper-parameter neither Tensor nor number.
    """
    return _updater(
        "Adam", acc_first_order, acc_second_order, weight, time_step, weight_decay, beta1,
        beta2, epsilon,
    )  # fmt: skip


def lamb_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: Hyper = None,
    beta1: Hyper = None,
    beta2: Hyper = None,
    epsilon: Hyper = 1e-07,
) -> Tensor:
    """LAMB's update term: the same as :func:`adam_updater` (the trust ratio is applied by
    :func:`adam_var_update`). Arguments and errors as :func:`adam_updater`."""
    return _updater(
        "Lamb", acc_first_order, acc_second_order, weight, time_step, weight_decay, beta1,
        beta2, epsilon,
    )  # fmt: skip


def adamax_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: Hyper = None,
    beta1: Hyper = 0.9,
    epsilon: Hyper = 1e-07,
) -> Tensor:
    """AdaMax's update term ``(m / (1 - beta1^t)) / (v + eps)`` (``v`` the running
    maximum); ``time_step`` is required and incremented in place.

    Raises:
        ValueError: "AdaMax requires time_step to not be None.", and as
            :func:`adam_updater`.
    """
    return _updater(
        "AdaMax", acc_first_order, acc_second_order, weight, time_step, weight_decay, beta1,
        None, epsilon,
    )  # fmt: skip
