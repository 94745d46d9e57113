"""Optimizer specs: how the host (or, in remote-buffer mode, the device) updates a table from
the gradients of its lookups.

The gradients are computed on the device, the table lives elsewhere, so the optimizer is
described apart from the model's (the model's own optimizer never touches the table). Every
spec receives, for each distinct row touched by a step, the sum of the gradients of its
repeats (summed in order of occurrence, replicas in replica order: see ``kernels.py``) and
updates that row once; rows not looked up are left alone ("lazy" updates, as TorchRec's and
TensorFlow's sparse optimizers do).

* :class:`HostEmbeddingOptimizerSpec`: SGD, ``row += -lr * g``.
* :class:`HostEmbeddingSGDGAOptimizerSpec`: the same, the gradients of ``accumulation_factor``
  steps summed and applied once, after the last of them (lookups in between see the table
  as it was).
* :class:`HostEmbeddingAdagradOptimizerSpec`: row-wise Adagrad (one accumulator per row,
  FBGEMM's ``ROWWISE_ADAGRAD``): ``a += mean(g^2)``, ``row += -lr g / (sqrt(a) + eps)``.
* :class:`HostEmbeddingAdamOptimizerSpec`: Adam on the touched rows (lazy Adam): ``m``, ``v``
  per element, bias corrections from the number of updates applied so far.

The stateful specs are applied on the host only; remote-buffer embeddings take SGD and SGD
with gradient accumulation (the device does the update).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from tremula.errors import EmbeddingError


def _number(value: Any, what: str, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise EmbeddingError(f"{what} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        need = "positive" if positive else "non-negative"
        raise EmbeddingError(f"{what} must be a finite {need} number, got {value!r}")
    return v


@dataclass(frozen=True)
class HostEmbeddingOptimizerSpec:
    """SGD with a constant learning rate: ``row += -learning_rate * sum of its gradients``.

    A learning rate of 0 means inference only (the lookups are not differentiated into
    updates), as with no spec at all.

    Args:
        learning_rate: a finite number >= 0.
        optimizer_name: ``"SGD"`` (TensorFlow's argument, keyword-only here; the only name
            this spec takes).

    Raises:
        EmbeddingError: a bad learning rate or optimizer name.
    """

    learning_rate: float
    optimizer_name: str | None = field(default=None, kw_only=True)

    #: state arrays: name -> "row" (one value per row) or "element" (one per table element)
    slots: ClassVar[dict[str, str]] = {}
    #: the device can apply it (remote-buffer embeddings)
    on_device: ClassVar[bool] = True
    _name: ClassVar[str] = "SGD"
    #: the compiled loop that computes :meth:`apply` (see :attr:`compiled_rule`)
    _compiled: ClassVar[str] = "sgd"

    def __post_init__(self) -> None:
        lr = _number(self.learning_rate, f"{type(self).__name__}: learning_rate")
        object.__setattr__(self, "learning_rate", lr)
        if self.optimizer_name not in (None, self._name):
            raise EmbeddingError(
                f"{type(self).__name__}: optimizer_name must be {self._name!r}, got "
                f"{self.optimizer_name!r}; use HostEmbeddingAdagradOptimizerSpec or "
                f"HostEmbeddingAdamOptimizerSpec for those optimizers"
            )

    @property
    def name(self) -> str:
        """The optimizer's name (``"SGD"``, ``"SGD+GA"``, ``"Adagrad"``, ``"Adam"``)."""
        return self._name

    def get_learning_rate(self) -> float:
        return self.learning_rate

    @property
    def trainable(self) -> bool:
        """Whether lookups are differentiated into updates (a learning rate other than 0)."""
        return self.learning_rate != 0

    @property
    def compiled_rule(self) -> str | None:
        """The compiled loop (``fused.py``: ``"sgd"``, ``"adagrad"``, ``"adam"``) that
        computes this spec's update with the same bits, or None when the class's ``apply``
        is not the one the loop was written for (a subclass with its own rule)."""
        cls = type(self)
        return cls._compiled if _owner(cls, "apply") is _owner(cls, "_compiled") else None

    @property
    def accumulation_factor(self) -> int:
        """The number of steps whose gradients are summed before an update is applied."""
        return 1

    def state_shapes(self, shape: tuple[int, int]) -> dict[str, tuple[int, ...]]:
        """The shapes of the optimizer's state arrays for a table of ``shape``."""
        t, e = shape
        return {k: (t,) if kind == "row" else (t, e) for k, kind in self.slots.items()}

    def initial_state(self, name: str) -> float:
        """The initial value of state array ``name``."""
        return 0.0

    def apply(
        self,
        old: np.ndarray,
        sums: np.ndarray,
        new: np.ndarray,
        state: dict[str, np.ndarray],
        step: int,
    ) -> np.ndarray:
        """The new values of a chunk of rows.

        Args:
            old: the rows' values (the table's dtype).
            sums: the rows' summed gradients (float32; may be ``new`` itself).
            new: a float32 buffer of ``old``'s shape for the result.
            state: the rows of each state array (gathered copies, updated in place).
            step: how many updates have been applied before this one.

        Returns:
            The new rows (``new``).
        """
        np.multiply(sums, self.constants(step)[0], out=new)
        new += old
        return new

    def constants(self, step: int) -> np.ndarray:
        """The float32 constants of the update after ``step`` updates (what :meth:`apply`
        and the compiled loop multiply by): ``-learning_rate``."""
        return np.array([-self.learning_rate], np.float32)

    def __str__(self) -> str:
        return f"{self.name}(learning_rate={self.learning_rate:g})"


