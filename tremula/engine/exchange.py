"""Exchange plans: the bytes each tile sends and receives in one exchange, and their cost.

Costs: an internal exchange takes
``fixed + ceil(max(sent, received) / exchangeBytesPerCycle)`` cycles on each active tile,
and, being statically scheduled, ends on every participating tile at once; a global
(inter-IPU) exchange is also bounded by the IPU-link bandwidth between each pair of IPUs.

Moves are kept as *runs*: consecutive addresses going from one tile to another. All the
counting (an element sent once per tile however many tiles receive it, received once per
tile however many vertices read it, shared by the two tiles of a super-tile, carried once
over the links to another IPU however many of its tiles take it, exchange instructions per
contiguous region) is interval arithmetic on runs, so compile time and
memory grow with the number of runs, not of elements.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tremula.engine.tilelayout import TileLayout
from tremula.poplar.intervals import sort_kind
from tremula.target import Target

_SPAN = np.int64(1) << 41  # addresses are < 2^41: one span per (tile, space) key
_FIELDS = ("src", "dst", "start", "length", "space", "itemsize")


@dataclass(frozen=True, eq=False)
class Transfers:
    """Runs of element moves: ``length`` consecutive elements from address ``start`` of
    space ``space`` (elements of ``itemsize`` bytes) go from tile ``src`` to tile ``dst``."""

    src: np.ndarray
    dst: np.ndarray
    start: np.ndarray
    length: np.ndarray
    space: np.ndarray
    itemsize: np.ndarray

    @staticmethod
    def empty() -> Transfers:
        z = np.zeros(0, dtype=np.int64)
        return Transfers(z, z, z, z, z, z)

    @staticmethod
    def concat(parts: list[Transfers]) -> Transfers:
        parts = [p for p in parts if p.src.size]
        if not parts:
            return Transfers.empty()
        if len(parts) == 1:
            return parts[0]
        return Transfers(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))

    def select(self, mask: np.ndarray) -> Transfers:
        return Transfers(*(getattr(self, f)[mask] for f in _FIELDS))

    def __len__(self) -> int:
        return int(self.src.size)

    @property
    def bytes(self) -> np.ndarray:
        return self.length * self.itemsize

    @cached_property
    def extent(self) -> _Extent:
        """The ranges the exchange planner's unions ask of these runs (found once)."""
        return _Extent.of(self)


@dataclass(frozen=True, eq=False)
class _Extent:
    """Ranges of a non-empty set of runs: one past the largest space id (and the space of
    every run, if one), one past the largest end (``span``), the longest run (and whether
    every run is that long), each space's element size (None where runs of one space differ
    in it), and whether every tile and start is non-negative and every run non-empty (what
    :func:`_merge` requires)."""

    spaces: int
    only_space: int | None  # the space of every run, if they share one
    span: int
    longest: int
    uniform: bool  # every run as long as the longest
    sizes: np.ndarray | None
    mergeable: bool

    @staticmethod
    def of(t: Transfers) -> _Extent:
        lows = [int(a.min()) for a in (t.src, t.dst, t.start, t.length)]
        low_space, spaces = int(t.space.min()), int(t.space.max()) + 1
        longest = int(t.length.max())
        span = int(t.start.max()) + longest + 1
        mergeable = min(lows[:3]) >= 0 and lows[3] >= 1
        sizes = _itemsize_by_space(t, spaces, low_space)
        only = low_space if low_space == spaces - 1 else None
        return _Extent(spaces, only, span, longest, lows[3] == longest, sizes, mergeable)


@dataclass(frozen=True, eq=False)
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


@dataclass(frozen=True, eq=False)
class _Union:
    """The union of the runs of each (tile, space): the merged intervals ``[start, end)`` of
    addresses, in (tile, space, address) order."""

    tile: np.ndarray
    space: np.ndarray
    start: np.ndarray
    end: np.ndarray
    itemsize: np.ndarray

    def bytes_by_tile(self, num_tiles: int) -> np.ndarray:
        weights = (self.end - self.start) * self.itemsize
        return np.bincount(self.tile, weights=weights, minlength=num_tiles).astype(np.int64)


