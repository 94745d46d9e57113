"""PopXL's ``ReplicaGrouping``: a grouping of an Ir's replicas (made by
``ir.replica_grouping`` / ``ir.replica_grouping_from_assignments``), backed by the one
grouping representation in :mod:`tremula.libs.gcl.grouping`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tremula.libs.gcl.errors import GroupingError
from tremula.libs.gcl.grouping import ReplicaGrouping as Grouping

if TYPE_CHECKING:
    from tremula.popxl.ir import Ir

_TOKEN = object()


class ReplicaGrouping:
    """Which replicas form a group (spec/popxl.md section 2)."""

    def __init__(self, *args: object, _token: object = None, **kwargs: object) -> None:
        if _token is not _TOKEN:
            raise RuntimeError(
                "ReplicaGrouping cannot be constructed directly: use "
                "ir.replica_grouping(stride, group_size) or "
                "ir.replica_grouping_from_assignments(assignment)"
            )
        self._ir: Ir = args[0]  # type: ignore[assignment]
        self._g: Grouping = args[1]  # type: ignore[assignment]

    @staticmethod
    def _wrap(ir: Ir, grouping: Grouping) -> ReplicaGrouping:
        return ReplicaGrouping(ir, grouping, _token=_TOKEN)

    @staticmethod
    def _build(ir: Ir, stride: int = 1, group_size: int | None = None) -> ReplicaGrouping:
        try:
            return ReplicaGrouping._wrap(ir, Grouping(ir.replication_factor, stride, group_size))
        except GroupingError as err:
            raise ValueError(str(err)) from None

    @staticmethod
    def _from_assignments(ir: Ir, assignment: list[int]) -> ReplicaGrouping:
        try:
            return ReplicaGrouping._wrap(
                ir, Grouping.from_assignment(list(assignment), ir.replication_factor)
            )
        except GroupingError as err:
            raise ValueError(str(err)) from None

    @property
    def grouping(self) -> Grouping:
        """The framework-neutral grouping (for gcl collectives and lowering)."""
        return self._g

    @property
    def num_replicas(self) -> int:
        return self._g.num_replicas

    @property
    def stride(self) -> int:
        if not self._g.is_const:
            raise NotImplementedError("stride of a non-constant replica grouping")
        return self._g.stride

    @property
    def group_size(self) -> int:
        return self._g.group_size

    @property
    def num_groups(self) -> int:
        return self._g.num_groups

    @property
    def assignment(self) -> list[int]:
        return self._g.assignment

    @property
    def is_const(self) -> bool:
        return self._g.is_const

    @property
    def const_rg(self) -> ReplicaGrouping:
        return self if self._g.is_const else ReplicaGrouping._wrap(self._ir, self._g.const_rg)

    @property
    def to_device_map(self) -> list[int] | None:
        return self._g.to_device_map

    @property
    def to_host_map(self) -> list[int] | None:
        return self._g.to_host_map

    def transpose(self) -> ReplicaGrouping:
        return ReplicaGrouping._wrap(self._ir, self._g.transpose())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplicaGrouping):
            raise TypeError(f"cannot compare a ReplicaGrouping with {type(other).__name__}")
        return self._ir is other._ir and self.assignment == other.assignment

    def __hash__(self) -> int:
        return hash((id(self._ir), tuple(self.assignment)))

    def __repr__(self) -> str:
        if not self.is_const:
            return f"ReplicaGrouping(assignment={self.assignment})"
        return (
            f"ReplicaGrouping(num_replicas={self.num_replicas}, stride={self.stride}, "
            f"group_size={self.group_size}, num_groups={self.num_groups})"
        )
