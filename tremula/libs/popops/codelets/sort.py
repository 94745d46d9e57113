"""The sorting codelets: ``popops::Sort``, ``popops::SortKeyValue`` and ``popops::TopK``
(``popops.sort`` / ``sort_key_value`` / ``top_k``).

Their cycle estimators are ``popops/estimators.py``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popops import estimators as E


def _length(v: Any) -> int:
    lengths = v.length
    if lengths.size and not np.all(lengths == lengths[0]):
        raise ValueError(f"{v.vertex_type.name}: vertices of one compute set must share a length")
    return int(lengths[0]) if lengths.size else 1


def _descending_key(x: np.ndarray) -> np.ndarray:
    """A key whose ascending order is ``x``'s descending order (NaN still last)."""
    return -x if x.dtype.kind == "f" else ~x


class Sort(poplar.Codelet):
    """Sort consecutive runs of ``length`` elements of ``in`` into ``out``."""

    name = "popops::Sort"
    templates = ("T",)
    supervisor = True
    code_bytes = 512
    data = poplar.Input("T")
    out = poplar.Output("T")
    length = poplar.State(poplar.UNSIGNED_INT)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        x = v.data
        v.out = np.sort(x.reshape(x.shape[0], -1, _length(v)), axis=-1, kind="stable").reshape(
            x.shape
        )

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.sort_values_cycles(v)


class SortKeyValue(poplar.Codelet):
    """Permute runs of ``values`` by the stable ascending order of the matching ``keys``."""

    name = "popops::SortKeyValue"
    templates = ("TK", "TV")
    supervisor = True
    code_bytes = 640
    keys = poplar.Input("TK")
    values = poplar.Input("TV")
    out = poplar.Output("TV")
    length = poplar.State(poplar.UNSIGNED_INT)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        R, D = v.keys.shape[0], _length(v)
        order = np.argsort(v.keys.reshape(R, -1, D), axis=-1, kind="stable")
        v.out = np.take_along_axis(v.values.reshape(R, -1, D), order, axis=-1).reshape(R, -1)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.sort_key_value_cycles(v)


class TopK(poplar.Codelet):
    """The ``k`` largest (or smallest) of each run of ``length`` elements, in order, with
    their positions in the run."""

    name = "popops::TopK"
    templates = ("T",)
    supervisor = True
    code_bytes = 768
    data = poplar.Input("T")
    values = poplar.Output("T")
    indices = poplar.Output(poplar.UNSIGNED_INT)
    length = poplar.State(poplar.UNSIGNED_INT)
    k = poplar.State(poplar.UNSIGNED_INT)
    largest = poplar.State(poplar.BOOL)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        R, D, k = v.data.shape[0], _length(v), int(v.k[0]) if v.n else 0
        x = v.data.reshape(R, -1, D)
        key = _descending_key(x) if bool(v.largest[0]) else x
        order = np.argsort(key, axis=-1, kind="stable")[..., :k]
        v.values = np.take_along_axis(x, order, axis=-1).reshape(R, -1)
        v.indices = order.reshape(R, -1).astype(np.uint32)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.top_k_cycles(v)


CODELETS = (Sort, SortKeyValue, TopK)