def _sort_keyed(key: np.ndarray, value: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """The order sorting runs by ``(key, value)`` (``0 <= value < span``) and the sorted
    ``key * span + value``: one sort of one integer, much faster than ``lexsort``'s stable
    passes (runs equal in both have the same key and value, so which comes first does not
    matter to the callers). Keys too large for the product are replaced by their rank."""
    if int(key.max(initial=0)) >= (1 << 62) // span:
        key = np.unique(key, return_inverse=True)[1].astype(np.int64)
    combined = key * np.int64(span) + value
    order = np.argsort(combined, kind=sort_kind(combined))
    return order, combined[order]


@dataclass(frozen=True, eq=False)
class _Merged:
    """Merged intervals of runs keyed by an integer, in (key, address) order: each one's
    key and its bounds as ``key * span + address``."""

    key: np.ndarray
    first: np.ndarray
    end: np.ndarray
    span: int

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``(start, end)`` addresses of each interval."""
        base = self.key * self.span
        return self.first - base, self.end - base


def _merge(
    key: np.ndarray, start: np.ndarray, length: np.ndarray, keys: int, span: int, uniform: bool
) -> _Merged:
    """The merged intervals of runs keyed by ``key`` (touching runs merge), for keys in
    ``[0, keys)``, starts at least 0 and runs of at least one element ending before
    ``span``, with ``keys * span < 2^62``: found from the starts and the ends sorted each
    on its own.

    For runs sorted by start, a merged interval ends before run ``i + 1`` exactly when the
    ``i + 1`` smallest ends all come before its start (a run ending there cannot start after
    it, runs being at least one element long), so the reach of the runs so far is the
    ``i``-th smallest end and no run needs to travel with its length: two sorts of integers
    replace an ``argsort`` and its gathers. Keys are ``span`` apart, so that no run of one
    key touches the next key's; in 32-bit integers where they fit (sorts twice as fast,
    half the memory). Runs all of one length (``uniform``) have their ends in the order of
    their starts: one sort."""
    dtype = np.int32 if keys * span < 1 << 31 else np.int64
    lo = np.multiply(key, span, dtype=dtype, casting="unsafe")
    np.add(lo, start, out=lo, casting="unsafe")
    kind = sort_kind(lo)  # (the ends are in order where the starts are)
    if uniform:
        lo.sort(kind=kind)  # (made here: sorted in place)
        hi = lo + int(length[0])
    else:
        hi = np.add(lo, length, dtype=dtype, casting="unsafe")
        lo.sort(kind=kind)  # (both made here: sorted in place)
        hi.sort(kind=kind)
    head = np.empty(lo.size, dtype=bool)
    head[0] = True
    np.greater(lo[1:], hi[:-1], out=head[1:])
    tail = np.empty_like(head)  # the last run of each merged interval
    tail[:-1] = head[1:]
    tail[-1] = True
    first = lo[head]
    return _Merged(first // dtype(span), first, hi[tail], span)


def _itemsize_by_space(t: Transfers, spaces: int, low: int) -> np.ndarray | None:
    """Each space's element size (``spaces`` of them, ``low`` the smallest space id of a
    run), or None where runs of one space differ in it."""
    table = np.zeros(spaces, dtype=np.int64)
    if low == spaces - 1:  # one space (the usual case)
        size = int(t.itemsize[0])
        if int(t.itemsize.min()) != size or int(t.itemsize.max()) != size:
            return None
        table[low] = size
        return table
    table[t.space] = t.itemsize
    return table if np.array_equal(table[t.space], t.itemsize) else None


def _union(tile: np.ndarray, t: Transfers, tiles: int) -> _Union:
    """The union of the runs of each (``tile``, space), for tiles below ``tiles``."""
    if not len(t):
        z = np.zeros(0, dtype=np.int64)
        return _Union(z, z, z, z, z)
    ext = t.extent
    one, sizes = ext.only_space, ext.sizes
    spaces = 1 if one is not None else ext.spaces  # keys: (tile, space) pairs
    key = tile if one is not None else tile * spaces + t.space
    if ext.mergeable and sizes is not None and tiles * spaces * ext.span < 1 << 62:
        merged = _merge(key, t.start, t.length, tiles * spaces, ext.span, ext.uniform)
        start, end = merged.bounds()
        if one is not None:
            size = np.broadcast_to(sizes[one], merged.key.shape)
            return _Union(merged.key, np.full_like(merged.key, one), start, end, size)
        space = merged.key % spaces
        return _Union(merged.key // spaces, space, start, end, sizes[space])
    order, s = _sort_keyed(key, t.start, int(_SPAN))
    e = s + t.length[order]
    reach = np.maximum.accumulate(e)
    before = np.r_[np.int64(-1), reach[:-1]]
    heads = np.flatnonzero(s > before)  # each starts a merged interval (touching runs merge)
    ends = reach[np.r_[heads[1:] - 1, s.size - 1]] if s.size else reach
    idx = order[heads]
    first = t.start[idx]
    return _Union(tile[idx], t.space[idx], first, ends - (s[heads] - first), t.itemsize[idx])


def _super_tile_shared(target: Target, recv: _Union, ext: _Extent) -> np.ndarray:
    """Bytes each tile receives that the other tile of its super-tile also receives: the
    pair shares one receive bus and takes such data at twice the rate (as PopLibs' exchange
    estimators have it). Computed as the length covered twice by the two tiles' merged intervals."""
    n, pair = target.num_tiles, target.tiles_per_super_tile
    if pair < 2 or recv.tile.size < 2:
        return np.zeros(n, dtype=np.int64)
    group = recv.tile // pair
    one, sizes = ext.only_space, ext.sizes
    num_spaces = 1 if one is not None else ext.spaces  # keys: (group, space) pairs
    key = group if one is not None else group * num_spaces + recv.space
    if sizes is not None:
        # the sorted events alone say it all: the low bit of ``2 * position + starts``
        # is the event's kind, the position its key, and the key's space its item size;
        # positions are keys a power of two apart past the last end, 32-bit where they
        # fit (a sort twice as fast)
        bits = max(int(recv.end.max()), 1).bit_length()  # 2^bits > every end
        wide = (int(key.max()) + 1) << (bits + 1) >= 1 << 31
        if wide:
            bits = int(_SPAN).bit_length() - 1
        dtype = np.int64 if wide else np.int32
        at = np.left_shift(key, bits, dtype=dtype)
        # each interval's start then its end: a tile's events are in order already (its
        # intervals are disjoint and sorted), so the sort merges two runs per group
        event = np.empty(2 * at.size, dtype=dtype)
        np.add(recv.start, at, out=event[0::2], casting="unsafe")
        np.add(recv.end, at, out=event[1::2], casting="unsafe")
        event <<= 1
        event[0::2] += 1
        event.sort(kind=sort_kind(event))
        starts = event & 1
        pos = np.right_shift(event, 1, out=event)  # (the events, taken apart in place)
        keys = pos + starts  # an end lies past its interval's first element
        keys -= 1
        keys >>= bits
        delta = np.left_shift(starts, 1, out=starts)
        delta -= 1
        if one is not None:
            item = sizes[one]
        else:
            item = sizes[keys % num_spaces]
    else:
        offset = key * _SPAN  # keyed by the pair
        pos = np.r_[recv.start + offset, recv.end + offset]
        delta = np.r_[np.ones(recv.start.size, np.int64), -np.ones(recv.end.size, np.int64)]
        keys = np.r_[key, key]
        item = np.r_[recv.itemsize, recv.itemsize]
        order = np.argsort(pos * 2 + (delta > 0), kind="stable")
        pos, delta, keys, item = pos[order], delta[order], keys[order], item[order]
    cover = np.cumsum(delta, out=delta)
    twice = cover[:-1] >= pair
    twice &= keys[1:] == keys[:-1]
    lengths = np.diff(pos) * (item if np.ndim(item) == 0 else item[:-1])
    shared = np.bincount(keys[:-1][twice], weights=lengths[twice])
    per_group = np.bincount(
        np.arange(shared.size) // num_spaces, weights=shared, minlength=n // pair + 1
    )
    out = np.repeat(per_group, pair)[:n]
    return out.astype(np.int64)


