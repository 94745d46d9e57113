"""The PopSparse paper's comparison, measured the way its harness measured it (issue 28;
the harness is graphcore-research/sparsity-benchmarks, ``ipu/matmul_bench.cpp``):
``bench_popsparse_fc.py --paper``.

* **Sparse**: ``[m][k] (sparse) x [k][n]`` through the matmul API
  (``create_sparse_dense_matmul_lhs`` / ``_rhs`` + ``sparse_dense_matmul``, empty options:
  planned with GradA, as PopLibs' matmul always plans), on the harness's pattern: exactly
  ``ceil(d blocks)`` blocks, the first of all block positions (row-major over the block
  grid) after libstdc++'s ``std::shuffle`` with ``std::default_random_engine(seed)``
  (``minstd_rand0``), seed 123 as the harness, plus other seeds for the spread.
* **Dense**: ``poplin.matmul(W [m][k], X [k][n])`` with ``partialsType`` float (no
  fully-connected pass: the planner tries both operand orders).
* **Time**: from the first run's execution profile, the OnTileExecute steps ("compute")
  plus the DoExchange steps ("exchange"), each step from its earliest start to its latest
  end; Sync and StreamCopy steps excluded. The program holds only the product, so every
  compute step is the harness's ``*matmul*`` step. Rates count useful FLOPs, ``2 m n k d``
  (dense: d = 1), at Bow's clock (the paper's chip, see :data:`PAPER_CHIP`).
* **Best over n**, dense and sparse separately; speed-up = ``best_sparse / (d best_dense)``.
* **Only programs that fit**: the benchmark builds with ``debug.allowOutOfMemory`` so that
  every point runs, but the harness's compile on hardware fails when a tile overflows;
  a point whose fullest tile exceeds the tile's memory is printed and not counted (for
  the dense estimates, the plan's temporaries plus an even share of the operands and the
  output, a lower bound of the built program).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import popsparse_breakdown  # benchmarks/, on the path when run as a script

from tremula import poplar
from tremula.errors import TremulaError
from tremula.libs import jit, poplin
from tremula.libs.popsparse import COOMatrix, dynamic
from tremula.target import Target

SIZE = 4096
NO_OOM = {"debug.allowOutOfMemory": "true"}
TYPES = {"half": poplar.HALF, "float": poplar.FLOAT}
#: The paper at m = k = 4096, d = 1/16 (issue 28): speed-up by (block, type), and the
#: half block sweep in non-zero TFLOP/s; the dense maxima (TFLOP/s) by type.
PAPER_SPEEDUP = {(1, "half"): 0.4, (1, "float"): 0.9, (16, "half"): 1.9, (16, "float"): 3.8}
PAPER_BLOCK_TFLOPS = {1: 5.8, 4: 14.0, 8: 21.0, 16: 27.0}
PAPER_DENSE_TFLOPS = {"half": 230.0, "float": 55.0}
PAPER_CHIP = (
    "Rates are at Bow's clock (1.85 GHz): the harness ran on hardware, and the paper's dense "
    "FP16 maximum, ~230 TFLOP/s, is 66 % of a Bow's peak and 92 % of an Mk2's "
    "(the harness defaults to hardware). Speed-ups are ratios of cycles."
)
HARNESS_SEED = 123
MINSTD_A, MINSTD_M = 16807, 2**31 - 1


def _shuffle(values: np.ndarray, seed: int) -> None:
    """``std::shuffle(values, std::default_random_engine(seed))`` as libstdc++ does it, in
    place: ``minstd_rand0`` (``x <- 16807 x mod 2^31-1``), and for i = 1 .. N-1 a swap with
    j uniform in [0, i] by libstdc++'s downscaling rejection (range ``2^31 - 3``: ``scaling =
    range // (i+1)``, draw ``r = x - 1`` until ``r < (i+1) scaling``, ``j = r // scaling``).
    Valid while ``(2^31-3) // N < N`` (the single-draw path; every grid here)."""
    x = seed % MINSTD_M
    if x == 0:
        x = 1
    urngrange = MINSTD_M - 2  # max - min = (2^31 - 2) - 1
    for i in range(1, values.size):
        scaling = urngrange // (i + 1)
        past = (i + 1) * scaling
        while True:
            x = (MINSTD_A * x) % MINSTD_M
            r = x - 1
            if r < past:
                break
        j = r // scaling
        values[i], values[j] = values[j], values[i]


