"""PopART's ``VariableSettings``: how a weight is shared by groups of replicas and how it is
read back.

The counting rules are PopART's: ``getGroupCount`` floors (divisibility is checked when a
grouping is built: lowering, ``groups``, ``getReplicaGrouping``), and a group size of 1
means one group per replica for every type. Groups themselves come from the GCL grouping.
"""

from __future__ import annotations

import operator
from typing import Any

from tremula.errors import PopartException, PopartInternalException
from tremula.libs.gcl.grouping import CommGroup as GclCommGroup
from tremula.popxl._ir.core.enums import CommGroupType, VariableRetrievalMode
from tremula.popxl._ir.core.grouping import CommGroup, ReplicaGrouping
from tremula.popxl._ir.core.log import LOG

__all__ = ["VariableSettings"]

_VS = "`popart::VariableSettings`"
_ALL, _CONS, _ORTH, _NONE = (
    CommGroupType.ALL,
    CommGroupType.CONSECUTIVE,
    CommGroupType.ORTHOGONAL,
    CommGroupType.NONE,
)


def _mode(value: Any) -> Any:
    try:
        return VariableRetrievalMode(int(value))
    except (TypeError, ValueError):
        raise PopartException(
            f"VariableSettings: {value!r} is not a popart.VariableRetrievalMode"
        ) from None


def _count(value: Any, what: str) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        n = 0
    if n < 1:
        raise PopartException(f"The {what} in a {_VS} must be a positive integer.")
    return n


