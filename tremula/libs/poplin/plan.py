"""The matmul planner: a pure function from the problem, its types, the options and the
target to a :class:`Plan`, cached.

A plan splits the (possibly grouped) product ``C[G, M, N] = A[G, M, K] @ B[G, K, N]`` into
blocks, one block product per tile and serial step:

* ``G``, ``M`` and ``N`` are cut into blocks of ``block_g``, ``block_m``, ``block_n``
  elements (the last block of a dimension may be shorter); every output block is computed on
  ``blocks_k`` tiles, one per slice of ``K``;
* ``K`` is cut into chunks of ``step_k``; in serial step ``s`` (one compute set each, the
  partials accumulated in place) the ``j``-th tile of a block multiplies chunk
  ``s * blocks_k + j``, so a step's operand blocks plus the partials fit the memory the plan
  may use;
* stage 2 sums the ``blocks_k`` partials of each output element on one of the tiles holding
  them (each tile of a block reduces one piece of it, cut along ``split``) and casts them to
  the output type; it is skipped when there is a single partial of the output type.

``swap`` plans compute ``C^T = B^T A^T`` instead (the planned frame has ``M`` and ``N``
exchanged), which the AMP prefers when ``N`` offers more output positions than ``M``; as in
PopLibs, a pass of a training layer (``fullyConnectedPass`` ``TRAINING_*``, planned
jointly) always swaps (``params.swappable`` False: PopLibs' joint plan forces
``swapOperands = true``).
``method`` is ``amp`` (the accumulating matrix product units, for half and float when the
target has them) or ``mac`` (a dot-product vertex, for ints or where the AMP loses).

Tile numbering puts the two tiles of a super-tile on blocks that read the same operand block
(``share``: ``"a"``, neighbouring ``N`` blocks read one ``A`` block; ``"b"``, neighbouring
``M`` blocks read one ``B`` block), which then reaches both at twice the rate (PopLibs'
exchange estimators' super-tile sharing, the engine's rule); ``""`` when neither pairing is
complete.

Each candidate is costed like the engine runs it (``plan_cost.py``), for operands laid out by
``create_matmul_input_*`` (each operand block spread in equal pieces over the tiles reading
it): per serial step the sync and exchange of the operand blocks a tile does not hold
(``max(sent, received - shared / 2) / exchangeBytesPerCycle``), plus the on-tile estimate
(the AMP or dot-product estimator); then stage 2's exchange (each tile receives the other
partials of its piece and sends those of the other pieces) and reduction. Its temporary
memory is a step's received operand blocks plus the partials, or the partials plus the
stage-2 receive buffer. The cheapest fitting candidates are costed again with shorter K
steps (see :func:`_refine`). The planner picks the cheapest candidate whose temporaries fit
``availableMemoryProportion`` of a tile, breaking ties deterministically (fewer bytes, fewer
tiles, AMP first, no swap first, then the splits); if none fits it picks the one that needs
the least memory.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, replace

import numpy as np

from tremula import poplar
from tremula.libs.poplin import estimators as est
from tremula.libs.poplin.plan_cost import METHODS, _cdiv, _cost, _fit_step, _size
from tremula.poplar.intervals import distinct
from tremula.target import Target

LOOPS = ("", "k", "n")
SHARES = ("", "a", "b")
SPLITS = ("m", "n")


@dataclass(frozen=True)
class MatMulParams:
    """What a plan depends on besides the target (a hashable cache key)."""

    groups: int
    m: int
    k: int
    n: int
    in_type: str
    partials_type: str
    out_type: str
    available_memory_proportion: float = 0.6
    #: Whether the planner tries both operand orders; False for the passes PopLibs plans
    #: jointly (``fullyConnectedPass`` ``TRAINING_*``), whose operands it always swaps
    #: (computes ``C^T = B^T A^T``).
    swappable: bool = True


@dataclass(frozen=True)
class Plan:
    """How a matmul runs; sizes are in the planned frame (``M`` and ``N`` exchanged when
    ``swap``). ``cycles`` is the estimate and ``exchange_cycles + compute_cycles +
    reduce_cycles == cycles``."""

    params: MatMulParams
    method: str
    swap: bool
    share: str
    split: str
    block_g: int
    block_m: int
    block_n: int
    step_k: int
    blocks_g: int
    blocks_m: int
    blocks_n: int
    blocks_k: int
    serial: int
    stage2: bool
    tiles: int
    cycles: int
    exchange_cycles: int
    compute_cycles: int
    reduce_cycles: int
    temp_bytes: int
    fits: bool
    #: ``""`` (one step), ``"k"`` (serial steps over ``K`` chunks, into an accumulator) or
    #: ``"n"`` (serial steps over ``step_n`` columns of each ``N`` block).
    loop: str = ""
    #: Columns of an ``N`` block computed per serial step (``block_n`` unless ``loop`` "n").
    step_n: int = 0

    @property
    def dims(self) -> tuple[int, int, int, int]:
        """``(G, M, K, N)`` of the planned frame."""
        p = self.params
        return (p.groups, p.n, p.k, p.m) if self.swap else (p.groups, p.m, p.k, p.n)

    @property
    def k_chunks(self) -> int:
        """Chunks of ``step_k`` covering ``K``: chunk ``s * blocks_k + j`` runs in serial
        step ``s`` on the ``j``-th tile of its block."""
        return -(-self.params.k // self.step_k)

    def n_step_plan(self) -> Plan:
        """The plan of one serial step of an ``"n"`` loop: the product of ``A`` and
        ``step_n`` columns of every ``N`` block, on the same tiles (same block counts)."""
        p, width = self.params, self.blocks_n * self.step_n
        params = replace(p, m=width) if self.swap else replace(p, n=width)
        return replace(self, params=params, block_n=self.step_n, serial=1, loop="")

    def describe(self) -> str:
        g, m, k, n = self.dims
        share = {"a": ", pairs share A", "b": ", pairs share B", "": ""}[self.share]
        steps = {
            "": "1 step",
            "k": f"{self.serial} serial steps of K={self.step_k} into an accumulator",
            "n": f"{self.serial} serial steps of N={self.step_n} (A broadcast before them)",
        }[self.loop]
        return (
            f"{self.method}{' (swapped)' if self.swap else ''}: blocks "
            f"{self.block_g}x{self.block_m}x{self.block_n} of {g}x{m}x{k}x{n} x "
            f"{self.blocks_k} K slice(s) of K={self.step_k} on {self.tiles} tiles{share}, "
            f"{steps}, stage 2 split along {self.split}; ~{self.cycles} "
            f"cycles ({self.exchange_cycles} exchange, {self.compute_cycles} compute, "
            f"{self.reduce_cycles} reduction), {self.temp_bytes} B temporaries per tile"
        )


def plan_matmul(params: MatMulParams, target: Target) -> Plan:
    """The plan for ``params`` on ``target`` (cached: equal arguments give the same object).

    Requires ``groups, m, k, n >= 1``.
    """
    return _plan(params, target)


@functools.lru_cache(maxsize=512)
def _plan(params: MatMulParams, target: Target) -> Plan:
    in_t = poplar.as_type(params.in_type)
    methods = ["mac"]
    if in_t.is_float and target.conv_units(in_t.size, _size(params.partials_type)) > 0:
        methods.insert(0, "amp")
    # the CPU target simulates no cycles: its plans keep the natural frame, whose row-major
    # output is what the host's following element-wise work reads fastest; PopLibs' joint
    # plans (training passes) force the swap (``swapOperands = true``)
    if target.is_cpu:
        swaps: tuple[bool, ...] = (False,)
    else:
        swaps = (False, True) if params.swappable else (True,)
    from tremula.libs.poplin import plan_loops

    # the splits of every (method, swap) pair costed together (one set of NumPy calls),
    # then listed pair by pair, each pair's one-step candidates before its N loops
    pairs = list(itertools.product(methods, swaps))
    splits = [block_splits(params, target, method, swap) for method, swap in pairs]
    pair = np.repeat(np.arange(len(pairs)), [s[0].size for s in splits])
    cols = [np.concatenate(c) for c in zip(*splits)]
    method = np.array([METHODS.index(m) for m, _ in pairs])[pair]
    swap = np.array([int(s) for _, s in pairs])[pair]
    one_step = _candidates(params, target, method, swap, cols)
    n_loops = plan_loops.n_loop_candidates(params, target, method, swap, cols)
    both = _concat([one_step, n_loops])
    pair_of = np.zeros((len(METHODS), 2), dtype=np.int64)  # (method, swap) -> pair
    for i, (m, s) in enumerate(pairs):
        pair_of[METHODS.index(m), int(s)] = i
    kind = np.repeat([0, 1], [one_step["bg"].size, n_loops["bg"].size])
    rows = _shortlist(both)
    rows = rows[np.lexsort((kind[rows], pair_of[both["method"][rows], both["swap"][rows]]))]
    table = {key: a[rows] for key, a in both.items()}
    return _choose(params, _concat([table, _refine(params, target, table)]))


def _concat(tables: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.concatenate([t[key] for t in tables]) for key in tables[0]}


#: Candidates whose K step is revisited, and the smallest step tried (share of the largest).
REFINE_CANDIDATES = 16
REFINE_MIN_STEP = 0.5


def _shortlist(table: dict[str, np.ndarray]) -> np.ndarray:
    """The rows of the candidates that may still win: when some fit, the fitting ones no
    slower than the :data:`REFINE_CANDIDATES`-th fastest (ties included); else all of
    them (ascending)."""
    fits = table["fits"] == 1
    if not fits.any():
        return np.arange(fits.size)
    cycles = table["cycles"][fits]
    bound = np.partition(cycles, min(REFINE_CANDIDATES, cycles.size) - 1)[
        min(REFINE_CANDIDATES, cycles.size) - 1
    ]
    return np.flatnonzero(fits & (table["cycles"] <= bound))


def _refine(
    params: MatMulParams, target: Target, table: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The cheapest fitting candidates again with every shorter K step down to half the
    longest that fits: fewer, longer steps save per-step overheads, but a step that
    divides the tile's share of ``K`` evenly wastes no work on a short last chunk."""
    fits = np.flatnonzero((table["fits"] == 1) & (table["loop"] != LOOPS.index("n")))
    best = fits[np.argsort(table["cycles"][fits], kind="stable")[:REFINE_CANDIDATES]]
    out = []
    for method in distinct(table["method"][best]):
        rows = best[table["method"][best] == method]
        grain = est.AMP_IN_CHANS if METHODS[method] == "amp" else 1
        units = _cdiv(table["step"][rows], grain)
        lo = np.maximum(1, (units * REFINE_MIN_STEP).astype(np.int64))
        count = units - lo + 1
        row = np.repeat(rows, count)
        unit = np.repeat(units, count) - (
            np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
        )
        block = tuple(table[key][row] for key in ("bg", "bm", "bn", "bkt"))
        blocks = tuple(table[key][row] for key in ("ng", "nm", "nn"))
        step = np.minimum(unit * grain, block[3])
        cost = _cost(params, target, table["method"][row], block, blocks, step)
        cost["method"], cost["swap"] = table["method"][row], table["swap"][row]
        out.append(cost)
    return _concat(out) if out else {key: a[:0] for key, a in table.items()}


