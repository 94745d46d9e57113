"""Machine descriptions: every parameter of the IPU Model and its cost model lives here, once.

Field names follow the members of Poplar's ``IPUModel`` in snake_case (``tilesPerIPU`` is
``tiles_per_ipu``, ``exchangeBytesPerCycle`` is ``exchange_bytes_per_cycle`` ...). Values of
the presets are the real chips' (Graphcore's published figures); where the real value is
not known a proposed value is used and the field's comment says so.

A :class:`Target` is a frozen value. Make a variant with :func:`dataclasses.replace` or with
:meth:`Target.with_overrides`, which validates the names it is given.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tremula.errors import TargetError

KIB = 1024

#: Upper bounds of the machine's shape. A Mk2 has 1,472 tiles and the largest IPU-PODs 256
#: IPUs; every compiled program, timeline and profile holds several arrays per tile, so a
#: larger machine only exhausts the host. The bounds leave room for much bigger
#: architectures than were built (44 Mk2s' worth of tiles per IPU, 2**20 tiles in all).
MAX_TILES_PER_IPU = 2**16
MAX_IPUS = 1024
MAX_TILES = 2**20

#: Names accepted for ``ipu_version``, with the product each models.
IPU_VERSIONS = {"ipu1": "Mk1 GC2", "ipu2": "Mk2 GC200", "bow": "Bow IPU", "cpu": "CPU"}


@dataclass(frozen=True)
class Target:
    """A modelled machine: its shape, memory, clock, and the constants of the cost model.

    Invariants: ``num_tiles == num_ipus * tiles_per_ipu``; the interleaved region starts at
    ``interleaved_memory_element_index * memory_element_bytes`` and ends at
    ``memory_bytes_per_tile``.
    """

    # -- shape (IPUModel: IPUVersion, numIPUs, tilesPerIPU, numWorkerContexts, ...) --
    ipu_version: str = "ipu2"
    num_ipus: int = 1
    tiles_per_ipu: int = 1472
    tiles_per_super_tile: int = 2
    num_worker_contexts: int = 6
    # -- memory --
    memory_bytes_per_tile: int = 624 * KIB
    memory_element_bytes: int = 16 * KIB  # one bank (Mk2); Mk1 has 32 KiB banks
    interleaved_memory_element_index: int = 23  # [proposal] Mk2 split: 368 KiB + 256 KiB
    alignment_bytes: int = 8  # allocation granule: one 64-bit word
    # -- clock and data path --
    tile_clock_frequency: float = 1.33e9
    data_path_width: int = 64  # bits: float2 / half4 vectors
    instruction_bytes: int = 4
    memcpy_bytes_per_cycle: int = 8
    # -- AMP (accumulating matrix product) units --
    fp16_in_fp16_out_conv_units_per_tile: int = 16
    fp16_in_fp32_out_conv_units_per_tile: int = 16
    fp32_in_fp32_out_conv_units_per_tile: int = 8
    fp16_conv_unit_input_load_elems_per_cycle: int = 4
    fp32_conv_unit_input_load_elems_per_cycle: int = 2
    # -- exchange and sync --
    exchange_bytes_per_cycle: int = 4
    supports_super_tile_send_receive: bool = True
    exchange_fixed_cycles: int = 20  # [proposal] per exchange step on each active tile
    min_sync_delay: int = 30  # [proposal] min over tiles of the internal sync round trip
    max_relative_sync_delay: int = 60  # [proposal] farthest tile's extra delay
    relative_sync_delay_type: str = "AUTO"  # AUTO or NO_DELAY
    global_sync_cycles: int | None = None  # None: ceil(15 ns x f x hops x 2)
    # -- inter-IPU links (poplibs IPU-Model link model) --
    ipu_link_bits_per_second: float = 128 * 2**30
    ipu_link_efficiency: float = 0.85
    ipu_links_between_ipus: int = 2
    # -- gateway links between IPU-Link domains (2 x 100 Gbps GW-Links per
    # Bow-2000 / M2000 gateway); a domain is at most 64 IPUs (Poplar's
    # ipuLinkDomainSize, set by POPLAR_TARGET_OPTIONS or poprun --num-ilds)
    gw_link_bits_per_second: float = 100e9
    gw_link_efficiency: float = 0.85  # [proposal] as the IPU-links
    gw_links: int = 2
    ipu_link_domain_size: int = 64
    # -- host and streaming memory --
    host_bytes_per_second: float = 32e9  # PCIe Gen4 x16, one direction
    host_sync_latency_seconds: float = 1.5e-6  # [proposal] deterministic host round trip
    streaming_memory_bytes_per_second: float = 20e9  # [proposal] remote buffers
    stream_copy_fixed_cycles: int = 100
    # -- control, code and state sizes of the cost model [proposal] --
    compute_set_launch_cycles: int = 12  # supervisor overhead to start a compute set
    control_cycles_per_program: int = 8  # Repeat / If / Call bookkeeping on every tile
    control_code_bytes_per_program: int = 8  # control code per program node per tile
    exchange_code_bytes_per_region: int = 8  # internal exchange code per contiguous region
    host_exchange_code_bytes_per_region: int = 12
    stack_bytes_per_worker: int = 64
    supervisor_stack_bytes: int = 128
    # -- kind --
    target_type: str = "IPU_MODEL"  # IPU_MODEL, IPU or CPU
    # [proposal] per-tile relative sync delays; None means computed from the fields above
    relative_sync_delay_by_tile: tuple[int, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        def bad(name: str, value: Any, why: str) -> TargetError:
            return TargetError(f"Target.{name} = {value!r}: {why}")

        if self.ipu_version not in IPU_VERSIONS:
            raise bad("ipu_version", self.ipu_version, f"expected one of {sorted(IPU_VERSIONS)}")
        for name in (
            "num_ipus",
            "tiles_per_ipu",
            "num_worker_contexts",
            "memory_bytes_per_tile",
            "exchange_bytes_per_cycle",
            "memcpy_bytes_per_cycle",
            "data_path_width",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise bad(name, value, "expected a positive integer")
        for name, most, real in (
            ("tiles_per_ipu", MAX_TILES_PER_IPU, "a Mk2 IPU has 1,472"),
            ("num_ipus", MAX_IPUS, "the largest IPU-POD has 256"),
        ):
            if getattr(self, name) > most:
                raise bad(name, getattr(self, name), f"at most {most:,} ({real})")
        if self.num_tiles > MAX_TILES:
            raise bad(
                "num_ipus",
                self.num_ipus,
                f"{self.num_ipus} IPUs x {self.tiles_per_ipu:,} tiles = {self.num_tiles:,} "
                f"tiles; at most {MAX_TILES:,} in all",
            )
        if self.tile_clock_frequency <= 0:
            raise bad("tile_clock_frequency", self.tile_clock_frequency, "expected > 0 Hz")
        if self.relative_sync_delay_type not in ("AUTO", "NO_DELAY"):
            raise bad(
                "relative_sync_delay_type",
                self.relative_sync_delay_type,
                "expected 'AUTO' or 'NO_DELAY'",
            )
        if self.target_type not in ("IPU_MODEL", "IPU", "CPU"):
            raise bad("target_type", self.target_type, "expected IPU_MODEL, IPU or CPU")
        start = self.interleaved_memory_element_index * self.memory_element_bytes
        if not 0 <= start <= self.memory_bytes_per_tile:
            raise bad(
                "interleaved_memory_element_index",
                self.interleaved_memory_element_index,
                f"the interleaved region would start at byte {start}, outside the "
                f"{self.memory_bytes_per_tile}-byte tile",
            )
        if self.relative_sync_delay_by_tile is not None and (
            len(self.relative_sync_delay_by_tile) != self.tiles_per_ipu
        ):
            raise bad(
                "relative_sync_delay_by_tile",
                len(self.relative_sync_delay_by_tile),
                f"expected {self.tiles_per_ipu} values (one per tile of an IPU)",
            )

    # ---- derived values ----
    @property
    def num_tiles(self) -> int:
        return self.num_ipus * self.tiles_per_ipu

    @property
    def bytes_per_ipu(self) -> int:
        return self.memory_bytes_per_tile * self.tiles_per_ipu

    @property
    def total_memory(self) -> int:
        return self.memory_bytes_per_tile * self.num_tiles

    @property
    def interleaved_region_start(self) -> int:
        return self.interleaved_memory_element_index * self.memory_element_bytes

    @property
    def non_interleaved_bytes(self) -> int:
        return self.interleaved_region_start

    @property
    def interleaved_bytes(self) -> int:
        return self.memory_bytes_per_tile - self.interleaved_region_start

    @property
    def is_cpu(self) -> bool:
        return self.target_type == "CPU"

    def vector_width(self, itemsize: int) -> int:
        """Elements of ``itemsize`` bytes in one data-path vector (float: 2, half: 4)."""
        return max(1, self.data_path_width // (8 * itemsize))

    def conv_units(self, in_itemsize: int, partials_itemsize: int) -> int:
        if in_itemsize <= 2:
            if partials_itemsize <= 2:
                return self.fp16_in_fp16_out_conv_units_per_tile
            return self.fp16_in_fp32_out_conv_units_per_tile
        return self.fp32_in_fp32_out_conv_units_per_tile

    def max_macs_per_cycle_per_tile(self, in_itemsize: int, partials_itemsize: int = 4) -> int:
        """AMP peak: conv units x input-load elements per cycle (``getMaxMACsPerCyclePerTile``)."""
        load = (
            self.fp16_conv_unit_input_load_elems_per_cycle
            if in_itemsize <= 2
            else self.fp32_conv_unit_input_load_elems_per_cycle
        )
        return self.conv_units(in_itemsize, partials_itemsize) * load

    def peak_flops(self, in_itemsize: int, partials_itemsize: int = 4) -> float:
        """Peak FLOP/s of the whole target on the AMP path (2 FLOPs per MAC)."""
        macs = self.max_macs_per_cycle_per_tile(in_itemsize, partials_itemsize)
        return 2.0 * macs * self.num_tiles * self.tile_clock_frequency

    def relative_sync_delays(self) -> np.ndarray:
        """Per-tile delay (relative to ``min_sync_delay``) for the tiles of one IPU.

        [proposal] The sync controller sits in the middle of the chip: the delay grows
        linearly with the distance of the tile from the middle, up to
        ``max_relative_sync_delay`` for the tiles at either end.
        """
        if self.relative_sync_delay_by_tile is not None:
            return np.asarray(self.relative_sync_delay_by_tile, dtype=np.int64)
        n = self.tiles_per_ipu
        if self.relative_sync_delay_type == "NO_DELAY" or n == 1:
            return np.zeros(n, dtype=np.int64)
        half = (n - 1) / 2.0
        distance = np.abs(np.arange(n) - half) / half
        return np.rint(distance * self.max_relative_sync_delay).astype(np.int64)

    @functools.cached_property
    def max_ipu_sync_delay(self) -> int:
        """(Asked per candidate by the matmul planner: worked out once per target.)"""
        return int(self.min_sync_delay + self.relative_sync_delays().max())

    @property
    def global_sync_delay(self) -> int:
        """Cycles of a sync across IPUs: ``ceil(15 ns x f x (1 + numIPUs / 4) x 2)``."""
        if self.global_sync_cycles is not None:
            return self.global_sync_cycles
        hops = 1 + self.num_ipus / 4
        return math.ceil(15e-9 * self.tile_clock_frequency * hops * 2)

    @property
    def host_bytes_per_cycle(self) -> float:
        return self.host_bytes_per_second / self.tile_clock_frequency

    @property
    def streaming_memory_bytes_per_cycle(self) -> float:
        return self.streaming_memory_bytes_per_second / self.tile_clock_frequency

    @property
    def host_sync_cycles(self) -> int:
        return math.ceil(self.host_sync_latency_seconds * self.tile_clock_frequency)

    @property
    def ipu_link_bytes_per_cycle(self) -> float:
        per_link = self.ipu_link_bits_per_second * self.ipu_link_efficiency / 8
        return per_link * self.ipu_links_between_ipus / self.tile_clock_frequency

    @property
    def gw_link_bytes_per_cycle(self) -> float:
        per_link = self.gw_link_bits_per_second * self.gw_link_efficiency / 8
        return per_link * self.gw_links / self.tile_clock_frequency

    def with_overrides(self, **overrides: Any) -> Target:
        """A copy with the given fields replaced; unknown names raise :class:`TargetError`."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise TargetError(f"unknown Target parameter(s) {unknown}; known: {sorted(names)}")
        return dataclasses.replace(self, **overrides)

    def describe(self) -> str:
        return (
            f"{IPU_VERSIONS[self.ipu_version]} {self.target_type}: {self.num_ipus} IPU(s) x "
            f"{self.tiles_per_ipu} tiles x {self.memory_bytes_per_tile // KIB} KiB at "
            f"{self.tile_clock_frequency / 1e6:.0f} MHz"
        )


