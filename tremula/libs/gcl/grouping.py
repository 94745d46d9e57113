"""Replica groupings: which of the R replicas of a replicated graph form a group.

One representation serves every user of groups: the collectives of this library, PopXL's
``ReplicaGrouping``, PopART's ``CommGroup`` / ``VariableSettings`` and grouped variables. A
:class:`ReplicaGrouping` holds the group of each replica (its *assignment*, group ids in order
of first appearance) and, when the grouping is *constant* (every group is ``r0, r0 + stride,
..., r0 + (group_size - 1) * stride``), its stride. The rules are
PopXL's ``ReplicaGrouping``'s:

* ``ReplicaGrouping(R, stride, group_size)`` assigns, for each group in turn, the lowest
  unassigned replica and the next ``group_size - 1`` replicas ``stride`` apart;
* ``ReplicaGrouping.from_assignment`` accepts any partition into equal groups; a non-constant
  one carries ``const_rg`` (a constant grouping refining it), ``to_device_map`` and
  ``to_host_map``;
* ``transpose()`` regroups replicas by their index in their group;
* :class:`CommGroup` converts both ways with PopART's table.

Replicas in a group are ordered by replica id: a replica's *index in group* is its rank there.
"""

from __future__ import annotations

import enum
import operator
from dataclasses import dataclass
from math import gcd
from typing import Any

import numpy as np

from tremula.libs.gcl.errors import GroupingError

