"""A session's weights: each initialiser with its ``VariableSettings`` (read from the model's
metadata), its host data (``[G, *replica_shape]`` when there are G > 1
groups) and the host layouts of ``weightsToHost`` / ``readWeights`` / ``writeWeights``
(PopART's: one row per group, ``[G, *replica_shape]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tremula import popdist, popxl
from tremula.errors import PopartException, PopartInternalException, PopartRuntimeError
from tremula.popxl._ir.core.enums import CommGroupType, VariableRetrievalMode
from tremula.popxl._ir.core.grouping import CommGroup
from tremula.popxl._ir.core.variable_settings import VariableSettings

_ALL_REPLICAS = VariableRetrievalMode.AllReplicas


def settings_of(tid: str, meta: dict[str, str]) -> VariableSettings:
    """A weight's VariableSettings from the model's metadata (All / OnePerGroup if absent).

    Raises:
        PopartException: metadata values that are not a CommGroupType or retrieval mode.
    """
    try:
        kind = CommGroupType(int(meta.get(f"__comm_group_type/{tid}", 0)))
        size = int(meta.get(f"__comm_group_size/{tid}", 0))
        mode = VariableRetrievalMode(int(meta.get(f"__variable_settings/{tid}", 0)))
    except ValueError as err:
        raise PopartException(f"the model's grouping metadata of weight {tid!r}: {err}") from None
    return VariableSettings(CommGroup(kind, size), mode)


@dataclass
class Weight:
    """One initialiser of the model as a session holds it."""

    id: str
    settings: VariableSettings
    host: np.ndarray  # the host tensor data: [G, *replica_shape] (G > 1) or replica_shape
    replica_shape: tuple[int, ...]
    groups: int
    variable: popxl.Variable | None = None  # None: a constant of the program
    trainable: bool = False
    state: dict[str, popxl.Variable] = field(default_factory=dict)  # optimizer state
    from_device: np.ndarray | None = None  # per replica [R, ...], filled by weightsToHost

    @classmethod
    def make(cls, tid: str, data: np.ndarray, settings: VariableSettings, R: int) -> Weight:
        """Check the initialiser against its grouping (PopART's checks when the IR is built).

        Raises:
            PopartInternalException: a leading dimension that is not the group count.
            PopartException: a group size that does not divide the replication factor.
        """
        shape = settings.shapeOnReplica(data.shape, R, tid)
        settings.getReplicaGrouping(R)  # refuses sizes that do not divide R
        return cls(tid, settings, data, tuple(shape), settings.getGroupCount(R))

    @property
    def dtype(self) -> np.dtype:
        return self.host.dtype

    def n_returned(self, R: int) -> int:
        return self.settings.numReplicasReturningVariable(R)

    def io_shape(self, R: int) -> tuple[int, ...]:
        """The shape of this weight's ``PyWeightsIO`` buffer: ``[n, *replica_shape]`` with ``n``
        the replicas returning it (PopART's ``readWeights`` / ``writeWeights``), or the
        replica shape when ``n`` is 1."""
        n = self.n_returned(R)
        return self.replica_shape if n == 1 else (n, *self.replica_shape)

    def grouping(self, ir: popxl.Ir) -> popxl.ReplicaGrouping:
        rg = self.settings.getReplicaGrouping(ir.replication_factor)
        return ir.replica_grouping(rg.getStride(), rg.getGroupSize())

    def representatives(self, R: int) -> list[int]:
        """The replica whose value stands for each group (its lowest)."""
        return [g[0] for g in self.settings.groups(R)]

    def returned(self, R: int) -> np.ndarray:
        """What ``readWeights`` copies out (``io_shape``): one value per group (its
        representative) or one per replica."""
        if self.from_device is None:
            raise PopartRuntimeError(
                f"readWeights: weight {self.id!r} has not been read from the device; call "
                f"weightsToHost first"
            )
        rows = self.from_device
        if self.n_returned(R) != R:
            rows = rows[self.representatives(R)]
        return rows.reshape(self.io_shape(R))

    def by_group(self, R: int) -> np.ndarray:
        """The device values as host data ``[G, ...]`` (checkpoints: one per group)."""
        if self.from_device is None:
            return self.host
        rows = self.from_device[self.representatives(R)]
        return rows.reshape(self.host.shape)


def read_into(weight: Weight, R: int, out: np.ndarray) -> None:
    """``readWeights``: copy into ``out`` if its byte size matches (PopART checks only that).

    Raises:
        PopartRuntimeError: byte sizes differ.
    """
    data = np.ascontiguousarray(weight.returned(R))
    if data.nbytes != out.nbytes:
        raise PopartRuntimeError(
            f"sizes (in bytes) of src ({data.nbytes}) and dst ({out.nbytes}) differ in "
            f"hostStreamToHost for {weight.id}"
        )
    out.reshape(-1).view(np.uint8)[:] = data.reshape(-1).view(np.uint8)


def write_from(weight: Weight, R: int, data: Any) -> np.ndarray:
    """``writeWeights``: the new host data for a weight from a user buffer (shape checked
    exactly; then the byte size against the host data, which refuses AllReplicas buffers
    of groups of several replicas).

    Raises:
        PopartInternalException: a shape or byte size that does not match.
    """
    arr = np.ascontiguousarray(data)
    want = weight.io_shape(R)
    if arr.shape != want:
        raise PopartInternalException(
            "The shape of the MutableVoidData for IO does not not match the expected write "
            f"region of this tensor. Tensor Write ({len(want)}): {list(want)} != "
            f"MutableVoidData ({arr.ndim}): {list(arr.shape)}"
        )
    if arr.dtype != weight.dtype or arr.nbytes != weight.host.nbytes:
        raise PopartInternalException(
            f"cannot reset tensor data with data of non-matching size {weight.host.nbytes} vs "
            f"{arr.nbytes} (weight {weight.id!r}: {weight.dtype} {list(weight.host.shape)}, "
            f"given {arr.dtype} {list(arr.shape)})"
        )
    return arr.reshape(weight.host.shape).copy()


def broadcast_hosts(weights: list[Weight], root: int) -> None:
    """Set the host data of ``weights`` to instance ``root``'s on every instance of the
    PopRun job (one MPI broadcast)."""
    hosts = popdist.broadcast([w.host for w in weights], root)
    for w, host in zip(weights, hosts):
        w.host = host
