"""``interpolate``: ONNX Resize with ``"nearest"``, ``"linear"`` and ``"cubic"`` modes over
any axes (PopXL's ``interpolate``, PopART's ResizeOp).

Each axis is resized on its own: output position ``x`` maps to the input coordinate given
by ``coordinate_transformation_mode`` (``half_pixel``, ``pytorch_half_pixel``,
``align_corners``, ``asymmetric``, ``tf_crop_and_resize`` with the whole input as region);
nearest rounds it by ``nearest_mode`` (``round_prefer_floor``, ``round_prefer_ceil``,
``floor``, ``ceil``), linear blends the two neighbours, cubic four (Keys' kernel with
``a = -0.75``, ONNX's default), the input's edge values standing in for positions outside
it. The taps and weights depend only on the shapes, so they are computed when the graph is
built (:func:`axis_plan`) and the device gathers and blends.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.tensor import Tensor, TensorSpec

MODES = ("nearest", "linear", "cubic")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
COORDINATES = (
    "half_pixel",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
CUBIC_A = -0.75


def _coordinates(n_in: int, n_out: int, scale: float, mode: str) -> np.ndarray:
    x = np.arange(n_out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return x / scale
    if n_out > 1:  # align_corners, tf_crop_and_resize over the region [0, 1]
        return x * (n_in - 1) / (n_out - 1)
    return np.full(n_out, 0.0 if mode == "align_corners" else 0.5 * (n_in - 1))


def _cubic(d: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution kernel at distances ``d``."""
    d, a = np.abs(d), CUBIC_A
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def axis_plan(n_in: int, n_out: int, scale: float, a: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """``(idx, w)``, each ``[taps, n_out]``: output position ``j`` is
    ``sum_k w[k, j] * x[idx[k, j]]`` (one tap for nearest, two for linear, four for
    cubic)."""
    c = _coordinates(n_in, n_out, scale, a["coordinate_transformation_mode"])
    if a["mode"] == "nearest":
        rounding: dict[str, Callable[[np.ndarray], np.ndarray]] = {
            "round_prefer_floor": lambda v: np.ceil(v - 0.5),
            "round_prefer_ceil": lambda v: np.floor(v + 0.5),
            "floor": np.floor,
            "ceil": np.ceil,
        }
        rnd = rounding[a["nearest_mode"]]
        i0 = np.clip(rnd(c), 0, n_in - 1).astype(np.int64)
        return i0[None], np.ones((1, n_out))
    if a["mode"] == "linear":
        c = np.clip(c, 0, n_in - 1)
        i0 = np.floor(c).astype(np.int64)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return np.stack([i0, i1]), np.stack([1 - (c - i0), c - i0])
    base = np.floor(c).astype(np.int64)
    offsets = np.arange(-1, 3)[:, None]
    return np.clip(base + offsets, 0, n_in - 1), _cubic(c - base - offsets)


def _ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    v = x[0].astype(np.float64)
    for ax, (n_out, scale) in enumerate(zip(a["shape"], a["scales"])):
        if n_out == v.shape[ax] and scale == 1.0:
            continue
        idx, w = axis_plan(v.shape[ax], n_out, scale, a)
        shape = [-1 if d == ax else 1 for d in range(v.ndim)]
        v = sum(np.take(v, i, axis=ax) * wk.reshape(shape) for i, wk in zip(idx, w))
    return [v.astype(x[0].dtype)]


defop("Resize", lambda specs, a: [TensorSpec(a["shape"], specs[0].dtype)], _ref)


def interpolate(
    t: Tensor,
    scale_factor: Iterable[float] | None = (1.0, 1.0, 1.0, 1.0),
    mode: str = "nearest",
    nearest_mode: str = "round_prefer_floor",
    coordinate_transformation_mode: str = "half_pixel",
    *,
    output_size: Iterable[int] | None = None,
) -> Tensor:
    """Resize ``t`` (every axis; usually ``[N, C, H, W]``) by ``scale_factor`` (one per
    axis; output size ``floor(size * scale)``).

    Args:
        t: the tensor (float for linear and cubic modes).
        scale_factor: one factor per axis.
        mode: ``"nearest"``, ``"linear"`` or ``"cubic"``.
        nearest_mode: how nearest rounds (module docstring).
        coordinate_transformation_mode: how output positions map to input coordinates.
        output_size: (a Tremula extension, ONNX Resize's ``sizes``) the output shape
            instead of ``scale_factor``; the scales are then ``output / input``.

    Raises:
        ValueError: "interpolate type X is not valid" for an unknown mode, nearest mode or
            coordinate transformation mode.
        popart.popart_exception: (also a ``ValueError``) factors or sizes not one per
            axis, or not positive.
        TypeError: non-float ``t`` for linear or cubic modes,
            when the session lowers it (PopART makes the op with any dtype).
    """
    check_tensor(t, "interpolate")
    for arg, value, allowed in (
        ("mode", mode, MODES),
        ("nearest_mode", nearest_mode, NEAREST),
        ("coordinate_transformation_mode", coordinate_transformation_mode, COORDINATES),
    ):
        if value not in allowed:
            raise ValueError(
                f"interpolate type {value} is not valid for {arg}: it must be one of "
                f"{', '.join(allowed)}"
            )
    if output_size is not None:
        shape = tuple(int(s) for s in output_size)
        scales = tuple(o / i if i else 1.0 for o, i in zip(shape, t.shape))
    else:
        scales = tuple(float(s) for s in (scale_factor or ()))
        shape = tuple(math.floor(i * s) for i, s in zip(t.shape, scales))
    if len(shape) != t.rank or len(scales) != t.rank or min(scales + shape, default=1) <= 0:
        raise OpSetupError(
            f"interpolate: scale_factor / output_size must give one positive entry per axis "
            f"of {t.id!r} {t.shape}, got scales {scales} and sizes {shape}"
        )
    attrs = {
        "shape": shape,
        "scales": scales,
        "mode": mode,
        "nearest_mode": nearest_mode,
        "coordinate_transformation_mode": coordinate_transformation_mode,
    }
    (out,) = create_op("Resize", [t], attrs)
    return out


__all__ = ["interpolate"]
