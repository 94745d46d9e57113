"""popops::Cast1D: element-wise type conversion (``popops.cast``).

Their cycle estimators are ``popops/estimators.py``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popops import estimators as E
from tremula.libs.popops.elementwise_math import convert


class Cast1D(poplar.Codelet):
    """dst = cast<DST>(src) over one vector."""

    name = "popops::Cast1D"
    templates = ("SRC", "DST")
    src = poplar.Input("SRC")
    dst = poplar.Output("DST")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        out = v["dst"]
        out[...] = convert(v.src, v.dtype("dst"))

    @staticmethod
    def prepare(v: poplar.Batch) -> Any:
        """Direct views of ``src`` and ``dst`` for later runs (None when either is gathered)."""
        src, dst = v.stable_view("src"), v.stable_view("dst")
        if src is None or dst is None:
            return None
        dst_type = v.dtype("dst")

        def run() -> None:
            dst[...] = convert(src, dst_type)

        return run

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.cast_cycles(v)

    @staticmethod
    def flops(v: poplar.VertexInfo) -> np.ndarray:
        return np.zeros(v.n)
