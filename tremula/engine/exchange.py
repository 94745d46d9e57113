"""Exchange plans: the bytes each tile sends and receives in one exchange, and their cost.

Costs follow ``shared/spec/profile-and-machine.md`` section 4: an internal exchange takes
``fixed + ceil(max(sent, received) / exchangeBytesPerCycle)`` cycles on each active tile,
and, being statically scheduled, ends on every participating tile at once; a global
(inter-IPU) exchange is also bounded by the IPU-link bandwidth between each pair of IPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula.target import Target


@dataclass(frozen=True)
class Transfers:
    """Element moves: element ``addr`` (of a space of ``itemsize``-byte elements, id
    ``space``) goes from tile ``src`` to tile ``dst``."""

    src: np.ndarray
    dst: np.ndarray
    addr: np.ndarray
    space: np.ndarray
    itemsize: np.ndarray

    @staticmethod
    def empty() -> Transfers:
        z = np.zeros(0, dtype=np.int64)
        return Transfers(z, z, z, z, z)

    @staticmethod
    def concat(parts: list[Transfers]) -> Transfers:
        parts = [p for p in parts if p.src.size]
        if not parts:
            return Transfers.empty()
        if len(parts) == 1:
            return parts[0]
        return Transfers(
            *(
                np.concatenate([getattr(p, f) for p in parts])
                for f in ("src", "dst", "addr", "space", "itemsize")
            )
        )

    def select(self, mask: np.ndarray) -> Transfers:
        return Transfers(
            self.src[mask], self.dst[mask], self.addr[mask], self.space[mask], self.itemsize[mask]
        )

    def __len__(self) -> int:
        return int(self.src.size)


@dataclass(frozen=True)
class ExchangePlan:
    """One exchange step: per-tile bytes and estimated cycles (all arrays ``[tile]``)."""

    kind: str  # internal or global
    bytes_sent: np.ndarray
    bytes_received: np.ndarray
    cycles_by_tile: np.ndarray
    code_bytes: np.ndarray
    total_data: int

    @property
    def active(self) -> np.ndarray:
        return np.flatnonzero(self.cycles_by_tile > 0)


def _unique_bytes(tile: np.ndarray, t: Transfers, num_tiles: int) -> np.ndarray:
    """Bytes per tile counting each (tile, element) once: a tile sends an element once
    however many tiles receive it, and receives it once however many vertices read it."""
    one_space = t.space.strides == (0,) or bool(np.all(t.space == t.space[0]))
    if t.addr.size < 2 or (one_space and bool(np.all(np.diff(t.addr) > 0))):
        first: slice | np.ndarray = slice(None)  # increasing addresses: no element repeats
    else:
        key = (tile << 45) | (t.space << 40) | t.addr  # tiles < 2^18, spaces < 32, addr < 2^40
        _, first = np.unique(key, return_index=True)
    counts = np.bincount(tile[first], weights=t.itemsize[first], minlength=num_tiles)
    return counts.astype(np.int64)


def _region_counts(t: Transfers, num_tiles: int) -> np.ndarray:
    """Runs of consecutive received addresses per tile, in transfer order: a proxy for the
    number of exchange instructions."""
    if not len(t):
        return np.zeros(num_tiles, dtype=np.int64)
    breaks = np.ones(t.dst.size, dtype=bool)
    breaks[1:] = (
        (t.dst[1:] != t.dst[:-1]) | (t.space[1:] != t.space[:-1]) | (t.addr[1:] != t.addr[:-1] + 1)
    )
    return np.bincount(t.dst[breaks], minlength=num_tiles).astype(np.int64)


def plan_exchange(
    target: Target, t: Transfers, kind: str = "internal", local_bytes: np.ndarray | None = None
) -> ExchangePlan:
    """The exchange moving ``t``; ``local_bytes`` adds on-tile copying at memcpy speed."""
    n = target.num_tiles
    sent = _unique_bytes(t.src, t, n) if len(t) else np.zeros(n, dtype=np.int64)
    recv = _unique_bytes(t.dst, t, n) if len(t) else np.zeros(n, dtype=np.int64)
    busy = np.maximum(sent, recv)
    if kind == "internal" and len(t) and target.supports_super_tile_send_receive:
        busy = np.maximum(sent, recv - _super_tile_shared(target, t) // 2)
    cycles = np.where(
        busy > 0, target.exchange_fixed_cycles + -(-busy // target.exchange_bytes_per_cycle), 0
    )
    if local_bytes is not None:
        cycles = cycles + np.where(
            local_bytes > 0, -(-local_bytes // target.memcpy_bytes_per_cycle), 0
        )
    if kind == "global" and len(t):
        cycles = np.maximum(cycles, _link_cycles(target, t, cycles > 0))
    code = _region_counts(t, n) * target.exchange_code_bytes_per_region
    code = code + np.where(sent > 0, target.exchange_code_bytes_per_region, 0)
    return ExchangePlan(
        kind, sent, recv, cycles.astype(np.int64), code.astype(np.int64), int(recv.sum())
    )


def _super_tile_shared(target: Target, t: Transfers) -> np.ndarray:
    """Bytes each tile receives that the other tile of its super-tile also receives: the
    pair shares one receive bus and takes such data at twice the rate (spec section 4.1)."""
    n, pair = target.num_tiles, target.tiles_per_super_tile
    one_space = t.space.strides == (0,) or bool(np.all(t.space == t.space[0]))
    if pair < 2 or (one_space and bool(np.all(np.diff(t.addr) > 0))):
        return np.zeros(n, dtype=np.int64)  # no element reaches two tiles
    key = (t.dst << 45) | (t.space << 40) | t.addr
    key, first = np.unique(key, return_index=True)  # each (tile, element) once
    dst = t.dst[first]
    _, inverse, counts = np.unique(
        (dst // pair << 45) | (key & ((1 << 45) - 1)), return_inverse=True, return_counts=True
    )
    shared = counts[inverse] == pair
    out = np.bincount(dst[shared], weights=t.itemsize[first][shared], minlength=n)
    return out.astype(np.int64)


def _link_cycles(target: Target, t: Transfers, active: np.ndarray) -> np.ndarray:
    """Inter-IPU traffic is limited by the links between each pair of IPUs."""
    per_ipu = target.tiles_per_ipu
    src_ipu, dst_ipu = t.src // per_ipu, t.dst // per_ipu
    pair = src_ipu * target.num_ipus + dst_ipu
    load = np.bincount(pair, weights=t.itemsize, minlength=target.num_ipus**2)
    worst = float(load.max(initial=0.0))
    link = int(np.ceil(worst / target.ipu_link_bytes_per_cycle)) + target.exchange_fixed_cycles
    return np.where(active, link, 0)


def transfers_for(
    tiles_of_elem: np.ndarray,
    other_tiles: np.ndarray,
    addresses: np.ndarray,
    space_id: int,
    itemsize: int,
    to_other: bool,
) -> Transfers:
    """Moves of the elements whose tile differs from ``other_tiles`` (element-aligned):
    towards ``other_tiles`` when ``to_other``, else from them."""
    remote = tiles_of_elem != other_tiles
    if not remote.any():
        return Transfers.empty()
    if remote.all():  # no selection copies
        a, b, addr = tiles_of_elem, other_tiles, addresses
    else:
        a, b, addr = tiles_of_elem[remote], other_tiles[remote], addresses[remote]
    src, dst = (a, b) if to_other else (b, a)
    k = addr.size
    return Transfers(
        src.astype(np.int64, copy=False),
        dst.astype(np.int64, copy=False),
        addr.astype(np.int64, copy=False),
        np.broadcast_to(np.int64(space_id), (k,)),  # constant columns cost no memory
        np.broadcast_to(np.int64(itemsize), (k,)),
    )


def split_by_ipu(target: Target, t: Transfers) -> tuple[Transfers, Transfers]:
    """(moves within an IPU, moves between IPUs)."""
    if not len(t) or target.num_ipus == 1:
        return t, Transfers.empty()
    same = (t.src // target.tiles_per_ipu) == (t.dst // target.tiles_per_ipu)
    return t.select(same), t.select(~same)
