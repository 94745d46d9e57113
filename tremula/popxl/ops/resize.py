"""``interpolate``: ONNX Resize with ``"nearest"`` and ``"linear"`` modes over any axes.

Each axis is resized on its own: output position ``x`` maps to the input coordinate given
by ``coordinate_transformation_mode`` (``half_pixel``, ``pytorch_half_pixel``,
``align_corners``, ``asymmetric``, ``tf_half_pixel_for_nn``); nearest rounds it by
``nearest_mode`` (``round_prefer_floor``, ``round_prefer_ceil``, ``floor``, ``ceil``),
linear blends the two neighbours. Coordinates are clamped to the input. The positions and
weights depend only on the shapes, so they are computed when the graph is built
(:func:`axis_plan`) and the device gathers and blends.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.shape import check_tensor, require_float
from tremula.popxl.tensor import Tensor, TensorSpec

MODES = ("nearest", "linear")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
COORDINATES = (
    "half_pixel",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
)


def _coordinates(n_in: int, n_out: int, scale: float, mode: str) -> np.ndarray:
    x = np.arange(n_out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    if mode == "align_corners":
        return x * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return x / scale
    return (x + 0.5) / scale  # tf_half_pixel_for_nn


def axis_plan(n_in: int, n_out: int, scale: float, a: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """``(i0, i1, w)``: output position ``j`` reads ``(1 - w[j]) x[i0[j]] + w[j] x[i1[j]]``
    (nearest: ``i1 = i0``, ``w = 0``)."""
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
        return i0, i0, np.zeros(n_out)
    c = np.clip(c, 0, n_in - 1)
    i0 = np.floor(c).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, c - i0


def _ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    v = x[0].astype(np.float64)
    for ax, (n_out, scale) in enumerate(zip(a["shape"], a["scales"])):
        if n_out == v.shape[ax] and scale == 1.0:
            continue
        i0, i1, w = axis_plan(v.shape[ax], n_out, scale, a)
        shape = [-1 if d == ax else 1 for d in range(v.ndim)]
        lo, hi = np.take(v, i0, axis=ax), np.take(v, i1, axis=ax)
        v = lo + (hi - lo) * w.reshape(shape)
    return [v.astype(x[0].dtype)]


defop("Resize", lambda specs, a: [TensorSpec(a["shape"], specs[0].dtype)], _ref)


def interpolate(
    t: Tensor,
    scale_factor: Iterable[float] | None = (1.0, 1.0, 1.0, 1.0),
    output_size: Iterable[int] | None = None,
    mode: str = "nearest",
    nearest_mode: str = "round_prefer_floor",
    coordinate_transformation_mode: str = "half_pixel",
) -> Tensor:
    """Resize ``t`` (every axis; usually ``[N, C, H, W]``) by ``scale_factor`` (one per
    axis; output size ``floor(size * scale)``) or to ``output_size`` (then the scale is
    ``output / input``).

    Raises:
        ValueError: factors or sizes not one per axis or not positive, an unknown mode.
        NotImplementedError: ``mode="cubic"``.
        TypeError: non-float ``t``.
    """
    check_tensor(t, "interpolate")
    require_float(t, "interpolate")
    if mode == "cubic":
        raise NotImplementedError("interpolate: mode 'cubic' is not implemented")
    for arg, value, allowed in (
        ("mode", mode, MODES),
        ("nearest_mode", nearest_mode, NEAREST),
        ("coordinate_transformation_mode", coordinate_transformation_mode, COORDINATES),
    ):
        if value not in allowed:
            raise ValueError(f"interpolate: {arg} must be one of {allowed}, got {value!r}")
    if output_size is not None:
        shape = tuple(int(s) for s in output_size)
        scales = tuple(o / i if i else 1.0 for o, i in zip(shape, t.shape))
    else:
        scales = tuple(float(s) for s in (scale_factor or ()))
        shape = tuple(math.floor(i * s) for i, s in zip(t.shape, scales))
    if len(shape) != t.rank or len(scales) != t.rank or min(scales + shape, default=1) <= 0:
        raise ValueError(
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