class VariableSettings:
    """How a weight is held across replicas: a ``CommGroup`` (or a stride and group size)
    and a ``VariableRetrievalMode``.

    Constructors: ``VariableSettings()``; ``VariableSettings(commGroup)``;
    ``VariableSettings(retrievalMode)``; ``VariableSettings(commGroup, retrievalMode)``;
    ``VariableSettings(stride, groupSize, retrievalMode)``. All but the first verify.

    Raises:
        PopartException: a stride or group size that is not a positive integer.
        PopartInternalException: "VariableSettings had N errors!" (a Consecutive or
            Orthogonal CommGroup of size 0).
    """

    __slots__ = ("_comm", "_mode", "_size", "_stride")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        comm = kwargs.pop("sharedVariableDomain_", kwargs.pop("sharedVariableDomain", None))
        mode = kwargs.pop("retrievalMode_", kwargs.pop("retrievalMode", None))
        stride, size = kwargs.pop("stride", None), kwargs.pop("groupSize", None)
        if kwargs:
            raise TypeError(f"VariableSettings: unexpected arguments {sorted(kwargs)}")
        rest = list(args)
        if rest and isinstance(rest[0], GclCommGroup):
            comm = rest.pop(0)
        elif len(rest) >= 2 and not isinstance(rest[0], VariableRetrievalMode):
            stride, size = rest.pop(0), rest.pop(0)
        if rest:
            mode = rest.pop(0)
        if rest:
            raise TypeError(f"VariableSettings: too many arguments {rest}")
        self._mode = VariableRetrievalMode.OnePerGroup if mode is None else _mode(mode)
        if stride is not None or size is not None:
            self._comm = None
            self._stride = _count(stride, "stride")
            self._size = _count(size, "group size")
            if self._size == 1:
                self._stride = 1
        else:
            c = CommGroup() if comm is None else comm
            self._comm = CommGroup(c.type, c.replica_group_size)
            self._stride, self._size = 0, self._comm.replica_group_size
        if comm is not None or mode is not None or stride is not None:
            self.verify()

    # ---- getters ----
    def isUsingCommGroup(self) -> bool:
        return self._comm is not None

    def getSharedVariableDomain(self) -> CommGroup:
        """The CommGroup (CommGroup form only).

        Raises:
            PopartException: settings made from a stride and group size.
        """
        if self._comm is None:
            raise PopartException(
                "The variable settings were not initialised using a `popart::CommGroup` instance."
            )
        return CommGroup(self._comm.type, self._comm.replica_group_size)

    def getCommGroupType(self) -> Any:
        return self._comm.type if self._comm is not None else None

    def getRetrievalMode(self) -> Any:
        return self._mode

    def getGroupSize(self) -> int:
        """The stored group size (the CommGroup's size: 0 for All)."""
        return self._size

    def getStride(self, numReplicas: int | None = None) -> int:
        """The stored stride (0 for the CommGroup form), or with ``numReplicas`` the stride
        of the groups (Orthogonal k: R / k; 1 otherwise)."""
        if numReplicas is None:
            return self._stride
        if self._comm is None:
            return self._stride
        k = self._size
        return numReplicas // k if self._comm.type == _ORTH and k else 1

    # ---- counting (PopART's VariableSettings methods) ----
    def getGroupCount(self, numReplicas: int) -> int:
        """How many groups ``numReplicas`` replicas form (floored)."""
        R, k = int(numReplicas), self._size
        if k == 1:
            return R
        if self._comm is None:
            return R // k
        kind = self._comm.type
        if kind == _ALL:
            return 1
        if kind == _NONE:
            return R
        return R // k if k else 0

    groupCount = getGroupCount

    def numReplicasReturningVariable(self, numReplicas: int) -> int:
        """How many values ``weightsToHost`` returns: one per group, or one per replica for
        AllReplicas (and for a group size of 1)."""
        if self._size == 1 or self._mode == VariableRetrievalMode.AllReplicas:
            return int(numReplicas)
        return self.getGroupCount(numReplicas)

    def getRealGroupSize(self, numReplicas: int) -> int:
        """Replicas per group: R for All, k for Consecutive/Orthogonal, 1 for Ungrouped."""
        if self._comm is None:
            return self._size
        kind = self._comm.type
        if kind == _ALL:
            return int(numReplicas)
        return 1 if kind == _NONE else self._size

    def getGroupRepresentative(self, group: int) -> int:
        """The lowest replica of group ``group`` (whose value a OnePerGroup read returns)."""
        g = operator.index(group)
        if self._comm is None:
            s, k = self._stride, self._size
            return (g // s) * s * k + g % s
        kind = self._comm.type
        if kind == _ALL:
            return 0
        return self._size * g if kind == _CONS else g

    def getReplicaGrouping(self, numReplicas: int) -> ReplicaGrouping:
        """The grouping of ``numReplicas`` replicas.

        Raises:
            PopartException: a group size or stride that does not divide the replicas.
        """
        R = int(numReplicas)
        if self._comm is not None and self._comm.type in (_CONS, _ORTH) and R % self._size:
            raise PopartException(
                f"VariableSettings: the group size {self._size} of "
                f"CommGroup({self._comm.type.name.capitalize()}, {self._size}) does not "
                f"divide the replication factor {R}"
            )
        return ReplicaGrouping(R, self.getStride(R), self.getRealGroupSize(R))

    def groups(self, numReplicas: int) -> list[list[int]]:
        """The replicas of each group, in order."""
        return self.getReplicaGrouping(numReplicas).grouping.groups()

    # ---- shapes (a leading group dimension when there is more than one group) ----
    def shapeOnReplica(self, full_shape: Any, numReplicas: int, name: str = "") -> list[int]:
        """The shape on one replica of an initialiser of ``full_shape``: without the leading
        group axis when there are several groups.

        Raises:
            PopartInternalException: the leading dimension is not the group count.
            PopartException: a rank-0 shape with several groups (stride form).
        """
        shape = [int(d) for d in full_shape]
        G = self.getGroupCount(numReplicas)
        if G == 1:
            return shape
        if not shape:
            raise PopartException(
                f"Tensor '{name}' should have at least one dimension when used with "
                f"{_VS} with more than 1 replica groups."
            )
        if shape[0] != G:
            raise PopartInternalException(
                f"Return mismatch with possibly appended outer dimension ({shape[0]}) of "
                f'Tensor: "{name}". should match numGroups: {G}'
            )
        return shape[1:]

    def shapeOnHost(self, replica_shape: Any, numReplicas: int) -> list[int]:
        """The host (initialiser) shape: ``[G] + replica_shape`` when there are several
        groups."""
        shape = [int(d) for d in replica_shape]
        G = self.getGroupCount(numReplicas)
        return shape if G == 1 else [G, *shape]

    # ---- checks and identity ----
    def verify(self) -> None:
        """Check the settings (PopART counts the errors and logs them).

        Raises:
            PopartInternalException: "VariableSettings had N errors!".
        """
        errors = []
        if self._comm is not None and self._comm.type in (_CONS, _ORTH) and self._size == 0:
            errors.append(f"a {self._comm.type.name.capitalize()} CommGroup of size 0")
        if errors:
            for e in errors:
                LOG.error("VariableSettings: %s", e)
            raise PopartInternalException(f"VariableSettings had {len(errors)} errors!")

    def _key(self) -> tuple[Any, ...]:
        comm = None if self._comm is None else (int(self._comm.type), self._size)
        return (comm, self._stride, self._size, int(self._mode))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VariableSettings):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def describe(self) -> str:
        """A one-line description (Tremula's; PopART's Python has no repr)."""
        mode = self._mode.name
        if self._comm is None:
            return f"VariableSettings(stride={self._stride}, groupSize={self._size}, {mode})"
        return f"VariableSettings({self._comm!r}, {mode})"