def _regions(t: Transfers, layout: TileLayout | None, num_tiles: int) -> np.ndarray:
    """Exchange regions each tile receives: maximal runs contiguous in the sending tile's
    memory (in logical address order when no layout is given)."""
    ext = t.extent
    spaces = 1 if ext.only_space is not None else ext.spaces  # keys: (dst, src, space)
    keys = num_tiles * num_tiles * spaces
    key = np.multiply(t.dst, num_tiles, dtype=np.int32 if keys < 1 << 31 else np.int64)
    key += t.src
    if spaces > 1:
        key = key * spaces + t.space
    start, length, uniform = t.start, t.length, ext.uniform
    if layout is not None:
        start, length, key, split = _in_tile_memory(layout, t, key)
        uniform = uniform and not split
    span = ext.span if layout is None else int(start.max()) + int(length.max()) + 1
    if ext.mergeable and keys * span < 1 << 62:
        merged = _merge(key, start, length, keys, span, uniform)
        return np.bincount(merged.key // (num_tiles * spaces), minlength=num_tiles).astype(np.int64)
    order, s = _sort_keyed(key, start, span)
    reach = np.maximum.accumulate(s + length[order])
    heads = s > np.r_[np.int64(-1), reach[:-1]]
    return np.bincount((key[order] // spaces)[heads] // num_tiles, minlength=num_tiles).astype(
        np.int64
    )


def _in_tile_memory(
    layout: TileLayout, t: Transfers, key: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """The runs of ``t`` as runs of tile memory (:meth:`TileLayout.local_runs`: split where
    a run's tile changes), each piece's ``key`` (that of its run), and whether any run was
    split."""
    one = t.extent.only_space
    if one is not None:
        local, length, run = layout.local_runs(one, t.start, t.length)
        return local, length, key if run is None else key[run], run is not None
    parts, split = [], False
    for sid in np.flatnonzero(np.bincount(t.space)).tolist():
        sel = np.flatnonzero(t.space == sid)
        local, length, run = layout.local_runs(sid, t.start[sel], t.length[sel])
        parts.append((local, length, key[sel] if run is None else key[sel][run]))
        split = split or run is not None
    local, length, key = (np.concatenate(c) for c in zip(*parts))
    return local, length, key, split


def plan_exchange(
    target: Target,
    t: Transfers,
    kind: str = "internal",
    local_bytes: np.ndarray | None = None,
    layout: TileLayout | None = None,
    by_source: Transfers | None = None,
) -> ExchangePlan:
    """The exchange moving ``t``; ``local_bytes`` adds on-tile copying at memcpy speed;
    ``layout`` places elements in tile memory (for counting exchange code regions).

    Moves are named by the address each element is read from, unless ``by_source`` is
    given: then ``t`` names them by the address written (a ``Copy``, which may write one
    element to several addresses) and ``by_source`` holds the same moves named by the
    address read. A source tile sends each element it holds once however many tiles
    receive it, and the two tiles of a super-tile share the receive of an element both
    take; each tile receives every address written on it. Between IPUs (``kind ==
    "global"``) an element crosses the links from its IPU to another once however many
    tiles of that IPU take it (:func:`_link_cycles`)."""
    n = target.num_tiles
    zero = np.zeros(n, dtype=np.int64)
    if len(t):
        read = t if by_source is None else by_source
        sent = _union(read.src, read, n).bytes_by_tile(n)
        recv_u = _union(t.dst, t, n)
        recv = recv_u.bytes_by_tile(n)
        regions = _regions(t, layout, n)
        effective = recv
        if kind == "internal" and target.supports_super_tile_send_receive:
            shared_u = recv_u if by_source is None else _union(read.dst, read, n)
            effective = recv - _super_tile_shared(target, shared_u, read.extent) // 2
    else:
        read = t
        sent = recv = regions = effective = zero
    busy = np.maximum(sent, effective)
    cycles = np.where(
        busy > 0, target.exchange_fixed_cycles + -(-busy // target.exchange_bytes_per_cycle), 0
    )
    if local_bytes is not None:
        cycles = cycles + np.where(
            local_bytes > 0, -(-local_bytes // target.memcpy_bytes_per_cycle), 0
        )
    if kind == "global" and len(t):
        cycles = np.maximum(cycles, _link_cycles(target, read, cycles > 0))
    code = regions * target.exchange_code_bytes_per_region
    code = code + np.where(sent > 0, target.exchange_code_bytes_per_region, 0)
    return ExchangePlan(
        kind, sent, recv, cycles.astype(np.int64), code.astype(np.int64), int(recv.sum())
    )


def _link_cycles(target: Target, read: Transfers, active: np.ndarray) -> np.ndarray:
    """Inter-IPU traffic is limited by the links between each pair of IPUs (as the IPU Model's
    ``globalExchangeConstraints``: the bytes of each (source IPU, destination IPU) flow
    over the links' bandwidth). ``read``
    names the moves by the address read, so an element that several tiles of one IPU take
    loads the flow once: its tile sends it once (as on the chip) and the destination IPU's
    exchange delivers it to each of them."""
    per_ipu = target.tiles_per_ipu
    pair = (read.src // per_ipu) * target.num_ipus + read.dst // per_ipu
    load = _union(pair, read, target.num_ipus**2).bytes_by_tile(target.num_ipus**2)
    worst = float(load.max(initial=0))
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
    towards ``other_tiles`` when ``to_other``, else from them, as runs of consecutive
    addresses between one pair of tiles."""
    remote = tiles_of_elem != other_tiles
    if not remote.any():
        return Transfers.empty()
    if remote.all():  # no selection copies
        a, b, addr = tiles_of_elem, other_tiles, addresses
    else:
        a, b, addr = tiles_of_elem[remote], other_tiles[remote], addresses[remote]
    brk = np.ones(addr.size, dtype=bool)
    brk[1:] = (addr[1:] != addr[:-1] + 1) | (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    first = np.flatnonzero(brk)
    length = np.diff(np.r_[first, addr.size]).astype(np.int64)
    a, b = a[first].astype(np.int64), b[first].astype(np.int64)
    src, dst = (a, b) if to_other else (b, a)
    k = first.size
    return Transfers(
        src,
        dst,
        addr[first].astype(np.int64),
        length,
        np.full(k, space_id, dtype=np.int64),
        np.full(k, itemsize, dtype=np.int64),
    )


def split_by_ipu(target: Target, t: Transfers) -> tuple[Transfers, Transfers]:
    """(moves within an IPU, moves between IPUs)."""
    if not len(t) or target.num_ipus == 1:
        return t, Transfers.empty()
    same = (t.src // target.tiles_per_ipu) == (t.dst // target.tiles_per_ipu)
    return t.select(same), t.select(~same)


def cross_replica_link(target: Target, pairs: np.ndarray) -> tuple[str, float]:
    """The links a copy between replicas uses and their bytes per cycle: the IPU-Links
    when every pair is in one IPU-Link domain (``target.ipu_link_domain_size`` IPUs, a
    replica taking ``target.num_ipus`` of them), else the slower GW-Links of the gateways."""
    domain = (pairs * target.num_ipus) // max(1, target.ipu_link_domain_size)
    if pairs.size and np.any(domain[:, 0] != domain[:, 1]):
        return "GW-Link", target.gw_link_bytes_per_cycle
    return "IPU-Link", target.ipu_link_bytes_per_cycle