__all__ = ["CommGroup", "CommGroupType", "ReplicaGrouping"]


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise GroupingError(f"{what} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise GroupingError(f"{what} must be an integer, got {value!r}") from None


def _replicas(num_replicas: Any) -> int:
    r = _int(num_replicas, "num_replicas")
    if r < 1:
        raise GroupingError(f"num_replicas must be >= 1, got {r}")
    return r


def constant_assignment(num_replicas: int, stride: int, group_size: int) -> np.ndarray:
    """The group of each replica under the constant grouping ``(stride, group_size)``.

    Blocks of ``stride * group_size`` consecutive replicas hold ``stride`` interleaved groups
    each (the result of PopXL's greedy algorithm: each group in turn takes the lowest
    unassigned replica and the replicas ``stride`` apart from it; the arguments must be valid).
    """
    r = np.arange(num_replicas, dtype=np.int64)
    block = stride * group_size
    return (r // block) * stride + (r % block) % stride


class ReplicaGrouping:
    """A partition of ``num_replicas`` replicas into equal groups.

    ``ReplicaGrouping(num_replicas, stride=1, group_size=None)`` builds a constant grouping
    (``group_size`` defaults to ``num_replicas // stride``; a group size of 1 normalises the
    stride to 1). Use :meth:`from_assignment` for an arbitrary partition. Instances are
    immutable values: equal when their assignments are equal.

    Raises:
        GroupingError: unless ``0 < stride <= R``, ``stride`` divides ``R``,
            ``0 < group_size <= R`` and ``stride * group_size`` divides ``R``.
    """

    __slots__ = ("_assignment", "_const", "_index", "_matrix", "_stride")

    def __init__(self, num_replicas: int, stride: int = 1, group_size: int | None = None) -> None:
        R = _replicas(num_replicas)
        stride = _int(stride, "stride")
        if not 0 < stride <= R:
            raise GroupingError(
                f"replica grouping: stride {stride} must satisfy 0 < stride <= num_replicas ({R})"
            )
        if R % stride:
            raise GroupingError(
                f"replica grouping: stride {stride} does not divide num_replicas {R}"
            )
        size = R // stride if group_size is None else _int(group_size, "group_size")
        if not 0 < size <= R:
            raise GroupingError(
                f"replica grouping: group_size {size} must satisfy 0 < group_size <= "
                f"num_replicas ({R})"
            )
        if size == 1:
            stride = 1
        if R % (stride * size):
            raise GroupingError(
                f"replica grouping: groups of {size} replicas {stride} apart do not tile "
                f"{R} replicas (stride x group_size = {stride * size} must divide {R})"
            )
        self._set(constant_assignment(R, stride, size), stride)

    # ---- construction ----
    def _set(self, assignment: np.ndarray, stride: int | None) -> None:
        assignment = np.ascontiguousarray(assignment, dtype=np.int64)
        assignment.flags.writeable = False
        num_groups = int(assignment.max()) + 1
        matrix = np.argsort(assignment, kind="stable").reshape(num_groups, -1)
        matrix.flags.writeable = False
        index = np.empty_like(assignment)
        index[matrix] = np.arange(matrix.shape[1])
        index.flags.writeable = False
        self._assignment, self._matrix, self._index, self._stride = (
            assignment,
            matrix,
            index,
            stride,
        )
        self._const = self if stride is not None else _refining_constant(self)

    @classmethod
    def _make(cls, assignment: np.ndarray, stride: int | None) -> ReplicaGrouping:
        rg = cls.__new__(cls)
        rg._set(assignment, stride)
        return rg

    @classmethod
    def from_assignment(cls, assignment: Any, num_replicas: int | None = None) -> ReplicaGrouping:
        """The grouping where replica ``r`` is in group ``assignment[r]``.

        The result is constant (equal to ``ReplicaGrouping(R, stride, size)``) when every
        group is evenly spaced with one common stride, non-constant otherwise.

        Raises:
            GroupingError: the assignment is empty, has ``len != num_replicas``, groups of
                unequal sizes, or group ids that are not ``0..G-1`` in order of first
                appearance.
        """
        arr = _check_assignment(assignment, num_replicas)
        matrix = np.argsort(arr, kind="stable").reshape(int(arr.max()) + 1, -1)
        R, size = arr.size, matrix.shape[1]
        if size == 1:
            return cls(R, 1, 1)
        steps = np.unique(np.diff(matrix, axis=1))
        if steps.size == 1:
            stride = int(steps[0])
            if R % (stride * size) == 0 and np.array_equal(
                constant_assignment(R, stride, size), arr
            ):
                return cls(R, stride, size)
        return cls._make(arr, None)

    @classmethod
    def all(cls, num_replicas: int) -> ReplicaGrouping:
        """One group of every replica."""
        return cls(num_replicas, 1, _replicas(num_replicas))

    @classmethod
    def ungrouped(cls, num_replicas: int) -> ReplicaGrouping:
        """Every replica alone."""
        return cls(num_replicas, 1, 1)

    # ---- properties ----
    @property
    def num_replicas(self) -> int:
        return int(self._assignment.size)

    @property
    def group_size(self) -> int:
        return int(self._matrix.shape[1])

    @property
    def num_groups(self) -> int:
        return int(self._matrix.shape[0])

    @property
    def assignment(self) -> list[int]:
        """The group of each replica, as a list."""
        return self._assignment.tolist()

    @property
    def assignment_array(self) -> np.ndarray:
        """The group of each replica, ``[R]`` int64 (read-only)."""
        return self._assignment

    @property
    def group_matrix(self) -> np.ndarray:
        """``[num_groups, group_size]``: row ``g`` lists group ``g``'s replicas in order
        (read-only)."""
        return self._matrix

    @property
    def indices_in_group(self) -> np.ndarray:
        """The index of each replica in its group, ``[R]`` int64 (read-only)."""
        return self._index

    @property
    def is_const(self) -> bool:
        """Whether every group is ``r0, r0 + stride, ...`` with one stride."""
        return self._stride is not None

    @property
    def stride(self) -> int:
        """The distance between consecutive replicas of a group.

        Raises:
            NotImplementedError: the grouping is not constant.
        """
        if self._stride is None:
            raise NotImplementedError(
                f"{self!r} has no single stride (it is not a constant grouping); use its const_rg"
            )
        return self._stride

    @property
    def const_rg(self) -> ReplicaGrouping:
        """Self when constant; else the constant grouping used to hold its values (each of
        its groups lies inside one group of self)."""
        return self._const

    @property
    def to_device_map(self) -> list[int] | None:
        """For a non-constant grouping: the group of self holding each group of const_rg
        (``None`` when constant)."""
        if self.is_const:
            return None
        return self._assignment[self._const.group_matrix[:, 0]].tolist()

    @property
    def to_host_map(self) -> list[int] | None:
        """For a non-constant grouping: the first group of const_rg inside each group of
        self (``None`` when constant)."""
        device = self.to_device_map
        if device is None:
            return None
        return np.unique(np.asarray(device), return_index=True)[1].tolist()

    # ---- queries ----
    def _replica(self, r: int) -> int:
        r = _int(r, "replica")
        if not 0 <= r < self.num_replicas:
            raise GroupingError(f"replica {r} out of range for {self.num_replicas} replicas")
        return r

    def groups(self) -> list[list[int]]:
        """The replicas of each group, in order."""
        return self._matrix.tolist()

    def group_of(self, replica: int) -> int:
        return int(self._assignment[self._replica(replica)])

    def index_in_group(self, replica: int) -> int:
        return int(self._index[self._replica(replica)])

    def replicas_of(self, group: int) -> list[int]:
        g = _int(group, "group")
        if not 0 <= g < self.num_groups:
            raise GroupingError(f"group {g} out of range for {self.num_groups} groups")
        return self._matrix[g].tolist()

    def replica_at(self, group: int, index: int) -> int:
        members = self.replicas_of(group)
        i = _int(index, "index")
        if not 0 <= i < len(members):
            raise GroupingError(f"index {i} out of range for groups of {len(members)}")
        return members[i]

    def shifted(self, shift: int) -> np.ndarray:
        """``[R]``: for each replica, the replica ``shift`` places further round its group
        (index ``(i + shift) mod group_size``)."""
        dest = np.empty_like(self._assignment)
        dest[self._matrix] = np.roll(self._matrix, -int(shift), axis=1)
        return dest

    def transpose(self) -> ReplicaGrouping:
        """The grouping whose group ``i`` holds the replicas of index ``i`` in their group
        (the group matrix transposed). An involution on constant groupings."""
        return ReplicaGrouping.from_assignment(self._index)

    # ---- CommGroup ----
    def to_comm_group(self) -> CommGroup:
        """PopART's CommGroup for this grouping.

        Raises:
            GroupingError: no CommGroup describes it (non-constant, or a stride other than
                1 and the number of groups).
        """
        R, size = self.num_replicas, self.group_size
        if size == 1:
            return CommGroup(CommGroupType.NONE, 0)
        if size == R:
            return CommGroup(CommGroupType.ALL, 0)
        if self.is_const and self._stride == self.num_groups:
            return CommGroup(CommGroupType.ORTHOGONAL, size)
        if self._stride == 1:
            return CommGroup(CommGroupType.CONSECUTIVE, size)
        raise GroupingError(
            f"{self!r} has no CommGroup: a CommGroup needs stride 1 (Consecutive) or "
            f"stride == num_groups (Orthogonal), a group size of 1 or of all replicas"
        )

    @staticmethod
    def from_comm_group(group: CommGroup, num_replicas: int) -> ReplicaGrouping:
        return group.to_grouping(num_replicas)

    # ---- value semantics ----
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplicaGrouping):
            return NotImplemented
        return np.array_equal(self._assignment, other._assignment)

    def __hash__(self) -> int:
        return hash(self._assignment.tobytes())

    def __repr__(self) -> str:
        if self._stride is None:
            return f"ReplicaGrouping(assignment={self.assignment})"
        return (
            f"ReplicaGrouping(num_replicas={self.num_replicas}, stride={self._stride}, "
            f"group_size={self.group_size}, num_groups={self.num_groups})"
        )


def _check_assignment(assignment: Any, num_replicas: int | None) -> np.ndarray:
    try:
        arr = np.asarray(assignment)
    except (TypeError, ValueError):
        raise GroupingError(f"assignment {assignment!r} is not a list of group ids") from None
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
        raise GroupingError(
            f"assignment must be a non-empty list of integer group ids, got {assignment!r}"
        )
    arr = arr.astype(np.int64)
    if num_replicas is not None and arr.size != _replicas(num_replicas):
        raise GroupingError(
            f"assignment has {arr.size} entries; expected one per replica ({num_replicas})"
        )
    ids, first = np.unique(arr, return_index=True)
    if ids[0] != 0 or not np.array_equal(ids, np.arange(ids.size)) or np.any(np.diff(first) < 0):
        raise GroupingError(
            f"assignment {arr.tolist()}: group ids must be 0..G-1 numbered in order of "
            f"first appearance"
        )
    counts = np.bincount(arr)
    if np.any(counts != counts[0]):
        sizes = dict(enumerate(counts.tolist()))
        raise GroupingError(
            f"assignment {arr.tolist()}: groups must have equal sizes, got {sizes} (group: size)"
        )
    return arr


def _divisors_desc(n: int) -> list[int]:
    return [d for d in range(n, 0, -1) if n % d == 0]


def _refining_constant(rg: ReplicaGrouping) -> ReplicaGrouping:
    """The constant grouping holding a non-constant one's values (the grouping PopXL
    infers for a non-constant assignment).

    Its stride is the smallest distance between consecutive members of a group; its size
    the gcd of the lengths of the runs that stride splits the groups into. If that grouping
    does not refine ``rg`` (groups of it straddling two groups of ``rg``), smaller sizes
    and then stride 1 are tried; ``(1, 1)`` always refines.
    """
    R, m = rg.num_replicas, rg.group_matrix
    diffs = np.diff(m, axis=1)
    stride = int(diffs.min())
    breaks = diffs != stride  # a new run starts after each break
    size = 0
    for row in breaks:
        cuts = np.r_[0, np.flatnonzero(row) + 1, m.shape[1]]
        for length in np.diff(cuts).tolist():
            size = gcd(size, int(length))
    candidates = [(stride, d) for d in _divisors_desc(size)]
    candidates += [(1, d) for d in _divisors_desc(rg.group_size)]
    assign = rg.assignment_array
    for s, g in candidates:
        if g == 1:
            s = 1
        if R % (s * g):
            continue
        const = ReplicaGrouping(R, s, g)
        if np.all(assign[const.group_matrix] == assign[const.group_matrix[:, :1]]):
            return const
    return ReplicaGrouping(R, 1, 1)  # pragma: no cover - (1, 1) is the last candidate


class CommGroupType(enum.IntEnum):
    """PopART's CommGroupType: how a CommGroup's size divides the replicas."""

    ALL = 0  # one group of every replica (size ignored)
    CONSECUTIVE = 1  # blocks of k consecutive replicas
    ORTHOGONAL = 2  # k replicas R/k apart
    NONE = 3  # every replica alone (size ignored)
    UNGROUPED = 3  # alias of NONE (PopART's Python name)
    # PopART's and PopXL's Python names (``popart.CommGroupType.Consecutive``)
    All = 0
    Consecutive = 1
    Orthogonal = 2
    Ungrouped = 3


@dataclass(frozen=True)
class CommGroup:
    """PopART's ``CommGroup(type, replica_group_size)``.

    ``replica_group_size`` is ignored for ALL and NONE. Convert with :meth:`to_grouping`
    (for a replica count) and :meth:`ReplicaGrouping.to_comm_group`.
    """

    type: CommGroupType = CommGroupType.ALL
    replica_group_size: int = 0

    def __post_init__(self) -> None:
        try:
            kind = CommGroupType(self.type)
        except ValueError:
            names = ", ".join(t.name for t in CommGroupType)
            raise GroupingError(
                f"CommGroup: type {self.type!r} unknown; expected one of {names}"
            ) from None
        size = _int(self.replica_group_size, "CommGroup replica_group_size")
        if size < 0:
            raise GroupingError(f"CommGroup: replica_group_size must be >= 0, got {size}")
        object.__setattr__(self, "type", kind)
        object.__setattr__(self, "replica_group_size", size)

    def to_grouping(self, num_replicas: int) -> ReplicaGrouping:
        """The grouping of ``num_replicas`` replicas: All -> (1, R), Consecutive(k) ->
        (1, k), Orthogonal(k) -> (R / k, k), None -> (1, 1).

        Raises:
            GroupingError: a Consecutive or Orthogonal size of 0 or one that does not
                divide the replicas.
        """
        R = _replicas(num_replicas)
        if self.type == CommGroupType.ALL:
            return ReplicaGrouping(R, 1, R)
        if self.type == CommGroupType.NONE:
            return ReplicaGrouping(R, 1, 1)
        k = self.replica_group_size
        if k == 0 or R % k:
            raise GroupingError(
                f"CommGroup({self.type.name}, {k}): the group size must be positive and "
                f"divide the {R} replicas"
            )
        if self.type == CommGroupType.CONSECUTIVE:
            return ReplicaGrouping(R, 1, k)
        return ReplicaGrouping(R, R // k, k)
