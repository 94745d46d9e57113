"""PopART's replica grouping classes: ``CommGroup``, ``VariableSettings`` and the C++-style
``ReplicaGrouping``.

The grouping maths is GCL's (:mod:`tremula.libs.gcl.grouping`), shared with PopXL and the
collectives: ``CommGroup`` here *is* a GCL ``CommGroup`` with PopART's names added, and
``ReplicaGrouping`` wraps a GCL grouping. What is PopART's own is its counting rules
(``getGroupCount`` floors, and a group size of 1 means one group per replica whatever the
type) and its error messages.
"""

from __future__ import annotations

import builtins
import operator
from typing import Any

from tremula.errors import PopartException
from tremula.libs.gcl import grouping as gcl
from tremula.libs.gcl.errors import GroupingError
from tremula.popxl._ir.core.enums import CommGroupType

__all__ = ["CommGroup", "CommGroupType", "ReplicaGrouping"]

_RG = "`popart::ReplicaGrouping`"


def _positive(value: Any, what: str, cls: str) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise PopartException(f"The {what} in a {cls} must be a positive integer.") from None
    if n < 1:
        raise PopartException(f"The {what} in a {cls} must be a positive integer.")
    return n


class ReplicaGrouping:
    """PopART's ``ReplicaGrouping(numReplicas, stride=1, groupSize=numReplicas)``: groups of
    ``groupSize`` replicas ``stride`` apart (``popart._internal.ir.ReplicaGrouping``).

    Raises:
        PopartException: a value that is not a positive integer, or ``numReplicas`` not
            divisible by ``stride * groupSize``.
    """

    __slots__ = ("_g", "_stride")

    def __init__(self, numReplicas: int, stride: int = 1, groupSize: int | None = None) -> None:
        n = _positive(numReplicas, "number of replicas", _RG)
        s = _positive(stride, "stride", _RG)
        size = n if groupSize is None else _positive(groupSize, "group size", _RG)
        if n % (s * size):
            raise PopartException(
                f"The number of replicas in a {_RG} must be divisible by the product of the "
                f"stride and the group size."
            )
        self._g = gcl.ReplicaGrouping(n, s, size)
        self._stride = s

    @classmethod
    def from_grouping(cls, grouping: gcl.ReplicaGrouping) -> ReplicaGrouping:
        """The PopART view of a GCL grouping (a constant one)."""
        return cls(grouping.num_replicas, grouping.stride, grouping.group_size)

    @property
    def grouping(self) -> gcl.ReplicaGrouping:
        """The GCL grouping (what collectives and PopXL use)."""
        return self._g

    def getNumReplicas(self) -> int:
        return self._g.num_replicas

    def getStride(self) -> int:
        return self._stride

    def getGroupSize(self) -> int:
        return self._g.group_size

    def getNumGroups(self) -> int:
        return self._g.num_groups

    def _check(self, value: Any, bound: int, what: str) -> int:
        i = operator.index(value)
        if not 0 <= i < bound:
            raise PopartException(f"The requested {what} is outside the valid range for '{self}'.")
        return i

    def getGroupAt(self, replica: int) -> int:
        return self._g.group_of(self._check(replica, self._g.num_replicas, "replica index"))

    def getIndexInGroupAt(self, replica: int) -> int:
        r = self._check(replica, self._g.num_replicas, "replica index")
        return self._g.index_in_group(r)

    def getReplicaAt(self, group: int, index: int) -> int:
        g = self._check(group, self._g.num_groups, "group index")
        return self._g.replica_at(g, self._check(index, self._g.group_size, "index"))

    def getReplicasAt(self, group: int) -> list[int]:
        return self._g.replicas_of(self._check(group, self._g.num_groups, "group index"))

    def getTranspose(self) -> ReplicaGrouping:
        """The grouping of the replicas with the same index in their groups.

        Raises:
            PopartException: neither stride 1 nor ``stride * groupSize == numReplicas``
                (the transpose is then not a constant-stride grouping).
        """
        n, s, k = self.getNumReplicas(), self.getStride(), self.getGroupSize()
        if s != 1 and s * k != n:
            raise PopartException(f"The transpose of '{self}' cannot be represented as a {_RG}.")
        return ReplicaGrouping.from_grouping(self._g.transpose())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplicaGrouping):
            return NotImplemented
        return self._g == other._g

    def __hash__(self) -> int:
        return hash(self._g)

    def __str__(self) -> builtins.str:
        return (
            f"ReplicaGrouping(numReplicas={self.getNumReplicas()}, stride={self.getStride()}, "
            f"groupSize={self.getGroupSize()})"
        )

    __repr__ = __str__

    def str(self) -> builtins.str:
        """``ReplicaGrouping(numReplicas=.., stride=.., groupSize=..)`` (PopART's binding of
        ``ReplicaGrouping::str``)."""
        return self.__str__()


class CommGroup(gcl.CommGroup):
    """PopART's ``CommGroup``: ``CommGroup()`` (All, 0), ``CommGroup(type,
    replicaGroupSize)`` or ``CommGroup(grouping)`` from a ``ReplicaGrouping``.

    A GCL ``CommGroup`` (so PopXL's collectives take it) with PopART's attribute names;
    ``type`` and ``replicaGroupSize`` can be set, as in PopART.
    """

    def __init__(self, type: Any = CommGroupType.ALL, replicaGroupSize: int = 0) -> None:
        if isinstance(type, (ReplicaGrouping, gcl.ReplicaGrouping)):
            grouping = type.grouping if isinstance(type, ReplicaGrouping) else type
            try:
                made = grouping.to_comm_group()
            except GroupingError:
                raise PopartException(
                    f"The '{ReplicaGrouping.from_grouping(grouping)}' cannot be converted to a "
                    f"`popart::CommGroup`."
                ) from None
            type, replicaGroupSize = made.type, made.replica_group_size
        try:
            super().__init__(type, replicaGroupSize)
        except GroupingError as err:
            raise PopartException(str(err)) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "replicaGroupSize":
            name = "replica_group_size"
        if name not in ("type", "replica_group_size"):
            raise AttributeError(f"CommGroup has no attribute {name!r}")
        fields = {"type": self.type, "replica_group_size": self.replica_group_size, name: value}
        checked = gcl.CommGroup(fields["type"], fields["replica_group_size"])  # validates
        object.__setattr__(self, name, getattr(checked, name))

    @property
    def replicaGroupSize(self) -> int:
        return self.replica_group_size

    def toReplicaGrouping(self, numReplicas: int) -> ReplicaGrouping:
        """The grouping of ``numReplicas`` replicas (All -> (R, 1, R), Consecutive k ->
        (R, 1, k), Orthogonal k -> (R, R/k, k), Ungrouped -> (R, 1, 1)).

        Raises:
            PopartException: a Consecutive/Orthogonal size that is 0 or does not divide
                the replicas.
        """
        try:
            return ReplicaGrouping.from_grouping(self.to_grouping(numReplicas))
        except GroupingError as err:
            raise PopartException(str(err)) from None

    def __hash__(self) -> int:
        return hash((int(self.type), self.replica_group_size))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, gcl.CommGroup):
            return NotImplemented
        return (self.type, self.replica_group_size) == (other.type, other.replica_group_size)

    def __repr__(self) -> str:
        kind = _TYPE_NAMES[int(self.type)]
        return f"CommGroup(type={kind}, replicaGroupSize={self.replica_group_size})"


_TYPE_NAMES = ("All", "Consecutive", "Orthogonal", "Ungrouped")  # PopART's Python names
