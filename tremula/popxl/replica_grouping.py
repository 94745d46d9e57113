"""PopXL's ``ReplicaGrouping``: a grouping of an Ir's replicas (made by
``ir.replica_grouping`` / ``ir.replica_grouping_from_assignments``), backed by the one
grouping representation in :mod:`tremula.libs.gcl.grouping`.

Also the host layouts of grouped variables (a value per group on the host), as pure NumPy functions
used by ``Session``: host data (``shape_on_host``) to one row per replica and back, and the
replica-sharded (RTS) form of a value.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.libs.gcl.errors import GroupingError
from tremula.libs.gcl.grouping import ReplicaGrouping as Grouping

if TYPE_CHECKING:
    from tremula.popxl._ir.core.grouping import ReplicaGrouping as PbReplicaGrouping
    from tremula.popxl._ir.core.variable_settings import VariableSettings
    from tremula.popxl.ir import Ir

_TOKEN = object()


def retrieval_mode_of(retrieval_mode: Any, what: str) -> str:
    """``retrieval_mode`` of a grouped variable checked: ``"one_per_group"`` (also for None,
    the default) or ``"all_replicas"``.

    Raises:
        ValueError: another value (PopXL's words: "Invalid retrieval_mode value").
    """
    if retrieval_mode is None:
        return "one_per_group"
    if not isinstance(retrieval_mode, str) or retrieval_mode not in _RETRIEVAL_MODES:
        raise ValueError(
            f"Invalid retrieval_mode value: {retrieval_mode!r} ({what}: "
            f"'one_per_group' or 'all_replicas')"
        )
    return retrieval_mode


_RETRIEVAL_MODES = ("one_per_group", "all_replicas")


class ReplicaGrouping:
    """Which replicas form a group: ``group_size`` replicas ``stride`` apart, or an
    explicit assignment of each replica to a group."""

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
    def _wrap(ir: Ir, grouping: Grouping | PbReplicaGrouping) -> ReplicaGrouping:
        """The grouping of ``ir`` over a GCL grouping, or over the bindings'
        ``ReplicaGrouping`` (``_pb_replica_grouping``, what C++ ops are given)."""
        if not isinstance(grouping, Grouping):
            grouping = grouping.grouping
        return ReplicaGrouping(ir, grouping, _token=_TOKEN)

    @staticmethod
    def _from_params(ir: Ir, stride: int = 1, group_size: int | None = None) -> ReplicaGrouping:
        """``ir.replica_grouping(stride, group_size)`` (PopXL's name of this factory).

        Raises:
            ValueError: "Stride must be ..." / "Group size must be ..." (PopXL's words)
                for values that do not make groups of the Ir's replicas.
        """
        R = ir.replication_factor
        if isinstance(stride, int) and not (0 < stride <= R and R % stride == 0):
            raise ValueError(
                f"Stride must be a positive divisor of the replication factor {R}, got "
                f"{stride} (ir.replica_grouping(stride={stride}, group_size={group_size}))"
            )
        size = R // stride if group_size is None or not isinstance(stride, int) else group_size
        if isinstance(size, int) and not (0 < size <= R and R % (stride * size) == 0):
            raise ValueError(
                f"Group size must be a positive integer whose product with the stride "
                f"({stride}) divides the replication factor {R}, got {size} "
                f"(ir.replica_grouping(stride={stride}, group_size={group_size}))"
            )
        try:
            return ReplicaGrouping._wrap(ir, Grouping(R, stride, group_size))
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

    def _for_ir(self, ir: Ir, what: str) -> ReplicaGrouping:
        """This grouping, checked for use in ``ir`` (by ``what``). PopXL hands the IR only
        the grouping's numbers (replicas, stride, group size), so a grouping made by another
        Ir of as many replicas serves as well as one of ``ir``'s own.

        Raises:
            ValueError: the grouping is of another number of replicas than ``ir`` has (for
                instance made before ``ir.replication_factor`` was changed).
        """
        R = ir.replication_factor
        if self.num_replicas != R:
            raise ValueError(
                f"{what}: {self!r} groups {self.num_replicas} replica(s), but the Ir has "
                f"replication_factor {R}; set ir.replication_factor before making groupings "
                f"and the variables and collectives that use them (their default grouping "
                f"is all the replicas the Ir has at the time)"
            )
        return self

    @property
    def grouping(self) -> Grouping:
        """The framework-neutral grouping (for gcl collectives and lowering)."""
        return self._g

    @property
    def _pb_replica_grouping(self) -> PbReplicaGrouping:
        """The grouping in the IR bindings (``popart._internal.ir.ReplicaGrouping(R,
        stride, group_size)``), what PopXL passes to its collective ops.

        Raises:
            NotImplementedError: the grouping is not constant (collectives need groups
                ``r0, r0 + stride, ...``).
        """
        from tremula.popxl._ir.core.grouping import ReplicaGrouping as PbGrouping

        if not self._g.is_const:
            raise NotImplementedError(
                f"{self!r} is not a constant-stride grouping: collectives need groups "
                f"r0, r0 + stride, ... (use a grouping from ir.replica_grouping)"
            )
        return PbGrouping.from_grouping(self._g)

    def _to_variable_settings(self, retrieval_mode: Any = "one_per_group") -> VariableSettings:
        """PopART's ``VariableSettings(stride, group_size, mode)`` of a variable with this
        grouping (PopXL's ``popxl.variable`` makes its variables with them): ``mode`` is
        ``VariableRetrievalMode.OnePerGroup`` for ``"one_per_group"`` (and None),
        ``AllReplicas`` for ``"all_replicas"``.

        Raises:
            ValueError: another retrieval mode.
            NotImplementedError: a non-constant grouping (it has no stride; PopXL keeps
                such variables under ``const_rg``).
        """
        from tremula.popxl._ir.core.enums import VariableRetrievalMode
        from tremula.popxl._ir.core.variable_settings import VariableSettings

        mode = retrieval_mode_of(retrieval_mode, f"{self!r}._to_variable_settings")
        modes = {
            "one_per_group": VariableRetrievalMode.OnePerGroup,
            "all_replicas": VariableRetrievalMode.AllReplicas,
        }
        return VariableSettings(self.stride, self.group_size, modes[mode])

    @property
    def num_replicas(self) -> int:
        return self._g.num_replicas

    @property
    def stride(self) -> int:
        if not self._g.is_const:
            raise NotImplementedError(
                f"{self!r} has no stride: it is not a constant-stride grouping (its "
                f"const_rg {self.const_rg!r} has one)"
            )
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
            raise TypeError(f"cannot compare {self!r} with {type(other).__name__}")
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


# ---- host layouts of grouped variables ----


def _by_group(rg: ReplicaGrouping, data: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Host data (``shape_on_host``) as ``[num_groups, *shape]``."""
    return np.asarray(data).reshape(rg.num_groups, *shape)


def replica_rows(rg: ReplicaGrouping, data: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``[R, *shape]``: the value of each replica, its group's row of the host data.

    A non-constant grouping keeps its values under ``const_rg``: the host data is first
    expanded to one row per constant group with ``to_device_map``.
    """
    values = _by_group(rg, data, shape)
    if not rg.is_const:
        values = values[np.asarray(rg.to_device_map)]
    return values[rg.const_rg.grouping.assignment_array]


def group_rows(rg: ReplicaGrouping, rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Host data (``shape_on_host``) from ``[R, *shape]`` per-replica values: the row of the
    first (lowest) replica of each group (of each constant group, then ``to_host_map``)."""
    const = rg.const_rg.grouping
    values = np.asarray(rows).reshape(rg.num_replicas, *shape)[const.group_matrix[:, 0]]
    if not rg.is_const:
        values = values[np.asarray(rg.to_host_map)]
    return values if rg.num_groups > 1 else values[0]


def shard_size(shape: tuple[int, ...], shard_over: int) -> int:
    """Elements per replica of a value of ``shape`` sharded over ``shard_over`` replicas."""
    return -(-math.prod(shape) // shard_over)


def shard_index(rg: ReplicaGrouping, shard_over: int) -> np.ndarray:
    """``[R]``: the shard each replica holds. A group's value is sharded once over members
    ``0..shard_over-1``, once over the next ``shard_over`` members, and so on (members of a
    group of ``const_rg``, in replica order)."""
    return rg.const_rg.grouping.indices_in_group % shard_over


def shard_rows(
    rg: ReplicaGrouping, shard_over: int, data: np.ndarray, shape: tuple[int, ...]
) -> np.ndarray:
    """``[R, ceil(nelms / shard_over)]``: each replica's shard of its group's value (the
    value flattened and zero-padded to ``shard_over`` equal shards)."""
    R, n, c = rg.num_replicas, math.prod(shape), shard_size(shape, shard_over)
    flat = np.zeros((R, shard_over * c), dtype=np.asarray(data).dtype)
    flat[:, :n] = replica_rows(rg, data, shape).reshape(R, n)
    return flat.reshape(R, shard_over, c)[np.arange(R), shard_index(rg, shard_over)]


def unshard_rows(
    rg: ReplicaGrouping, shard_over: int, rows: np.ndarray, shape: tuple[int, ...]
) -> np.ndarray:
    """Host data (``shape_on_host``) from ``[R, shard]`` per-replica shards: each group's
    value from the first ``shard_over`` members of its first constant group."""
    const = rg.const_rg.grouping
    first = const.group_matrix[:, :shard_over]  # [const groups, shard_over] replicas
    rows = np.asarray(rows).reshape(rg.num_replicas, -1)
    n = math.prod(shape)
    values = rows[first].reshape(len(first), -1)[:, :n].reshape(len(first), *shape)
    if not rg.is_const:
        values = values[np.asarray(rg.to_host_map)]
    return values if rg.num_groups > 1 else values[0]
