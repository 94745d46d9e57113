"""Random ops: ``random_uniform``, ``random_normal``, ``dropout``, ``shaped_dropout``,
``split_random_seed`` (host seeds: ``popxl.random_seed``).

A seed is a uint32 tensor of shape ``(2,)`` (one 64-bit seed), fed by an h2d stream or a
variable. The numbers come from poprand (counter-based Philox): a pure function of the seed,
the element's index and the replica. As in PopART, whose random op lowerings pass poprand the
seed modifier 0, two random ops given the same seed tensor draw the same numbers (the same
mask for two dropouts of one shape): ``split_random_seed`` gives ops seeds of their own. The
numbers do not match Poplar's bits (Tremula promises only the distributions), so these ops
have no NumPy oracle; the tests check the distributions and determinism.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError
from tremula.popxl import dtypes
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.tensor import Tensor, TensorSpec

SEED_SPEC = TensorSpec((2,), dtypes.uint32)


def _with_modifier(outs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """Record the op's poprand seed modifier in its attrs: 0, PopART's, so the numbers
    depend on the seed tensor only (a gradient op given the same seed draws the same mask;
    ops wanting other numbers take seeds from ``split_random_seed``)."""
    op = outs[0].producer
    assert op is not None
    op.attrs.setdefault("seed_modifier", 0)
    return outs


def _check_seed(seed: Any, what: str) -> Tensor:
    check_tensor(seed, what, "seed_tensor")
    if seed.dtype != dtypes.uint32 or seed.shape != (2,):
        raise ValueError(
            f"{what}: seed_tensor {seed.id!r} must be uint32 of shape (2,), got {seed.dtype} "
            f"{seed.shape}"
        )
    return seed


def _float_dtype(dtype: Any, what: str) -> dtypes.dtype:
    dt = dtypes.dtype.as_dtype(dtype)
    if dt not in (dtypes.float32, dtypes.float16):
        raise TypeError(f"{what}: dtype must be float32 or float16, got {dt}")
    return dt


def _generated(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [TensorSpec(a["shape"], a["dtype"])]


defop("RandomUniform", _generated, differentiable=False)
defop("RandomNormal", _generated, differentiable=False)


def _shape(shape: Any, what: str) -> tuple[int, ...]:
    """``shape`` as a tuple of ints.

    Raises:
        TypeError: not a sequence of integers (PopXL's ``TensorInfo`` refuses it too).
        ValueError: a negative dimension.
    """
    try:
        dims = tuple(operator.index(s) for s in shape)
    except TypeError:
        raise TypeError(f"{what}: shape must be a sequence of ints, got {shape!r}") from None
    if any(s < 0 for s in dims):
        raise ValueError(f"{what}: shape {dims} has a negative dimension")
    return dims


def _random(op: str, what: str, seed: Tensor, shape: Sequence[int], dtype: Any, **p: float):
    _check_seed(seed, what)
    attrs = {
        "shape": _shape(shape, what),
        "dtype": _float_dtype(dtype, what),
        **{k: float(v) for k, v in p.items()},
    }
    (out,) = _with_modifier(create_op(op, [seed], attrs))
    return out


def random_uniform(
    seed_tensor: Tensor,
    shape: Sequence[int],
    low: float = 0.0,
    high: float = 1.0,
    dtype: dtypes.dtype = dtypes.float32,
) -> Tensor:
    """Uniform random numbers in ``[low, high]``.

    Raises:
        ValueError: a seed that is not uint32 ``(2,)``; ``low > high``; a negative dim.
        TypeError: a dtype other than float32 / float16; a shape that is not ints.
    """
    if low > high:
        raise ValueError(f"random_uniform: low {low!r} must not exceed high {high!r}")
    return _random("RandomUniform", "random_uniform", seed_tensor, shape, dtype, low=low, high=high)


def random_normal(
    seed_tensor: Tensor,
    shape: Sequence[int],
    mean: float = 0.0,
    std: float = 1.0,
    dtype: dtypes.dtype = dtypes.float32,
) -> Tensor:
    """Normally distributed random numbers.

    Raises:
        ValueError: a seed that is not uint32 ``(2,)``; a negative ``std`` or dim.
        TypeError: a dtype other than float32 / float16; a shape that is not ints.
    """
    if std < 0:
        raise ValueError(f"random_normal: std must be >= 0, got {std!r}")
    return _random("RandomNormal", "random_normal", seed_tensor, shape, dtype, mean=mean, std=std)


defop("Dropout", lambda specs, a: [specs[0]], float_inputs=(0,))
defop("ShapedDropout", lambda specs, a: [specs[0]], float_inputs=(0,))


def _ratio(p: Any, what: str) -> float:
    p = float(p)
    if not 0.0 <= p < 1.0:  # PopART's dropout ops refuse it when made (validateRatio)
        raise OpSetupError(f"{what}: the drop probability must lie in [0, 1), got {p!r}")
    return p


def dropout(t: Tensor, seed_tensor: Tensor, p: float) -> Tensor:
    """``t`` with each element zeroed with probability ``p`` and the others scaled by
    ``1 / (1 - p)``.

    Raises:
        ValueError: ``p`` outside ``[0, 1)``; a bad seed.
        TypeError: non-float ``t``,
            when the session lowers it (PopART makes the op with any dtype).
    """
    check_tensor(t, "dropout")
    _check_seed(seed_tensor, "dropout")
    (out,) = _with_modifier(create_op("Dropout", [t, seed_tensor], {"p": _ratio(p, "dropout")}))
    return out


def shaped_dropout(t: Tensor, seed_tensor: Tensor, shape: Sequence[int], ratio: float) -> Tensor:
    """Dropout with a mask of ``shape`` broadcast over ``t`` (dropping whole rows, say):
    ``t * mask / (1 - ratio)``.

    Raises:
        ValueError: a mask shape that does not broadcast to ``t``; a bad ratio or seed.
        TypeError: a mask shape that is not ints.
    """
    check_tensor(t, "shaped_dropout")
    _check_seed(seed_tensor, "shaped_dropout")
    shape = _shape(shape, "shaped_dropout")
    try:
        ok = np.broadcast_shapes(shape, t.shape) == t.shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"shaped_dropout: mask shape {shape} does not broadcast to {t.id!r} {t.shape}"
        )
    attrs = {"shape": shape, "ratio": _ratio(ratio, "shaped_dropout")}
    (out,) = _with_modifier(create_op("ShapedDropout", [t, seed_tensor], attrs))
    return out


defop(
    "SplitRandomSeed",
    lambda specs, a: [SEED_SPEC] * a["n"],
    differentiable=False,
)


def split_random_seed(seed: Tensor, n: int = 2) -> tuple[Tensor, ...]:
    """``n`` new seeds drawn from ``seed`` (on the device): give each random op its own.

    Raises:
        ValueError: ``n < 1`` or a bad seed.
    """
    _check_seed(seed, "split_random_seed")
    if int(n) != n or n < 1:
        raise ValueError(f"split_random_seed: n must be a positive integer, got {n!r}")
    return _with_modifier(create_op("SplitRandomSeed", [seed], {"n": int(n)}))


__all__ = [
    "dropout",
    "random_normal",
    "random_uniform",
    "shaped_dropout",
    "split_random_seed",
]
