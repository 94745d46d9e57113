"""PopART's autodiff records: ``ExpectedConnection``, ``ExpectedConnectionType`` and
``BwdGraphInfo`` (what ``GradGraphInfo._from_pb`` and ``ExpectedConnection._from_pb`` take).

``ExpectedConnectionType`` is PopXL's own enum (``popxl.transforms.autodiff``): PopXL's
enum mirrors the binding's member for member, so Tremula has one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tremula.popxl._ir.graph import GraphId
from tremula.popxl.transforms.grad_info import ExpectedConnectionType


class ExpectedConnection:
    """A grad-graph input or output: the forward tensor id it is (``Fwd``), or is the
    gradient of (``FwdGrad``)."""

    def __init__(self, fwdId: str, type: ExpectedConnectionType) -> None:
        if not isinstance(type, ExpectedConnectionType):
            raise TypeError(
                f"ExpectedConnection: type must be ExpectedConnectionType.Fwd or FwdGrad, got "
                f"{type!r}"
            )
        self.fwdId = str(fwdId)
        self.type = type

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ExpectedConnection)
            and other.fwdId == self.fwdId
            and other.type is self.type
        )

    def __hash__(self) -> int:
        return hash((self.fwdId, self.type))

    def __repr__(self) -> str:
        return f"ExpectedConnection({self.fwdId!r}, {self.type!r})"


def _connections(items: Iterable[Any], what: str) -> list[ExpectedConnection]:
    out = list(items)
    for ec in out:
        if not isinstance(ec, ExpectedConnection):
            raise TypeError(
                f"BwdGraphInfo: {what} must hold popart._internal.ir.ExpectedConnection, got "
                f"{type(ec).__name__}"
            )
    return out


class BwdGraphInfo:
    """A gradient graph's id and what its inputs and outputs stand for."""

    def __init__(
        self,
        bwdGraphId: GraphId | str,
        expectedInputs: Iterable[ExpectedConnection],
        expectedOutputs: Iterable[ExpectedConnection],
    ) -> None:
        self.bwdGraphId = bwdGraphId if isinstance(bwdGraphId, GraphId) else GraphId(bwdGraphId)
        self.expectedInputs = _connections(expectedInputs, "expectedInputs")
        self.expectedOutputs = _connections(expectedOutputs, "expectedOutputs")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BwdGraphInfo) and (
            other.bwdGraphId,
            other.expectedInputs,
            other.expectedOutputs,
        ) == (self.bwdGraphId, self.expectedInputs, self.expectedOutputs)

    def __hash__(self) -> int:
        return hash(self.bwdGraphId)

    def __repr__(self) -> str:
        return (
            f"BwdGraphInfo({self.bwdGraphId!r}, expectedInputs={self.expectedInputs}, "
            f"expectedOutputs={self.expectedOutputs})"
        )