@dataclass(frozen=True)
class HostEmbeddingSGDGAOptimizerSpec(HostEmbeddingOptimizerSpec):
    """SGD with gradient accumulation: the gradients of ``accumulation_factor`` steps are
    summed (not averaged) and applied once, ``row += -learning_rate * sum``, after the last
    of them; lookups in between see the table as it was. A factor of 1 is plain SGD.

    Args:
        learning_rate: a finite number >= 0.
        accumulation_factor: an integer >= 1.

    Raises:
        EmbeddingError: a bad learning rate or factor.
    """

    learning_rate: float
    accumulation_factor: int = 1  # type: ignore[assignment]

    def __post_init__(self) -> None:
        super().__post_init__()
        f = self.accumulation_factor
        if isinstance(f, bool) or not isinstance(f, (int, np.integer)) or f < 1:
            raise EmbeddingError(
                f"HostEmbeddingSGDGAOptimizerSpec: accumulation_factor must be an integer >= 1, "
                f"got {f!r}"
            )
        object.__setattr__(self, "accumulation_factor", int(f))

    @property
    def name(self) -> str:
        return "SGD+GA" if self.accumulation_factor > 1 else "SGD"

    def get_accumulation_factor(self) -> int:
        return self.accumulation_factor

    def __str__(self) -> str:
        return (
            f"{self.name}(learning_rate={self.learning_rate:g}, "
            f"accumulation_factor={self.accumulation_factor})"
        )


@dataclass(frozen=True)
class HostEmbeddingAdagradOptimizerSpec(HostEmbeddingOptimizerSpec):
    """Row-wise Adagrad (one accumulator per row): ``a += mean(g^2)``, then
    ``row += -learning_rate * g / (sqrt(a) + eps)``, ``g`` the row's summed gradient.

    Args:
        learning_rate: a finite number >= 0.
        initial_accumulator_value: the accumulators' starting value (>= 0).
        eps: added to the square root (> 0).
    """

    learning_rate: float
    initial_accumulator_value: float = 0.0
    eps: float = 1e-8

    slots: ClassVar[dict[str, str]] = {"accumulator": "row"}
    on_device: ClassVar[bool] = False
    _name: ClassVar[str] = "Adagrad"
    _compiled: ClassVar[str] = "adagrad"

    def __post_init__(self) -> None:
        super().__post_init__()
        who = "HostEmbeddingAdagradOptimizerSpec"
        init = _number(self.initial_accumulator_value, f"{who}: initial_accumulator_value")
        object.__setattr__(self, "initial_accumulator_value", init)
        object.__setattr__(self, "eps", _number(self.eps, f"{who}: eps", positive=True))

    def initial_state(self, name: str) -> float:
        return self.initial_accumulator_value

    def apply(
        self,
        old: np.ndarray,
        sums: np.ndarray,
        new: np.ndarray,
        state: dict[str, np.ndarray],
        step: int,
    ) -> np.ndarray:
        acc = state["accumulator"]
        acc += np.mean(np.square(sums, dtype=np.float32), axis=1)
        lr, eps = self.constants(step)
        scale = lr / (np.sqrt(acc) + eps)
        np.multiply(sums, scale[:, None], out=new)
        new += old
        return new

    def constants(self, step: int) -> np.ndarray:
        """The float32 constants of the update: ``-learning_rate, eps``."""
        return np.array([-self.learning_rate, self.eps], np.float32)

    def __str__(self) -> str:
        return f"Adagrad(learning_rate={self.learning_rate:g}, eps={self.eps:g})"