def ipu1(**overrides: Any) -> Target:
    """Mk1 GC2: 1216 tiles x 256 KiB at 1.6 GHz, 8 fp16 / 4 fp32 AMP units."""
    base = Target(
        ipu_version="ipu1",
        tiles_per_ipu=1216,
        memory_bytes_per_tile=256 * KIB,
        memory_element_bytes=32 * KIB,
        interleaved_memory_element_index=4,
        tile_clock_frequency=1.6e9,
        fp16_in_fp16_out_conv_units_per_tile=8,
        fp16_in_fp32_out_conv_units_per_tile=8,
        fp32_in_fp32_out_conv_units_per_tile=4,
        ipu_links_between_ipus=3,
    )
    return base.with_overrides(**overrides)


def ipu2(**overrides: Any) -> Target:
    """Mk2 GC200: 1472 tiles x 624 KiB at about 1.33 GHz, 16 fp16 / 8 fp32 AMP units."""
    return Target().with_overrides(**overrides)


def bow(**overrides: Any) -> Target:
    """Bow IPU: the Mk2 tile array clocked at 1.85 GHz."""
    return Target(ipu_version="bow", tile_clock_frequency=1.85e9).with_overrides(**overrides)


def cpu(**overrides: Any) -> Target:
    """Poplar's CPU target: one tile, one IPU, no cycle fidelity."""
    base = Target(
        ipu_version="cpu",
        tiles_per_ipu=1,
        memory_bytes_per_tile=2**40,
        memory_element_bytes=2**40,
        interleaved_memory_element_index=1,
        target_type="CPU",
        relative_sync_delay_type="NO_DELAY",
    )
    return base.with_overrides(**overrides)


PRESETS = {"ipu1": ipu1, "ipu2": ipu2, "mk2": ipu2, "bow": bow, "cpu": cpu}


def preset(name: str, **overrides: Any) -> Target:
    """The preset called ``name`` (ipu1, ipu2 / mk2, bow, cpu) with ``overrides`` applied."""
    try:
        make = PRESETS[name.lower()]
    except KeyError:
        raise TargetError(f"unknown target preset {name!r}; known: {sorted(PRESETS)}") from None
    return make(**overrides)
