"""The float8 codelets: ``popops::Pow2ScaleCast`` (scaled casts to and from the quarter
types) and ``popops::CheckLog2Scale`` (``popops.pow2scale_cast``).

Their cycle estimators are ``popops/estimators.py``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import ApplicationRuntimeError
from tremula.libs.popops import estimators as E
from tremula.poplar.quarter import LOG2_SCALE_MAX, LOG2_SCALE_MIN, decode, encode, format_of
from tremula.poplar.types import QuarterType, Type


def convert(
    x: np.ndarray, src: Type, dst: Type, log2_scale: Any, nan_on_overflow: Any
) -> np.ndarray:
    """``cast<dst>(x * 2^log2_scale)`` of values (codes, for quarter ``src``) of type
    ``src``; ``log2_scale`` and ``nan_on_overflow`` broadcast with ``x``."""
    if isinstance(src, QuarterType):
        value = decode(x, format_of(src), log2_scale, np.float64)
    else:
        value = scaled(x, log2_scale)
    if isinstance(dst, QuarterType):
        return encode(value, format_of(dst), 0, nan_on_overflow)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return value.astype(dst.numpy)


def scaled(x: np.ndarray, log2_scale: Any) -> np.ndarray:
    """``x * 2^log2_scale`` in float64 (exact for float and half ``x``)."""
    scale = np.clip(np.asarray(log2_scale, dtype=np.int64), -2200, 2200).astype(np.int32)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return np.ldexp(np.asarray(x, dtype=np.float64), scale)


class Pow2ScaleCast(poplar.Codelet):
    """dst = cast<DST>(src * 2^log2Scale) over one part of the output."""

    name = "popops::Pow2ScaleCast"
    templates = ("SRC", "DST")
    src = poplar.Input("SRC")
    dst = poplar.Output("DST")
    log2Scale = poplar.Input(poplar.INT, kind="scalar")
    nanOnOverflow = poplar.State(poplar.BOOL, default=True)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        scale = v.expand(v.log2Scale, "src")
        nanoo = v.expand(v.nanOnOverflow, "src")
        v["dst"] = convert(v.src, v.dtype("src"), v.dtype("dst"), scale, nanoo)

    @staticmethod
    def prepare(v: poplar.Batch) -> Any:
        """Direct views of ``src``, ``dst`` and the one scale every vertex reads (None when
        any needs a gather, or the vertices disagree on ``nanOnOverflow``)."""
        src, dst = v.stable_view("src"), v.stable_view("dst")
        scale = v.stable_scalar("log2Scale")
        nanoo = v.nanOnOverflow
        if src is None or dst is None or scale is None or not np.all(nanoo == nanoo[:1]):
            return None
        src_t, dst_t, flag = v.dtype("src"), v.dtype("dst"), bool(nanoo[0]) if nanoo.size else True

        def run() -> None:
            dst[...] = convert(src, src_t, dst_t, scale, flag)

        return run

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.pow2scale_cast_cycles(v)

    @staticmethod
    def flops(v: poplar.VertexInfo) -> np.ndarray:
        return np.zeros(v.n)


class CheckLog2Scale(poplar.Codelet):
    """Raise at run time unless log2Scale is in [-32, 31]."""

    name = "popops::CheckLog2Scale"
    log2Scale = poplar.Input(poplar.INT, kind="scalar")
    what = poplar.State(poplar.UNSIGNED_CHAR, kind="vector")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        s = np.asarray(v.log2Scale)
        bad = (s < LOG2_SCALE_MIN) | (s > LOG2_SCALE_MAX)
        if not bad.any():
            return
        r, i = (int(k) for k in np.argwhere(bad)[0])
        subject = bytes(np.asarray(v.what[i], dtype=np.uint8)).decode()
        raise ApplicationRuntimeError(
            f"{subject}: log2_scale = {int(s[r, i])} (replica {int(v.replica_ids[r])}) is "
            f"outside the float8 scale range [{LOG2_SCALE_MIN}, {LOG2_SCALE_MAX}] (6 signed "
            f"bits); give a scale in that range"
        )

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.check_log2_scale_cycles(v)


CODELETS = (Pow2ScaleCast, CheckLog2Scale)
