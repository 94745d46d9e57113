"""PopART's optimizers: ``SGD``, ``ConstSGD`` and ``Adam``, their
hyper-parameter maps, and the weight updates they add to a training step, written with
``popxl.ops.var_updates``.

A hyper-parameter is ``(value, isConst)``: a constant is baked into the program; a
non-constant one is a scalar variable that ``updateOptimizerFromHost`` rewrites without
recompiling. With ``s = g / lossScaling`` (``g`` the gradient summed over the weight's
replica group):

* SGD: ``d = s + wd * w``; without momentum ``w -= lr * d``; with momentum
  ``v = mm * v + (1 - dm) * d`` and ``w -= lr * v`` (Nesterov: ``lr * (d + mm * v)``);
* Adam / AdamNoBias / AdaMax / Lamb / LambNoBias: moments ``m, v`` of ``s`` and the update
  of ``popxl.ops.var_updates.adam_updater`` (``lamb_updater``, ``adamax_updater``), with
  weight decay decoupled (``Decay``) or added to ``s`` (``L2Regularization``); Lamb scales
  the step by the trust ratio (``adam_var_update``).

``ClipNormSettings`` given to an optimizer clip the summed gradients of their weights by
global norm before the update.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import popxl
from tremula.errors import PopartException
from tremula.popxl import ops
from tremula.popxl._ir.core.enums import AdamMode, SGDAccumulatorAndMomentum, WeightDecayMode

__all__ = ["SGD", "Adam", "ClipNormSettings", "ConstSGD", "Optimizer"]

_VU = ops.var_updates


def _pairs(values: Mapping[str, Any], allowed: dict[str, float], kind: str) -> dict[str, Any]:
    out = {}
    for key, pair in values.items():
        if not isinstance(pair, tuple):
            raise PopartException(
                "A value in the optimizer map must be a py::tuple (in getOptimizerValueDictionary)"
            )
        if key not in allowed:
            raise PopartException(
                f"Invalid {kind} key, {key}, the allowed keys are ( {' '.join(allowed)} )"
            )
        out[key] = (float(pair[0]), bool(pair[1]))
    return out


@dataclass
class ClipNormSettings:
    """Clip the gradients of ``weightIds`` (every trainable weight when empty) by their
    global norm: when ``sqrt(sum ||g / lossScaling||^2) > maxNorm`` they are scaled by
    ``maxNorm / norm`` before the update."""

    weightIds: list[str]
    maxNorm: float

    @staticmethod
    def clipWeights(weightIds: list[str], maxNorm: float) -> ClipNormSettings:
        return ClipNormSettings(list(weightIds), float(maxNorm))

    @staticmethod
    def clipAllWeights(maxNorm: float) -> ClipNormSettings:
        return ClipNormSettings([], float(maxNorm))

    def clip(self, grads: dict[str, Any], loss_scaling: Any) -> None:
        """Scale the gradients (``{weight: gradient}``, in place) of this setting."""
        ids = self.weightIds or list(grads)
        missing = sorted(set(ids) - set(grads))
        if missing:
            raise PopartException(
                f"ClipNormSettings: {missing} are not trainable weights of the model"
            )
        squares = [ops.sumsquare(ops.cast(grads[i], popxl.float32)) for i in ids]
        norm = ops.sqrt(functools.reduce(ops.add, squares))
        if isinstance(loss_scaling, popxl.Tensor) or loss_scaling != 1.0:
            norm = ops.div(norm, loss_scaling)
        factor = ops.div(self.maxNorm, ops.maximum2(norm, popxl.constant(np.float32(self.maxNorm))))  # type: ignore[arg-type]
        for i in ids:
            grads[i] = ops.mul(grads[i], ops.cast(factor, grads[i].dtype))


class Optimizer:
    """Base of PopART's optimizers: default values, per-weight values, and the update."""

    _defaults: dict[str, float] = {}
    _kind = "Optimizer"
    _specific_keys: dict[str, str] = {}  # per-weight key -> default key

    clip_norm_settings: list[ClipNormSettings]

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.clip_norm_settings = []
        given = _pairs(values, self._defaults, self._kind)
        self._values = {k: (v, True) for k, v in self._defaults.items()} | given
        self._specific: dict[str, dict[str, tuple[float, bool]]] = {}

    def insertSpecific(self, weightId: str, values: Mapping[str, Any]) -> None:
        """Values for one weight (keys without ``default``: ``learningRate`` ...)."""
        allowed = dict.fromkeys(self._specific_keys, 0.0)
        self._specific[weightId] = _pairs(values, allowed, self._kind)

    def value(self, key: str, weight: str | None = None) -> tuple[float, bool]:
        """(value, isConst) of a default key, or of its per-weight override."""
        if weight is not None:
            for specific, default in self._specific_keys.items():
                if default == key and specific in self._specific.get(weight, {}):
                    return self._specific[weight][specific]
        return self._values[key]

    def getLossScalingVal(self) -> float:
        return self._values["lossScaling"][0]

    def lossScaling(self) -> tuple[float, bool]:
        return self._values["lossScaling"]

    def hyper(self, key: str, weight: str | None, state: dict[str, popxl.Tensor]) -> Any:
        """A hyper-parameter in the program: the number, or its scalar variable."""
        v, const = self.value(key, weight)
        return v if const else state[_hyper_name(key, weight)]

    def hyper_variables(self, weight: str) -> dict[str, float]:
        """Non-constant hyper-parameters of ``weight``: {variable name: value}."""
        keys = [*self._defaults]
        return {
            _hyper_name(k, weight): self.value(k, weight)[0]
            for k in keys
            if not self.value(k, weight)[1]
        }

    def state(self, weight: str, init: np.ndarray, groups: int) -> dict[str, np.ndarray]:
        """Optimizer state of a weight: {name: initial host data} (``init`` is the weight's
        host data, ``[groups, ...]`` when ``groups > 1``)."""
        return {}

    def apply(
        self, w: popxl.Tensor, g: popxl.Tensor, state: dict[str, popxl.Tensor], weight: str
    ) -> None:
        raise NotImplementedError

    def _check_update(self, other: Optimizer) -> None:
        if type(other) is not type(self):
            raise PopartException(
                f"updateOptimizerFromHost: the session was made with {type(self).__name__}, "
                f"got {type(other).__name__}"
            )
        for key in self._defaults:
            for w in [None, *self._specific]:
                (v0, c0), (v1, c1) = self.value(key, w), other.value(key, w)
                if c0 != c1 or (c0 and v0 != v1):
                    where = f" of {w!r}" if w else ""
                    raise PopartException(
                        f"updateOptimizerFromHost: {key}{where} is {'const' if c0 else 'not const'}"
                        f" with value {v0} in the session's optimizer; a new optimizer may only "
                        f"change non-const values"
                    )


