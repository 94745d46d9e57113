"""popops::Fill: every element set to one value (``popops.fill`` / ``zero``).

Their cycle estimators are ``popops/estimators.py``'s.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popops import estimators as E


class Fill(poplar.Codelet):
    """out[:] = value."""

    name = "popops::Fill"
    templates = ("T",)
    out = poplar.Output("T")
    value = poplar.State("T")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        values = v.value
        out = v["out"]
        if values.size and bool(np.all((values == values[0]) | (values != values))):
            out[...] = values[0]  # one fill call: every vertex holds the same value
        else:
            out[...] = v.expand(values, "out")

    @staticmethod
    def prepare(v: poplar.Batch) -> Any:
        """The fill for later runs (its values are state: fixed): one assignment of the
        value into a view of device memory, or into the field's addresses where it is not
        one run; the per-element values when the vertices hold different ones."""
        values = v.value
        if not values.size:
            return None
        if bool(np.all((values == values[0]) | (values != values))):
            fill: Any = values[0]
        else:
            fill = v.expand(values, "out")
        out = v.stable_view("out")
        if out is not None:
            return partial(np.copyto, out, fill)
        found = v.stable_runs("out")
        if found is None:
            return None
        arr, starts, lengths = found
        total = int(lengths.sum())
        index = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(total)
        return partial(arr.__setitem__, (slice(None), index), fill)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.fill_cycles(v)