_shuffle_kernel = jit.kernel(_shuffle)


def harness_positions(num_blocks: int, keep: int, seed: int) -> np.ndarray:
    """The first ``keep`` of ``0 .. num_blocks-1`` after the harness's shuffle."""
    if (MINSTD_M - 2) // num_blocks >= num_blocks:
        raise ValueError(
            f"{num_blocks} positions: libstdc++ shuffles pairs at once there (not modelled)"
        )
    values = np.arange(num_blocks, dtype=np.int64)
    (_shuffle_kernel if jit.available() else _shuffle)(values, seed)
    return values[:keep]


def harness_pattern(m: int, k: int, block: int, d: float, seed: int) -> COOMatrix:
    """The harness's ``[m][k]`` pattern: exactly ``ceil(d blocks)`` blocks at the shuffled
    positions (row-major over the block grid), values uniform in [-1, 1)."""
    rows, cols = m // block, k // block
    keep = math.ceil(d * rows * cols)
    pos = np.sort(harness_positions(rows * cols, keep, seed))
    values = np.random.default_rng(seed).uniform(-1, 1, keep * block * block)
    return COOMatrix(
        values.astype(np.float32), pos // cols * block, pos % cols * block, (block, block), m, k
    )


@dataclass(frozen=True)
class Timed:
    """Profile cycles of one run: compute (OnTileExecute), exchange (DoExchange), sync,
    stream copies, and the total; and the bytes of the program's fullest tile."""

    compute: int
    exchange: int
    sync: int
    stream: int
    total: int
    peak_tile_bytes: int

    @property
    def measured(self) -> int:
        """What the harness times: compute and exchange."""
        return self.compute + self.exchange


#: The phases of a sparse pass, by the names of its programs and compute sets.
PHASES = (
    ("propagation", "propagation/"),
    ("reduction", "/reduce"),
    ("reduction", "/cast"),
    ("distribution", "distribution"),
)


def _phase(step: dict, programs: list[dict], cs_names: list[str]) -> str:
    if step["type"] == "OnTileExecute":
        name = cs_names[step["computeSet"]]
    else:
        name = step.get("name") or str(programs[step["program"]].get("name", ""))
    return next((phase for phase, key in PHASES if key in name), "other")


def timed(engine: poplar.Engine, by_phase: dict[str, int] | None = None) -> Timed:
    """Run once from a fresh profile; the harness's reading of its steps. With
    ``by_phase``, also the compute and exchange cycles of each phase of a sparse pass
    (``"distribution compute"``, ``"reduction exchange"`` ...), the same steps."""
    engine.reset_execution_profile()
    engine.run()
    sim = engine.get_execution_profile()["simulation"]
    by: dict[str, int] = {}
    kinds = {"OnTileExecute": "compute", "DoExchange": "exchange"}
    graph = engine.get_graph_profile()
    for step in sim["steps"]:
        by[step["type"]] = by.get(step["type"], 0) + int(step["cycles"])
        if by_phase is not None and step["type"] in kinds:
            phase = _phase(step, graph["programs"], graph["computeSets"]["names"])
            key = f"{phase} {kinds[step['type']]}"
            by_phase[key] = by_phase.get(key, 0) + int(step["cycles"])
    return Timed(
        by.get("OnTileExecute", 0),
        by.get("DoExchange", 0),
        by.get("Sync", 0),
        by.get("StreamCopy", 0),
        int(sim["cycles"]),
        peak_tile_bytes(graph),
    )


def peak_tile_bytes(graph_profile: dict) -> int:
    """Bytes of the program's fullest tile (the graph profile's ``totalIncludingGaps``):
    the benchmark builds with ``debug.allowOutOfMemory``, so a program that would not fit
    still runs; the harness's compile on hardware would fail instead."""
    by_tile = graph_profile["memory"]["byTile"]["totalIncludingGaps"]
    return int(np.max(np.asarray(by_tile)))