def _hyper_name(key: str, weight: str | None) -> str:
    """The variable of a non-constant hyper-parameter: one per weight for the ``default``
    keys, one per session for the others (loss scaling)."""
    own = weight if key.startswith("default") else None
    return f"{key.removeprefix('default')}___{own or ''}"


class SGD(Optimizer):
    """PopART's ``SGD``: learning rate, weight decay, momentum, dampening, velocity scaling,
    loss scaling, Nesterov."""

    _kind = "SGD"
    _defaults = {
        "defaultLearningRate": 0.1,
        "defaultWeightDecay": 0.0,
        "defaultMomentum": 0.0,
        "defaultDampening": 0.0,
        "defaultVelocityScaling": 1.0,
        "lossScaling": 1.0,
        "nesterov": 0.0,
    }
    _specific_keys = {
        "learningRate": "defaultLearningRate",
        "weightDecay": "defaultWeightDecay",
        "momentum": "defaultMomentum",
        "dampening": "defaultDampening",
        "velocityScaling": "defaultVelocityScaling",
        "nesterov": "nesterov",
    }

    def __init__(
        self,
        values: Mapping[str, Any],
        clip_norm_settings: list[Any] | None = None,
        accumulatorAndMomentum: Any = SGDAccumulatorAndMomentum.Combined,
        accumType: Any = None,
        accl1Type: Any = None,
        debugContext: str = "sgd",
    ) -> None:
        super().__init__(values)
        self.clip_norm_settings = list(clip_norm_settings or [])

    def _momentum(self, weight: str) -> bool:
        v, const = self.value("defaultMomentum", weight)
        return v != 0.0 or not const

    def state(self, weight: str, init: np.ndarray, groups: int) -> dict[str, np.ndarray]:
        if not self._momentum(weight):
            return {}
        return {f"Accl___{weight}": np.zeros_like(init)}

    def apply(self, w: Any, g: Any, state: dict[str, Any], weight: str) -> None:
        lr = self.hyper("defaultLearningRate", weight, state)
        wd = self.hyper("defaultWeightDecay", weight, state)
        ls = self.hyper("lossScaling", None, state)
        d = ops.div(g, ls) if ls != 1.0 else g
        if wd != 0.0:
            d = ops.add(d, ops.mul(w, wd))
        if not self._momentum(weight):
            _VU.accumulate_(w, d, ops.negate(lr) if isinstance(lr, popxl.Tensor) else -lr)
            return
        v = state[f"Accl___{weight}"]
        mm = self.hyper("defaultMomentum", weight, state)
        dm = self.hyper("defaultDampening", weight, state)
        _VU.accumulator_scale_(v, mm)
        _VU.accumulate_(v, d, ops.sub(1.0, dm) if isinstance(dm, popxl.Tensor) else 1.0 - dm)  # type: ignore[arg-type]
        step = v
        if self.value("nesterov", weight)[0]:
            step = ops.add(d, ops.mul(v, mm))
        _VU.accumulate_(w, step, ops.negate(lr) if isinstance(lr, popxl.Tensor) else -lr)


