"""The plan of a dynamic sparse fully-connected layer (PopLibs' ``fullyconnected::Plan``): a
frozen value with the partition, the on-tile method, the bucket sizes and the estimated
cost, and the geometry derived from them that the partitioner and the device program use.
Plans are made by :func:`planner.get_plan` and cached in a :class:`PlanningCache`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula import poplar
from tremula.libs.popsparse.cost import Method
from tremula.libs.popsparse.layout import (
    bucket_coordinates,
    num_overflow_info_elems,
    partition_starts,
    tile_of,
)
from tremula.libs.popsparse.options import Options
from tremula.libs.popsparse.params import FullyConnectedParams

FWD_MAPPING = ("y", "z", "x")  # x fastest: the X partitions of one (y, z) are neighbours
GRAD_W_INPUTS_MAPPING = ("x", "y", "z")  # tile = bucket index


@dataclass(frozen=True)
class Partition:
    """Partitions of each dim: ``groups`` (always 1), ``x``, ``y``, ``z``."""

    groups: int
    x: int
    y: int
    z: int

    @property
    def xyz(self) -> tuple[int, int, int]:
        return self.x, self.y, self.z


@dataclass(frozen=True)
class ExchangePlan:
    """Mappings of partitions to tiles per pass (dims in forward names, slowest first) and
    whether GradW moves the buckets (``True``) or the dense operands."""

    fwd_mapping: tuple[str, ...]
    grad_a_mapping: tuple[str, ...]
    grad_w_mapping: tuple[str, ...]
    grad_w_exchange_buckets: bool


@dataclass(frozen=True)
class Cost:
    """Estimated cycles (total and per pass; 0 for passes not planned) and temporary bytes
    per tile (the maximum over phases and passes)."""

    cycles: int
    temp_bytes: int
    fwd_cycles: int
    grad_a_cycles: int
    grad_w_cycles: int


@dataclass(frozen=True)
class Plan:
    """How the layer runs. Sizes of buckets are in elements of the data type
    (nz) and uint16 words (meta-info). See ``OVERVIEW.md`` for the layout it implies."""

    params: FullyConnectedParams
    input_type: str
    partials_type: str
    options: Options
    tiles_per_ipu: int
    method: Method
    partition: Partition
    exchange_plan: ExchangePlan
    nz_elems_per_bucket: int
    fwd_meta_info_elems_per_bucket: int
    grad_a_meta_info_elems_per_bucket: int
    use_dense: bool
    cost: Cost
    memory_bound: int | None
    fits: bool

    # ---- derived values the partitioner and the device program need ----
    @property
    def initial_distribution_partitions(self) -> tuple[int, int, int, int]:
        return 1, 1, 1, self.partition.z

    @property
    def shared_buckets(self) -> bool:
        return self.method.shared_buckets

    @property
    def has_grad_a_meta_info(self) -> bool:
        """Element-wise with ``sharedBuckets = false`` and a GradA pass: each bucket has its
        own GradA meta-info after the forward one."""
        return self.grad_a_meta_info_elems_per_bucket > 0

    @property
    def block_dimensions(self) -> tuple[int, int]:
        """The grain block ``(bx, by)`` of the buckets (may be smaller than the user's)."""
        return self.method.grouping[1], self.method.grouping[2]

    @property
    def z_grain(self) -> int:
        return self.method.grouping[3]

    @property
    def type_factor(self) -> int:
        """Bytes of the data type: 4 float, 2 half (element-wise meta-info offsets)."""
        return poplar.as_type(self.input_type).size

    @property
    def num_buckets(self) -> int:
        return self.partition.x * self.partition.y * self.partition.z

    @property
    def meta_info_elems_per_bucket(self) -> int:
        return self.fwd_meta_info_elems_per_bucket + self.grad_a_meta_info_elems_per_bucket

    @property
    def num_overflow_info_elems(self) -> int:
        return 0 if self.use_dense else num_overflow_info_elems(self.partition.x)

    @property
    def meta_info_elems(self) -> int:
        """Length of the whole meta-info tensor."""
        if self.use_dense:
            return 0
        return self.num_overflow_info_elems + self.num_buckets * self.meta_info_elems_per_bucket

    @property
    def nz_elems(self) -> int:
        """Length of the whole nz tensor."""
        return self.num_buckets * self.nz_elems_per_bucket

    def starts(self, dim: str) -> np.ndarray:
        """Start element of each partition of ``dim`` ("x", "y" or "z")."""
        x, y, z = self.params.shape
        size, parts, grain = {
            "x": (x, self.partition.x, self.block_dimensions[0]),
            "y": (y, self.partition.y, self.block_dimensions[1]),
            "z": (z, self.partition.z, self.z_grain),
        }[dim]
        return partition_starts(size, parts, grain)

    def sizes(self, dim: str) -> np.ndarray:
        """Size (elements) of each partition of ``dim``."""
        size = dict(zip("xyz", self.params.shape))[dim]
        return np.diff(np.r_[self.starts(dim), size])

    @property
    def z_tile(self) -> int:
        """Z elements of every tile (all Z partitions are equal)."""
        return int(self.sizes("z")[0])

    def bucket_coordinates(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(x, y, z)`` partition of every bucket ``b = (x Py + y) Pz + z``."""
        return bucket_coordinates(self.partition.xyz)

    def bucket_regions(self) -> dict[str, np.ndarray]:
        """Per bucket (PN): the ``start`` and ``size`` (elements) of its X, Y and Z
        partitions, e.g. ``x_start``, ``x_size``: the tile of PN ``b`` computes
        ``Q[x_start:x_start+x_size, z_start:z_start+z_size]`` (partials over its Y slice)."""
        coords = dict(zip("xyz", self.bucket_coordinates()))
        out = {}
        for dim in "xyz":
            out[f"{dim}_start"] = self.starts(dim)[coords[dim]]
            out[f"{dim}_size"] = self.sizes(dim)[coords[dim]]
        return out

    def sub_group_ids(self) -> np.ndarray:
        """Sub-group id ``x Py + y + 1`` each bucket's PN processes."""
        x, y, _ = self.bucket_coordinates()
        return x * self.partition.y + y + 1

    def bucket_tiles(self, pass_: str = "fwd") -> np.ndarray:
        """Tile of every bucket's PN in a pass (``fwd``, ``grad_a`` or ``grad_w``)."""
        mapping = {
            "fwd": self.exchange_plan.fwd_mapping,
            "grad_a": self.exchange_plan.grad_a_mapping,
            "grad_w": self.exchange_plan.grad_w_mapping,
        }[pass_]
        return tile_of(mapping, self.partition.xyz, *self.bucket_coordinates())

    @property
    def control_tile(self) -> int:
        """Tile of the propagation control state: ``min(numTiles - 1, usedTiles)``."""
        return min(self.tiles_per_ipu - 1, self.num_buckets)

    def describe(self) -> str:
        p, c = self.partition, self.cost
        return (
            f"popsparse plan ({self.input_type}, partials {self.partials_type}): "
            f"{self.method.fwd}/{self.method.grad_a}/{self.method.grad_w} grouping "
            f"{self.method.grouping[1:]}, partition x{p.x} y{p.y} z{p.z}"
            f"{' (dense)' if self.use_dense else ''}; buckets: {self.nz_elems_per_bucket} nz, "
            f"{self.fwd_meta_info_elems_per_bucket}+{self.grad_a_meta_info_elems_per_bucket} "
            f"meta-info words; ~{c.cycles} cycles (fwd {c.fwd_cycles}, gradA "
            f"{c.grad_a_cycles}, gradW {c.grad_w_cycles}), {c.temp_bytes} B temporaries/tile"
        )


class PlanningCache:
    """Plans by (target, type, params, options); pass one to :func:`get_plan`,
    ``Partitioner`` and the device functions so that they agree and plan once."""

    def __init__(self) -> None:
        self._plans: dict[tuple, Plan] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._plans)

    def lookup(self, key: tuple) -> Plan | None:
        """The plan stored for ``key`` (counted as a hit), or ``None`` (a miss)."""
        plan = self._plans.get(key)
        if plan is None:
            self.misses += 1
        else:
            self.hits += 1
        return plan

    def store(self, key: tuple, plan: Plan) -> None:
        self._plans[key] = plan

    def clear(self) -> None:
        self._plans.clear()
