"""Where a tensor lives: PopXL's ``popxl.tensorlocation`` (``TensorStorage``,
``ReplicatedTensorSharding``, ``TensorLocation``) and the IR enums it re-exports
(``TileSet``, ``ExecutionContext``)."""

from __future__ import annotations

import enum


class TensorStorage(enum.Enum):
    """Where a tensor's value is stored: in tile memory or in streaming (remote) memory."""

    OnChip = "OnChip"
    OffChip = "OffChip"


class ReplicatedTensorSharding(enum.Enum):
    """Whether a tensor is sharded over the replicas (RTS)."""

    Off = 0
    On = 1


class _BoundEnum(enum.IntEnum):
    """An enum of PopART's bindings, which PopXL re-exports: an int printed as
    ``TileSet.IO`` (pybind11's ``str``; Python 3.11's ``IntEnum`` would print ``1``)."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class TileSet(_BoundEnum):
    """The tiles an op runs on: the compute tiles or the IO tiles."""

    Compute = 0
    IO = 1
    Undefined = 2
    N = 3


class ExecutionContext(_BoundEnum):
    """The part of the program an op runs in (``popxl.context._execution_context``)."""

    Normal = 0
    AccumulateOuterFragment = 1
    WeightsFromHostFragment = 2
    WeightsToHostFragment = 3
    OptimizerFromHostFragment = 4
    Subgraph = 5


class TensorLocation:
    """A storage place and a sharding mode (read-only).

    Args:
        storage: On chip (default) or off chip.
        replicated_tensor_sharding: Off (default) or On.
    """

    def __init__(
        self,
        storage: TensorStorage = TensorStorage.OnChip,
        replicated_tensor_sharding: ReplicatedTensorSharding = ReplicatedTensorSharding.Off,
    ) -> None:
        if not isinstance(storage, TensorStorage):
            raise TypeError(f"TensorLocation: storage must be a TensorStorage, got {storage!r}")
        if not isinstance(replicated_tensor_sharding, ReplicatedTensorSharding):
            raise TypeError(
                f"TensorLocation: replicated_tensor_sharding must be a "
                f"ReplicatedTensorSharding, got {replicated_tensor_sharding!r}"
            )
        self._storage = storage
        self._rts = replicated_tensor_sharding

    @property
    def storage(self) -> TensorStorage:
        return self._storage

    @property
    def replicated_tensor_sharding(self) -> ReplicatedTensorSharding:
        return self._rts

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorLocation) and (self._storage, self._rts) == (
            other._storage,
            other._rts,
        )

    def __hash__(self) -> int:
        return hash((self._storage, self._rts))

    def __repr__(self) -> str:
        return f"TensorLocation(storage={self._storage}, replicated_tensor_sharding={self._rts})"


__all__ = [
    "ExecutionContext",
    "ReplicatedTensorSharding",
    "TensorLocation",
    "TensorStorage",
    "TileSet",
]