@dataclass(frozen=True)
class HostEmbeddingAdamOptimizerSpec(HostEmbeddingOptimizerSpec):
    """Adam on the rows a step touches: ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
    ``row += -learning_rate * (m / (1 - b1^k)) / (sqrt(v / (1 - b2^k)) + eps)`` with ``k``
    the number of updates applied so far, this one included.

    Args:
        learning_rate: a finite number >= 0.
        beta1, beta2: in ``[0, 1)``.
        eps: added to the square root (> 0).
    """

    learning_rate: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    slots: ClassVar[dict[str, str]] = {"m": "element", "v": "element"}
    on_device: ClassVar[bool] = False
    _name: ClassVar[str] = "Adam"
    _compiled: ClassVar[str] = "adam"

    def __post_init__(self) -> None:
        super().__post_init__()
        who = "HostEmbeddingAdamOptimizerSpec"
        for name in ("beta1", "beta2"):
            b = _number(getattr(self, name), f"{who}: {name}")
            if b >= 1:
                raise EmbeddingError(f"{who}: {name} must be in [0, 1), got {b!r}")
            object.__setattr__(self, name, b)
        object.__setattr__(self, "eps", _number(self.eps, f"{who}: eps", positive=True))

    def apply(
        self,
        old: np.ndarray,
        sums: np.ndarray,
        new: np.ndarray,
        state: dict[str, np.ndarray],
        step: int,
    ) -> np.ndarray:
        m, v = state["m"], state["v"]
        b1, c1, b2, c2, lr, bias2, eps = self.constants(step)
        m *= b1
        m += c1 * sums
        v *= b2
        v += c2 * np.square(sums)
        denom = np.sqrt(v / bias2) + eps
        np.divide(m, denom, out=new)
        new *= lr
        new += old
        return new

    def constants(self, step: int) -> np.ndarray:
        """The float32 constants of the update after ``step`` updates: ``b1, 1 - b1, b2,
        1 - b2, -learning_rate / (1 - b1^k), 1 - b2^k, eps`` with ``k = step + 1``."""
        b1, b2, k = np.float32(self.beta1), np.float32(self.beta2), step + 1
        lr = -np.float32(self.learning_rate / (1 - self.beta1**k))
        bias2 = np.float32(1 - self.beta2**k)
        return np.array([b1, 1 - b1, b2, 1 - b2, lr, bias2, self.eps], np.float32)

    def __str__(self) -> str:
        return (
            f"Adam(learning_rate={self.learning_rate:g}, beta1={self.beta1:g}, "
            f"beta2={self.beta2:g}, eps={self.eps:g})"
        )


Spec = HostEmbeddingOptimizerSpec


def _owner(cls: type, name: str) -> type:
    """The class of ``cls``'s MRO that defines attribute ``name``."""
    return next(c for c in cls.__mro__ if name in c.__dict__)


def check_spec(spec: Any, where: str) -> Spec | None:
    """``spec`` if it is a spec (or None); EmbeddingError otherwise."""
    if spec is None or isinstance(spec, HostEmbeddingOptimizerSpec):
        return spec
    raise EmbeddingError(
        f"{where}: optimizer_spec must be None or a HostEmbeddingOptimizerSpec (SGD, SGD+GA, "
        f"Adagrad, Adam), got {type(spec).__name__}"
    )
