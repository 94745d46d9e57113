"""The part of a graph every other part builds on: the view of a :class:`GraphState` over a
range of tiles, its properties, and the checks of tiles and tensors that its methods share.
"""

from __future__ import annotations

import numpy as np

from tremula.errors import GraphError
from tremula.poplar.graph_state import GraphState
from tremula.poplar.tensor import Tensor
from tremula.target import Target


class GraphCore:
    """A view of a :class:`GraphState` over tiles ``[lo, hi)``: what :class:`Graph`'s parts
    share (see :mod:`tremula.poplar.graph`)."""

    def __init__(
        self,
        target: Target,
        replication_factor: int = 1,
        *,
        _state: GraphState | None = None,
        _tiles: tuple[int, int] | None = None,
    ) -> None:
        if _state is None:
            if int(replication_factor) != replication_factor or replication_factor < 1:
                raise GraphError(
                    f"Graph: replication_factor must be a positive integer, got "
                    f"{replication_factor!r}"
                )
            target = _per_replica_target(target, int(replication_factor))
            _state = GraphState(target, int(replication_factor))
        self._state = _state
        self._lo, self._hi = (0, _state.target.num_tiles) if _tiles is None else _tiles
        self.target = self._view_target()

    def _view_target(self) -> Target:
        full = self._state.target
        n = self._hi - self._lo
        if n == full.num_tiles:
            return full
        if self._lo % full.tiles_per_ipu == 0 and n % full.tiles_per_ipu == 0:
            return full.with_overrides(num_ipus=n // full.tiles_per_ipu)
        return full.with_overrides(num_ipus=1, tiles_per_ipu=n, relative_sync_delay_by_tile=None)

    # ---- basic properties ----
    @property
    def state(self) -> GraphState:
        return self._state

    @property
    def replication_factor(self) -> int:
        return self._state.replication_factor

    @property
    def num_tiles(self) -> int:
        return self._hi - self._lo

    @property
    def tile_range(self) -> tuple[int, int]:
        """``[lo, hi)`` of this graph's tiles in the top-level graph's numbering."""
        return self._lo, self._hi

    def get_target(self) -> Target:
        return self.target

    def _tile(self, tile: int | np.integer, what: str) -> int:
        if int(tile) != tile or not 0 <= tile < self.num_tiles:
            raise GraphError(
                f"{what}: tile {tile} is out of range: this graph has "
                f"{self.num_tiles} tiles (0..{self.num_tiles - 1})"
            )
        return int(tile) + self._lo

    def _own(self, t: Tensor, what: str) -> Tensor:
        if not isinstance(t, Tensor):
            raise GraphError(f"{what}: expected a Tensor, got {type(t).__name__}")
        if t.graph is not self._state:
            raise GraphError(f"{what}: tensor {t!r} belongs to another graph")
        return t

    def _changed(self) -> None:
        self._state.generation += 1


def _per_replica_target(target: Target, replicas: int) -> Target:
    if not isinstance(target, Target):
        raise GraphError(f"Graph: expected a Target (device.target), got {type(target).__name__}")
    if replicas == 1 or target.num_ipus == 1:
        return target
    if target.num_ipus % replicas:
        raise GraphError(
            f"Graph: replication_factor {replicas} does not divide the target's "
            f"{target.num_ipus} IPUs"
        )
    return target.with_overrides(num_ipus=target.num_ipus // replicas)