def tile_bytes() -> int:
    """Memory of one Bow tile."""
    return int(poplar.IPUModel("bow").create_target().memory_bytes_per_tile)


def fit_note(peak: int) -> str:
    """``peak`` bytes on the fullest tile as a share of the tile, and whether it fits."""
    share = f"{peak:,} B on the fullest tile ({100 * peak / tile_bytes():.1f} %)"
    return share if peak <= tile_bytes() else f"{share}: DOES NOT FIT, not counted"


def sparse_engine(
    dtype: poplar.Type, block: int, d: float, n: int, what_if: Mapping[str, int] | None = None
):
    """A loaded engine of the sparse matmul, its partitioner (the same options) and its
    target: Bow, or Bow with the target parameters ``what_if`` changed."""
    device = poplar.IPUModel("bow", **(what_if or {})).create_device()
    graph = poplar.Graph(device.target)
    sparsity = dynamic.SparsityParams(block_dimensions=(block, block))
    params = dynamic.MatMulParams.create_with_nz_ratio(sparsity, d, 1, SIZE, SIZE, n)
    lhs = dynamic.create_sparse_dense_matmul_lhs(graph, dtype, params, {})
    rhs = dynamic.create_sparse_dense_matmul_rhs(graph, dtype, params, {})
    prog = poplar.Sequence()
    dynamic.sparse_dense_matmul(graph, lhs, rhs, prog)
    graph.create_host_write("meta_info", lhs.meta_info)
    graph.create_host_write("nz_values", lhs.nz_values)
    engine = poplar.Engine(graph, prog, NO_OOM)
    engine.load(device)
    return engine, dynamic.Partitioner(params, dtype, device.target, {}), device.target


@dataclass(frozen=True)
class SparsePoint:
    """One sparse case at one n on one pattern."""

    n: int
    seed: int
    time: Timed
    plan: str
    steps: int  # propagation computes the pattern needs
    phases: dict[str, int]  # compute and exchange cycles by phase (see :func:`timed`)
    memory: str  # the planner's temporary bytes and the bound they met (see :func:`plan_memory`)
    breakdown: str  # block plans: the distribution's slowest tile, term by term


def sparse_points(
    type_name: str,
    block: int,
    d: float,
    n: int,
    seeds: tuple[int, ...],
    what_if: Mapping[str, int] | None = None,
) -> list[SparsePoint] | str:
    """The sparse case at ``n`` on each seed's pattern (one compile), or why not built."""
    gc.collect()  # engines hold cycles; large ones must go before the next
    try:
        engine, part, target = sparse_engine(TYPES[type_name], block, d, n, what_if)
    except TremulaError as err:
        return f"not built: {str(err)[:200]}"
    except MemoryError:  # the host's limit (e.g. ``ulimit -v``), not the IPU's
        return "not built: out of host memory"
    try:
        return _run_points(engine, part, target, block, d, n, seeds)
    except MemoryError:
        return "not run: out of host memory"


def _run_points(
    engine: poplar.Engine,
    part: dynamic.Partitioner,
    target: Target,
    block: int,
    d: float,
    n: int,
    seeds: tuple[int, ...],
) -> list[SparsePoint]:
    """Each seed's pattern loaded into the built engine and run once."""
    plan = part.plan
    out = []
    for seed in seeds:
        impl = part.create_sparsity_data_impl(harness_pattern(SIZE, SIZE, block, d, seed))
        engine.write_tensor("meta_info", impl.meta_info)
        engine.write_tensor("nz_values", impl.nz_values)
        steps = dynamic.propagation_steps(plan.partition.xyz, part.overflow_info(impl))
        computes = sum(s.compute for s in steps)
        phases: dict[str, int] = {}
        t = timed(engine, phases)
        why = popsparse_breakdown.describe(target, plan, impl.meta_info)
        out.append(SparsePoint(n, seed, t, str(plan.partition.xyz), computes, phases,
                               plan_memory(plan), why))  # fmt: skip
    return out


