"""``popart._internal.ir.view``: PopART's ``Region`` of a tensor.

Tremula records in-place modification per op input (an input is written or not), so the
regions it works with are the full and the empty region of a shape; a ``Region`` given to
``addModified`` that is not empty marks the input modified. Regions built from bounds
(``Region(lower, upper)``) are kept as given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


class Region:
    """A box ``[lower, upper)`` of a tensor's index space (PopART's ``view::Region``)."""

    def __init__(self, lower: Sequence[int], upper: Sequence[int], _empty: bool = False) -> None:
        self._empty = bool(_empty)  # PopART's flag: a rank-0 region can be empty too
        self._lower = tuple(int(x) for x in lower)
        self._upper = tuple(int(x) for x in upper)
        if len(self._lower) != len(self._upper):
            raise ValueError(
                f"Region: lower {list(self._lower)} and upper {list(self._upper)} differ in rank"
            )

    @staticmethod
    def getFull(shape: Sequence[int]) -> Region:
        """The region of every element of a tensor of ``shape``."""
        return Region([0] * len(shape), list(shape))

    @staticmethod
    def getEmpty(rank: int) -> Region:
        """The region of no element (of a tensor of rank ``rank``)."""
        return Region([0] * int(rank), [0] * int(rank), _empty=True)

    def rank(self) -> int:
        return len(self._lower)

    def nelms(self) -> int:
        if self._empty:
            return 0
        return math.prod(max(0, u - l) for l, u in zip(self._lower, self._upper))

    def isEmpty(self) -> bool:
        return self.nelms() == 0

    def getLower(self) -> list[int]:
        return list(self._lower)

    def getUpper(self) -> list[int]:
        return list(self._upper)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Region):
            return NotImplemented
        if self.isEmpty() and other.isEmpty():
            return self.rank() == other.rank()
        return (self._lower, self._upper) == (other._lower, other._upper)

    def __hash__(self) -> int:
        return hash((self.rank(), None) if self.isEmpty() else (self._lower, self._upper))

    def __repr__(self) -> str:
        return f"Region(lower={list(self._lower)}, upper={list(self._upper)})"


#: PopART's name for a list of regions
Regions = list


def any_written(regions: object) -> bool:
    """Whether ``regions`` (a Region or an iterable of them) covers any element."""
    items = [regions] if isinstance(regions, Region) else list(regions)  # type: ignore[call-overload]
    for r in items:
        if not isinstance(r, Region):
            raise TypeError(f"expected popart._internal.ir.view.Region, got {type(r).__name__}")
    return any(not r.isEmpty() for r in items)
