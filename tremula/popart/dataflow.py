"""``DataFlow`` and ``AnchorReturnType`` (which anchors a run returns, and how many of the
batches: ``All``, ``EveryN``, ``Final``, ``Sum``), and the IO objects a
session reads and fills: ``PyStepIO`` (inputs and anchor arrays) and ``PyWeightsIO``
(weight buffers).

An anchor's host array is ``[bps, A, R]`` for ALL, ``[bps // N, A, R]`` for EVERYN and
``[R]`` for FINAL and SUM, with every dimension of size 1 dropped, then the tensor's shape
(``anchor_shape``); :func:`reduce_anchor` computes it from the values of every micro-batch.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tremula.errors import PopartException
from tremula.popxl._ir.core.enums import AnchorReturnTypeId, ExchangeStrategy, TileSet

__all__ = ["AnchorReturnType", "DataFlow", "PyStepIO", "PyWeightsIO"]

_IDS = {
    "ALL": AnchorReturnTypeId.All,
    "FINAL": AnchorReturnTypeId.Final,
    "SUM": AnchorReturnTypeId.Sum,
    "EVERYN": AnchorReturnTypeId.EveryN,
}


class AnchorReturnType:
    """What a session returns of an anchored tensor: ``"ALL"`` micro-batches, the
    ``"FINAL"`` one, their ``"SUM"``, or ``"EVERYN"`` (with a return period).

    Raises:
        PopartException: an unknown type, EVERYN without a positive period, or a period
            given to another type.
    """

    def __init__(
        self,
        artString: str,
        returnPeriod: int | None = None,
        tileSet: Any = TileSet.Compute,
        exchangeStrategy: Any = ExchangeStrategy.JustInTime,
    ) -> None:
        if isinstance(returnPeriod, TileSet):  # AnchorReturnType(s, tileSet, strategy)
            returnPeriod, tileSet, exchangeStrategy = None, returnPeriod, tileSet
        key = str(artString).upper()
        if key not in _IDS:
            raise PopartException(f"Invalid anchor return type ID supplied: {artString}")
        self._id = _IDS[key]
        self._name = artString
        if self._id == AnchorReturnTypeId.EveryN:
            if returnPeriod is None:
                raise PopartException("Must specify return period with option 'EVERYN'")
            if int(returnPeriod) <= 0:
                raise PopartException("Anchor return period must be greater than zero")
        elif returnPeriod is not None:
            raise PopartException(
                "A return period should not be supplied for this anchor return type"
            )
        self._rp = None if returnPeriod is None else int(returnPeriod)
        self.tileSet = tileSet
        self.exchangeStrategy = exchangeStrategy

    def id(self) -> Any:
        return self._id

    def rp(self) -> int:
        if self._rp is None:
            raise PopartException(
                "A return period should not be supplied for this anchor return type"
            )
        return self._rp

    def str(self) -> str:
        return self._name

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AnchorReturnType):
            return NotImplemented
        return (self._id, self._rp) == (other._id, other._rp)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> builtins.str:
        period = f", {self._rp}" if self._rp is not None else ""
        return f"AnchorReturnType({self._id.name.upper()!r}{period})"


class DataFlow:
    """Batches per step and the anchored tensors: ``DataFlow(bps, {id: art})`` or
    ``DataFlow(bps, [ids], art=AnchorReturnType("All"))``, with PopART's keywords too:
    ``DataFlow(batchesPerStep=, anchorTensors={id: art})``, ``DataFlow(batchesPerStep=,
    anchorIds=[ids], anchorReturnType=art)``.

    Raises:
        PopartException: batches per step < 1, or an EVERYN period that exceeds or does
            not divide it.
        TypeError: the anchors given twice (positionally and by keyword, or by both
            ``anchorTensors`` and ``anchorIds``).
    """

    def __init__(
        self,
        batchesPerStep: int,
        anchors: Mapping[str, AnchorReturnType] | Iterable[str] | None = None,
        art: AnchorReturnType | None = None,
        *,
        anchorTensors: Mapping[str, AnchorReturnType] | None = None,
        anchorIds: Iterable[str] | None = None,
        anchorReturnType: AnchorReturnType | None = None,
    ) -> None:
        given = [a for a in (anchors, anchorTensors, anchorIds) if a is not None]
        if len(given) > 1 or (art is not None and anchorReturnType is not None):
            raise TypeError(
                "DataFlow: the anchors are given twice (pass anchorTensors={id: "
                "AnchorReturnType}, or anchorIds=[ids] with anchorReturnType)"
            )
        anchors = given[0] if given else None
        art = art if art is not None else anchorReturnType
        if isinstance(anchors, Mapping):
            self._anchors = dict(anchors)
        else:
            art = art if art is not None else AnchorReturnType("All")
            self._anchors = {str(a): art for a in (anchors or [])}
        self.setBatchesPerStep(batchesPerStep)

    def setBatchesPerStep(self, batchesPerStep: int) -> None:
        bps = int(batchesPerStep)
        if bps <= 0:
            raise PopartException("'Batches per step' must be greater than zero")
        for art in self._anchors.values():
            if art.id() == AnchorReturnTypeId.EveryN:
                if art.rp() > bps:
                    raise PopartException(
                        "Return period must be <= to the number of batches per step"
                    )
                if bps % art.rp():
                    raise PopartException(
                        "Return period must be a factor of the number of batches per step"
                    )
        self._bps = bps

    def anchors(self) -> list[str]:
        return list(self._anchors)

    def art(self, anchorId: str) -> AnchorReturnType:
        if anchorId not in self._anchors:
            raise PopartException(f"Tensor {anchorId} is not an anchor of this DataFlow")
        return self._anchors[anchorId]

    def batchesPerStep(self) -> int:
        return self._bps

    def isAnchored(self, anchorId: str) -> bool:
        return anchorId in self._anchors

    def nAnchors(self) -> int:
        return len(self._anchors)


def anchor_lead(art: AnchorReturnType, bps: int, A: int, R: int) -> tuple[int, ...]:
    """The leading dims of an anchor's host array (size-1 dims dropped)."""
    kind = art.id()
    if kind == AnchorReturnTypeId.All:
        dims = (bps, A, R)
    elif kind == AnchorReturnTypeId.EveryN:
        dims = (bps // art.rp(), A, R)
    else:
        dims = (R,)  # type: ignore[assignment]
    return tuple(d for d in dims if d != 1)


def reduce_anchor(art: AnchorReturnType, values: np.ndarray) -> np.ndarray:
    """The anchor's result from the values of every micro-batch, ``[bps, A, R, *shape]``:
    ALL keeps them, EVERYN the batches k with (k + 1) % N == 0, FINAL the last micro-batch
    and SUM their sum (per replica)."""
    kind = art.id()
    if kind == AnchorReturnTypeId.All:
        return values
    if kind == AnchorReturnTypeId.EveryN:
        return values[art.rp() - 1 :: art.rp()]
    if kind == AnchorReturnTypeId.Final:
        return values[-1, -1]
    return values.sum(axis=(0, 1), dtype=values.dtype)


class PyStepIO:
    """A run's inputs ``{id: array}`` and outputs ``{id: anchor array}`` (filled in place).

    An input array is ``[bps, A, R, *shape]`` with size-1 dims omitted (only its element
    count is checked).
    """

    def __init__(self, inputs: Mapping[str, Any], outputs: Mapping[str, np.ndarray]) -> None:
        self.inputs = dict(inputs)
        self.outputs = dict(outputs)

    def enableRuntimeAsserts(self, value: bool) -> None:
        """Accepted as in PopART; the arrays' element counts are checked on every step."""


class PyWeightsIO:
    """Weight buffers ``{id: array}`` that ``readWeights`` fills and ``writeWeights`` reads.

    Raises:
        PopartException: an array that is not C-contiguous.
    """

    def __init__(self, weights: Mapping[str, np.ndarray]) -> None:
        for tid, arr in weights.items():
            if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous:
                raise PopartException(
                    f"PyWeightsIO is unable to use the provided numpy output array for tensor "
                    f"'{tid}' as it is not c-contiguous. Please use a function like "
                    f"`numpy.ascontiguousarray()` to make contiguous before passing to "
                    f"PyWeightsIO"
                )
        self.weights = dict(weights)