def plan_memory(plan: dynamic.Plan) -> str:
    """The plan's temporary bytes per tile and the memory bound the planner met: PopLibs'
    planner bounds them by ``availableMemoryProportion`` of the tile and, when no partition
    fits, doubles the bound (up to twice the tile)."""
    proportion = plan.options.available_memory_proportion
    first = int(proportion * tile_bytes())
    bound = plan.memory_bound
    how = (
        "no bound met"
        if bound is None
        else f"within availableMemoryProportion {proportion} ({first:,} B)"
        if bound <= first
        else f"no partition within {proportion} of the tile: bound doubled to {bound:,} B"
    )
    return f"plan temporaries {plan.cost.temp_bytes:,} B per tile, {how}"


def dense_time(type_name: str, n: int) -> Timed:
    """``poplin.matmul(W [SIZE][SIZE], X [SIZE][n])`` with float partials."""
    gc.collect()
    device = poplar.IPUModel("bow").create_device()
    graph = poplar.Graph(device.target)
    dtype = TYPES[type_name]
    opts = {"partialsType": "float"}
    shapes = ((SIZE, SIZE), (SIZE, n))
    w = poplin.create_matmul_input_lhs(graph, dtype, *shapes, "w", opts)
    x = poplin.create_matmul_input_rhs(graph, dtype, *shapes, "x", opts)
    prog = poplar.Sequence()
    poplin.matmul(graph, w, x, prog, options=opts)
    engine = poplar.Engine(graph, prog, NO_OOM)
    engine.load(device)
    return timed(engine)


def dense_estimate(type_name: str, n: int) -> poplin.Plan:
    """poplin's plan of the same product: the conv planner's total (spec
    profile-and-machine 3.5), which the simulation of the built program reproduces where
    both were run (``--paper`` prints both at the n it simulates)."""
    target = poplar.IPUModel("bow").create_target()
    opts = {"partialsType": "float"}
    return poplin.matmul_plan(target, TYPES[type_name], (SIZE, SIZE), (SIZE, n), options=opts)