def block_sizes(d: int, grain: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct block sizes for a dimension of ``d`` elements cut in multiples of ``grain``
    (the last block may be shorter), with their block counts, at most ``limit`` blocks."""
    units = -(-d // grain)
    counts = np.arange(1, units + 1, dtype=np.int64)
    sizes = distinct(np.minimum(_cdiv(units, counts) * grain, d))
    blocks = _cdiv(d, sizes)
    keep = blocks <= limit
    return sizes[keep], blocks[keep]


def _combos(counts: list[np.ndarray], limit: int) -> list[np.ndarray]:
    """Index tuples into ``counts`` whose product of counts is at most ``limit``."""
    idx = [np.arange(counts[0].size)]
    prod = counts[0]
    for c in counts[1:]:
        p2 = prod[:, None] * c[None, :]
        r, j = np.nonzero(p2 <= limit)
        idx = [i[r] for i in idx] + [j]
        prod = p2[r, j]
    return idx


def grains(params: MatMulParams, target: Target, method: str) -> tuple[int, int]:
    """Grains of ``N`` and ``K`` blocks: the AMP's passes of output channels and its input
    groups; 1 for dot products."""
    if method != "amp":
        return 1, 1
    in_size, p_size = _size(params.in_type), _size(params.partials_type)
    return est.amp_out_chans(target, in_size, p_size), est.AMP_IN_CHANS


def block_splits(params: MatMulParams, target: Target, method: str, swap: bool) -> list[np.ndarray]:
    """Every split of the planned frame in blocks that fits the tiles: ``[bg, bm, bn, bkt,
    ng, nm, nn, nk]``, block sizes and counts (``bkt``: a tile's share of ``K``)."""
    pm, pn = (params.n, params.m) if swap else (params.m, params.n)
    n_grain, k_grain = grains(params, target, method)
    T = target.num_tiles
    dims = [(params.groups, 1), (pm, 1), (pn, n_grain), (params.k, k_grain)]
    sizes = [block_sizes(d, grain, T) for d, grain in dims]
    idx = _combos([s[1] for s in sizes], T)
    return [sizes[d][0][idx[d]] for d in range(4)] + [sizes[d][1][idx[d]] for d in range(4)]


def method_grains(params: MatMulParams, target: Target, method: np.ndarray) -> np.ndarray:
    """:func:`grains` of each candidate's method (indices into :data:`METHODS`): an array
    ``[2, candidates]`` of the grains of ``N`` and of ``K``."""
    table = np.array([grains(params, target, m) for m in METHODS], dtype=np.int64)
    return table[method].T


def _candidates(
    params: MatMulParams,
    target: Target,
    method: np.ndarray,
    swap: np.ndarray,
    splits: list[np.ndarray],
) -> dict[str, np.ndarray]:
    """The one-step (or K loop) candidates of ``splits``, each of its ``method`` (an index
    into :data:`METHODS`) and ``swap``."""
    bg, bm, bn, bkt, ng, nm, nn, nk = splits
    k_grain = method_grains(params, target, method)[1]
    step = _fit_step(params, target, (bg, bm, bn, bkt), (nm, nn, nk), k_grain)
    out = _cost(params, target, method, (bg, bm, bn, bkt), (ng, nm, nn), step)
    out["method"] = method
    out["swap"] = swap
    return out


def _choose(params: MatMulParams, t: dict[str, np.ndarray]) -> Plan:
    """The cheapest fitting candidate (or the smallest if none fits), ties broken by the
    keys listed in the module docstring."""
    fits = t["fits"].astype(bool)
    pool = np.flatnonzero(fits) if fits.any() else np.arange(fits.size)
    first, second = (t["cycles"], t["temp"]) if fits.any() else (t["temp"], t["cycles"])
    pool = pool[first[pool] == first[pool].min()]
    keys = (t["sn"], t["nk"], t["nn"], t["nm"], t["ng"], t["swap"], t["method"], t["loop"])
    keys = (*keys, t["tiles"], second)  # type: ignore[assignment]
    i = int(pool[np.lexsort(tuple(k[pool] for k in keys))[0]])
    v = {k: int(a[i]) for k, a in t.items()}
    return Plan(
        params=params,
        method=METHODS[v["method"]],
        swap=bool(v["swap"]),
        share=SHARES[v["share"]],
        split=SPLITS[v["split"]],
        block_g=v["bg"],
        block_m=v["bm"],
        block_n=v["bn"],
        step_k=v["step"],
        blocks_g=v["ng"],
        blocks_m=v["nm"],
        blocks_n=v["nn"],
        blocks_k=v["nk"],
        serial=v["serial"],
        stage2=bool(v["stage2"]),
        tiles=v["tiles"],
        cycles=v["cycles"],
        exchange_cycles=v["exchange"],
        compute_cycles=v["compute"],
        reduce_cycles=v["reduce"],
        temp_bytes=v["temp"],
        fits=bool(v["fits"]),
        loop=LOOPS[v["loop"]],
        step_n=v["sn"],
    )