class ConstSGD(SGD):
    """SGD with constant learning rate, weight decay and loss scaling."""

    def __init__(
        self,
        learning_rate: float,
        weight_decay: float = 0.0,
        loss_scaling: float = 1.0,
        clip_norm_settings: list[Any] | None = None,
    ) -> None:
        super().__init__(
            {
                "defaultLearningRate": (learning_rate, True),
                "defaultWeightDecay": (weight_decay, True),
                "lossScaling": (loss_scaling, True),
            },
            clip_norm_settings,
        )


class Adam(Optimizer):
    """PopART's ``Adam`` (modes Adam, AdamNoBias, AdaMax, Lamb, LambNoBias)."""

    _kind = "Adam"
    _defaults = {
        "defaultLearningRate": 0.1,
        "defaultWeightDecay": 0.0,
        "defaultBeta1": 0.9,
        "defaultBeta2": 0.999,
        "defaultEps": 1e-6,
        "lossScaling": 1.0,
        "defaultMaxWeightNorm": 10.0,
    }
    _specific_keys = {
        "learningRate": "defaultLearningRate",
        "weightDecay": "defaultWeightDecay",
        "beta1": "defaultBeta1",
        "beta2": "defaultBeta2",
        "eps": "defaultEps",
        "maxWeightNorm": "defaultMaxWeightNorm",
    }

    def __init__(
        self,
        values: Mapping[str, Any],
        mode: Any = AdamMode.Adam,
        weight_decay_mode: Any = WeightDecayMode.Decay,
        accum_type: Any = None,
        accl1_type: Any = None,
        accl2_type: Any = None,
        clip_norm_settings: list[Any] | None = None,
        scaled_optimizer_state: bool = False,
    ) -> None:
        values = dict(values)
        if "maxWeightNorm" in values:
            values["defaultMaxWeightNorm"] = values.pop("maxWeightNorm")
        super().__init__(values)
        self.mode = AdamMode(mode)
        self.weight_decay_mode = WeightDecayMode(weight_decay_mode)
        self.clip_norm_settings = list(clip_norm_settings or [])

    def state(self, weight: str, init: np.ndarray, groups: int) -> dict[str, np.ndarray]:
        zeros = np.zeros_like(init, dtype=np.float32)
        step = np.zeros((groups,) if groups > 1 else (), np.float32)
        return {
            f"Accl1___{weight}": zeros,
            f"Accl2___{weight}": zeros.copy(),
            f"Step___{weight}": step,
        }

    def apply(self, w: Any, g: Any, state: dict[str, Any], weight: str) -> None:
        lr = self.hyper("defaultLearningRate", weight, state)
        wd = self.hyper("defaultWeightDecay", weight, state)
        b1, b2 = (self.hyper(k, weight, state) for k in ("defaultBeta1", "defaultBeta2"))
        eps = self.hyper("defaultEps", weight, state)
        ls = self.hyper("lossScaling", None, state)
        s = ops.div(g, ls) if ls != 1.0 else g
        s = ops.cast(s, popxl.float32) if s.dtype != popxl.float32 else s
        if self.weight_decay_mode == WeightDecayMode.L2Regularization and wd != 0.0:
            s = ops.add(s, ops.mul(ops.cast(w, popxl.float32), wd))
            wd = 0.0
        m, v = state[f"Accl1___{weight}"], state[f"Accl2___{weight}"]
        step = state[f"Step___{weight}"]
        _VU.accumulate_moving_average_(m, s, b1)
        bias = self.mode in (AdamMode.Adam, AdamMode.Lamb, AdamMode.AdaMax)
        if self.mode == AdamMode.AdaMax:
            _VU.copy_var_update_(v, ops.maximum2(ops.mul(v, b2), ops.abs(s)))
            x = _VU.adamax_updater(m, v, w, step, wd, b1, eps)
        else:
            _VU.accumulate_moving_average_square_(v, s, b2)
            updater = (
                _VU.lamb_updater
                if self.mode in (AdamMode.Lamb, AdamMode.LambNoBias)
                else (_VU.adam_updater)
            )
            x = updater(
                m, v, w, step if bias else None, wd, b1 if bias else None, b2 if bias else None, eps
            )
        if self.mode in (AdamMode.Lamb, AdamMode.LambNoBias):
            mwn = self.hyper("defaultMaxWeightNorm", weight, state)
            r1 = ops.sumsquare(ops.cast(w, popxl.float32))
            r2 = ops.sumsquare(ops.cast(x, popxl.float32))
            _VU.adam_var_update(w, x, r1, r2, lr, mwn)
            return
        _VU.accumulate_(w, x, ops.negate(lr) if isinstance(lr, popxl.Tensor) else -lr)