def dense_planned_bytes(plan: poplin.Plan, type_name: str, n: int) -> int:
    """Bytes per tile of the dense program as planned (a lower bound of the built
    program's fullest tile: no code, vertex state or exchange buffers): the plan's
    temporaries plus an even share of ``W``, ``X`` and the output (data type)."""
    size = TYPES[type_name].size
    tiles = poplar.IPUModel("bow").create_target().num_tiles
    return plan.temp_bytes + -(-(SIZE * SIZE + 2 * SIZE * n) * size // tiles)


def tflops(flops: float, cycles: int) -> float:
    clock = poplar.IPUModel("bow").create_target().tile_clock_frequency
    return flops * clock / max(cycles, 1) / 1e12


def off(ours: float, paper: float) -> str:
    return f"{100 * (ours / paper - 1):+.0f}%"


@dataclass(frozen=True)
class Best:
    """The best rate over n of one side, the n that gave it, and how it was found."""

    rate: float
    n: int
    how: str  # "simulated" or "estimate"


def dense_table(ns: tuple[int, ...], estimate_ns: tuple[int, ...]) -> dict[str, Best]:
    """Print the dense points: simulated at ``ns`` (compute and exchange steps of the
    profile), poplin's plan estimate at every n of both lists; the best by type, over the
    simulated points and the estimates at n not simulated."""
    best: dict[str, Best] = {}
    print(f"dense poplin.matmul(W [{SIZE}][{SIZE}], X [{SIZE}][n]), float partials, Bow:")
    for type_name in TYPES:
        for n in sorted(set(ns) | set(estimate_ns)):
            f = 2.0 * SIZE * SIZE * n
            plan = dense_estimate(type_name, n)
            line = (f"  {type_name:>5} n={n:<6} plan estimate {plan.cycles:>9} cycles (exchange "
                    f"{plan.exchange_cycles}, partials {plan.compute_cycles}, reduction "
                    f"{plan.reduce_cycles}; loop {plan.loop or '-'} x {plan.serial}, swap "
                    f"{plan.swap}): {tflops(f, plan.cycles):6.1f} TFLOP/s")  # fmt: skip
            found = Best(tflops(f, plan.cycles), n, "estimate")
            peak = dense_planned_bytes(plan, type_name, n)
            line += f"\n  {'':>5} {'':<8} planned: {fit_note(peak)}"
            if n in ns:
                t = dense_time(type_name, n)
                rate, rate_c = tflops(f, t.measured), tflops(f, t.compute)
                line += (f"\n  {'':>5} {'':<8} simulated compute {t.compute:>9} + exchange "
                         f"{t.exchange:>8} (sync {t.sync}, streams {t.stream}) cycles: "
                         f"{rate:6.1f} TFLOP/s (compute only {rate_c:6.1f}; estimate "
                         f"{100 * (plan.cycles / t.measured - 1):+.2f} %); built: "
                         f"{fit_note(t.peak_tile_bytes)}")  # fmt: skip
                found = Best(rate, n, "simulated")
                peak = t.peak_tile_bytes
            print(line, flush=True)
            fits = peak <= tile_bytes()
            if fits and found.rate > best.get(type_name, Best(0.0, 0, "")).rate:
                best[type_name] = found
        paper = PAPER_DENSE_TFLOPS[type_name]
        # no fitting point: the speed-ups print as nan
        b = best.setdefault(type_name, Best(math.nan, 0, "no point fits"))
        print(f"  {type_name} best {b.rate:.1f} TFLOP/s at n = {b.n} ({b.how}), paper "
              f"~{paper:.0f} ({off(b.rate, paper)})")  # fmt: skip
    return best


def sparse_case(
    type_name: str,
    block: int,
    d: float,
    ns: tuple[int, ...],
    seeds: tuple[int, ...],
    what_if: Mapping[str, int] | None = None,
) -> dict[int, Best]:
    """Print the case's points; the best non-zero TFLOP/s over n (and its n), by seed."""
    best: dict[int, Best] = {}
    flops_n = 2.0 * SIZE * SIZE * d
    for n in ns:
        points = sparse_points(type_name, block, d, n, seeds, what_if)
        if isinstance(points, str):
            print(f"  b={block:<2} {type_name:>5} n={n:<5} {points}")
            continue
        fits = points[0].time.peak_tile_bytes <= tile_bytes()
        print(f"  b={block:<2} {type_name:>5} n={n:<5} {points[0].memory}; "
              f"{fit_note(points[0].time.peak_tile_bytes)}")  # fmt: skip
        for p in points:
            rate, rate_c = tflops(flops_n * n, p.time.measured), tflops(flops_n * n, p.time.compute)
            if fits and rate > best.get(p.seed, Best(0.0, 0, "")).rate:
                best[p.seed] = Best(rate, n, "simulated")
            print(f"  b={block:<2} {type_name:>5} n={n:<5} seed {p.seed:<4} plan {p.plan:<13} "
                  f"compute {p.time.compute:>8} + exchange {p.time.exchange:>7} (sync "
                  f"{p.time.sync}) cycles, {p.steps:>2} prop. computes: {rate:6.2f} TFLOP/s "
                  f"(compute only {rate_c:6.2f})", flush=True)  # fmt: skip
            split = ", ".join(f"{k} {v}" for k, v in sorted(p.phases.items()))
            print(f"      phases: {split}", flush=True)
            if p.breakdown:
                print(f"      {p.breakdown}", flush=True)
    return best


def paper_tables(
    sparse_ns: tuple[int, ...],
    dense_ns: tuple[int, ...],
    dense_estimate_ns: tuple[int, ...],
    seeds: tuple[int, ...],
    only: set[tuple[int, str]] | None = None,
    what_if: Mapping[str, int] | None = None,
) -> None:
    """Every paper point next to Tremula's (see the module docstring); the sparse cases
    ``only`` (``(block, type)``) when given, and the sparse side on Bow with the target
    parameters ``what_if`` changed when given (a what-if: the dense side stays Bow)."""
    print(PAPER_CHIP)
    if what_if:
        print(f"WHAT-IF: the sparse side runs on Bow with {dict(what_if)}; the dense side on Bow")
    dense = dense_table(dense_ns, dense_estimate_ns)
    d = 1 / 16
    cases: dict[tuple[int, str], dict[int, Best]] = {}
    for block, type_name in [*PAPER_SPEEDUP, *((b, "half") for b in PAPER_BLOCK_TFLOPS)]:
        if (block, type_name) not in cases:
            run = only is None or (block, type_name) in only
            cases[block, type_name] = (
                sparse_case(type_name, block, d, sparse_ns, seeds, what_if) if run else {}
            )
    harness = HARNESS_SEED if HARNESS_SEED in seeds else seeds[0]

    def spread(values: list[float]) -> str:
        return f"{min(values):.2f}-{max(values):.2f}" if len(values) > 1 else "-"

    print(f"\nm = k = {SIZE}, d = 1/16, Bow; sparse n in {sparse_ns} (simulated), dense n in "
          f"{tuple(sorted(set(dense_ns) | set(dense_estimate_ns)))} (simulated at {dense_ns}, "
          f"else poplin's plan estimate); seed {harness} (the harness's), the range over seeds "
          f"{seeds}; speed-up = best sparse / (d best dense)")  # fmt: skip
    print(f"{'point':>24} {'paper':>6} {'ours':>7} {'off':>6} {'seeds':>11}  from")
    for (block, type_name), paper in PAPER_SPEEDUP.items():
        best = cases[block, type_name]
        name = f"speed-up b={block} {type_name}"
        if not best:
            print(f"{name:>24} {paper:>6.1f}  (no point built or not run)")
            continue
        dn = dense[type_name]
        ups = {s: b.rate / (d * dn.rate) for s, b in best.items()}
        b = best.get(harness, next(iter(best.values())))
        ours = b.rate / (d * dn.rate)
        print(f"{name:>24} {paper:>6.1f} {ours:>7.2f} {off(ours, paper):>6} "
              f"{spread(list(ups.values())):>11}  sparse {b.rate:.2f} at n = {b.n}, dense "
              f"{dn.rate:.1f} at n = {dn.n} ({dn.how})")  # fmt: skip
    for block, paper in PAPER_BLOCK_TFLOPS.items():
        best = cases[block, "half"]
        name = f"sweep b={block} half TFLOP/s"
        if not best:
            print(f"{name:>24} {paper:>6.1f}  (no point built or not run)")
            continue
        b = best.get(harness, next(iter(best.values())))
        print(f"{name:>24} {paper:>6.1f} {b.rate:>7.2f} {off(b.rate, paper):>6} "
              f"{spread([x.rate for x in best.values()]):>11}  n = {b.n}")  # fmt: skip
    for type_name, paper in PAPER_DENSE_TFLOPS.items():
        dn = dense[type_name]
        print(f"{f'dense {type_name} max TFLOP/s':>24} {paper:>6.1f} {dn.rate:>7.1f} "
              f"{off(dn.rate, paper):>6} {'-':>11}  n = {dn.n} ({dn.how})")  # fmt: skip


def parse_cases(text: str) -> set[tuple[int, str]] | None:
    """``"16half,1float"`` -> ``{(16, "half"), (1, "float")}``; None for "" (every case)."""
    if not text:
        return None
    known = {
        f"{b}{t}": (b, t) for b, t in [*PAPER_SPEEDUP, *((b, "half") for b in PAPER_BLOCK_TFLOPS)]
    }
    out = set()
    for name in text.split(","):
        if name not in known:
            raise ValueError(f"--paper-cases: unknown case {name!r}; known: {sorted(known)}")
        out.add(known[name])
    return out


def parse_what_if(text: str) -> dict[str, int] | None:
    """``"a=8,b=2"`` -> ``{"a": 8, "b": 2}`` (integer target parameters); None for ""."""
    if not text:
        return None
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"--paper-what-if: expected name=integer, got {item!r}")
        out[key.strip()] = int(value)
    poplar.IPUModel("bow", **out).create_target()  # an unknown name fails here, clearly
    return out
