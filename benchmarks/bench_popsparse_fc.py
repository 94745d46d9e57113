"""popsparse device benchmarks (issue 5): the dynamic sparse fully-connected layer.

1. CPU time of one ``engine.run`` of ``fully_connected_fwd`` for X = Y = 4096, Z = 64,
   density 1/16 on the Mk2 model (1472 tiles), with a uniformly random pattern (the
   planner's sizes, default options), against references measured in the same run on the
   same pattern and data (issue 17):
   * element-wise float: ``scipy.sparse`` CSR times dense (target: at most 1.5x);
   * 16x16 blocks (half; and float, whose grain block is 8x8): dense ``numpy.matmul`` of the
     same shape in float32 (target: at most 2x), and one ``engine.run`` of the dense
     ``poplin.matmul`` of the same shape and type on the same IPU Model (target: at most
     1x).
   The engine runs with the compiled kernels of the ``fast`` extra (numba) when installed,
   and then also without them (the NumPy path, the default without the extra): both lines
   are printed. Rounds alternate the sides and take the best of ``--repeat`` runs each; the
   lines also give the propagation steps the pattern needs (0 when nothing left its Z
   groups), the ratio with ``metaInfoBucketOversizeProportion`` 1.0 (larger buckets, fewer
   spills), for 16x16 half the ratio with a *balanced* pattern (the density's share of
   blocks in every partition: nothing propagates), and where the host time of a run goes
   (products, bucket shifts and dense-slice copies of the propagation phase, its control,
   the reduction).
2. SIMULATED time (cycles of the execution profile at the model's clock) and TFLOP/s of
   the forward pass for m = k = 4096, n in {4, 64, 1024}, densities 1/4 to 1/32, blocks 1,
   4, 8, 16, float and half, on the Mk2 and Bow models, next to the dense
   ``poplin.matmul`` of the same shape. TFLOP/s count the useful work, ``2 nnz n``; the
   dense line counts ``2 m k n``. ``--quick`` simulates a subset (n = 64, densities 1/8
   and 1/32, blocks 1 and 16); the full table takes long (one compile per line).

3. ``--paper`` (only this): the PopSparse paper's figures (arXiv 2303.16999) next to
   Tremula's, measured as the paper's harness measured them (issue 28,
   graphcore-research/sparsity-benchmarks; ``popsparse_paper.py``): the sparse matmul
   API (planned with GradA) on the harness's pattern (seed 123, and ``--paper-seeds``), the
   dense ``poplin.matmul(W, X)`` with float partials, compute and exchange steps of the
   profile (sync and stream copies excluded; the compute-only rate printed too), best
   over n for each separately, speed-up ``best_sparse / (d best_dense)``; the four
   speed-ups at d = 1/16 and the half block sweep, every point printed with the n of its
   best. A point whose program does not fit the tiles (the harness's compile would fail;
   the benchmark builds with ``debug.allowOutOfMemory``) is printed and not counted. One
   compile per (case, n); the full sweep takes about 35 minutes on a shared host
   (``--paper-ns``, ``--paper-dense-ns`` to restrict n). The dense product is simulated
   at ``--paper-dense-ns`` and planned only (poplin's estimate, which the simulation
   reproduces where both run) at ``--paper-dense-estimate-ns``: building the dense 4096 x
   4096 x 1024 program already takes about 11 GB of host memory here (and its run nine
   minutes), so larger n are not simulated by default.
   ``--paper-dense-breakdown 16384`` (only this) takes the dense plan at those n apart per
   serial step (operand exchange, the AMP vertex's terms, stage 2) next to the cycles the
   paper's rate implies, and shows the cheaper plans a larger memory budget would take
   (``popsparse_paper_dense.py``; planned only, seconds).

Run: ``python benchmarks/bench_popsparse_fc.py [--quick] [--repeat 3] [--rounds 3]
[--skip-cpu] [--cases ew,b16half,b16float] [--skip-simulated] [--machines ipu2,bow]
[--paper [--paper-ns 64,256,1024,2048,4096] [--paper-dense-ns 4,64,256,512]
[--paper-dense-estimate-ns 1024,4096,8192,16384] [--paper-seeds 123,1,2,3]
[--paper-cases 16half] [--paper-what-if fp16_in_fp32_out_conv_units_per_tile=8]]
[--paper-dense-breakdown 16384]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import popsparse_paper  # benchmarks/, on the path when run as a script
import popsparse_paper_dense
import scipy.sparse as sp

from tremula import poplar
from tremula.errors import TremulaError
from tremula.libs import jit, poplin
from tremula.libs.popsparse import COOMatrix, dynamic

SIZE, BATCH, DENSITY = 4096, 64, 1 / 16
MACHINES = {"ipu2": "Mk2", "bow": "Bow"}
NO_OOM = {"debug.allowOutOfMemory": "true"}


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def pattern(rng: np.random.Generator, size: int, block: int, density: float) -> COOMatrix:
    grid = size // block
    idx = rng.choice(grid * grid, size=round(density * grid * grid), replace=False)
    values = rng.standard_normal(idx.size * block * block).astype(np.float32)
    return COOMatrix(values, idx // grid * block, idx % grid * block, (block, block), size, size)


@dataclass
class Layer:
    engine: poplar.Engine
    partitioner: dynamic.Partitioner
    params: dynamic.FullyConnectedParams
    build_seconds: float


def build(machine: str, dtype: poplar.Type, block: int, density: float, n: int, options) -> Layer:
    """A loaded engine running ``fully_connected_fwd`` of an ``SIZE x SIZE`` layer."""
    start = time.perf_counter()
    device = poplar.IPUModel(machine).create_device()
    graph = poplar.Graph(device.target)
    sparsity = dynamic.SparsityParams(block_dimensions=(block, block))
    params = dynamic.FullyConnectedParams.create_with_nz_ratio(sparsity, density, n, 1, SIZE, SIZE)
    weights = dynamic.create_fully_connected_weights(graph, dtype, params, options)
    x = dynamic.create_fully_connected_input(graph, dtype, params, options)
    prog = poplar.Sequence()
    y = dynamic.fully_connected_fwd(graph, weights, x, params, prog, options)
    graph.create_host_write("meta_info", weights.meta_info)
    graph.create_host_write("nz_values", weights.nz_values)
    graph.create_host_write("x", x)
    graph.create_host_read("y", y)
    engine = poplar.Engine(graph, prog, NO_OOM)
    engine.load(device)
    part = dynamic.Partitioner(params, dtype, device.target, options)
    return Layer(engine, part, params, time.perf_counter() - start)


def load(layer: Layer, m: COOMatrix, x: np.ndarray) -> int:
    """Write a pattern and the input; returns the propagation steps it needs."""
    impl = layer.partitioner.create_sparsity_data_impl(m)
    layer.engine.write_tensor("meta_info", impl.meta_info)
    layer.engine.write_tensor("nz_values", impl.nz_values)
    layer.engine.write_tensor("x", x)
    info = layer.partitioner.overflow_info(impl)
    return sum(
        s.compute for s in dynamic.propagation_steps(layer.partitioner.plan.partition.xyz, info)
    )


def balanced(rng: np.random.Generator, layer: Layer, block: int, density: float) -> COOMatrix:
    """A pattern with the density's share of blocks in every (x, y) partition of the plan,
    at random places in it: no bucket overflows, so nothing propagates."""
    plan = layer.partitioner.plan
    rows, cols = [], []
    for x0, nx in zip(plan.starts("x"), plan.sizes("x")):
        for y0, ny in zip(plan.starts("y"), plan.sizes("y")):
            gx, gy = nx // block, ny // block
            idx = rng.choice(gx * gy, size=int(density * gx * gy), replace=False)
            rows.append(x0 + idx // gy * block)
            cols.append(y0 + idx % gy * block)
    r, c = np.concatenate(rows), np.concatenate(cols)
    values = rng.standard_normal(r.size * block * block).astype(np.float32)
    return COOMatrix(values, r, c, (block, block), SIZE, SIZE)


PARTS = (  # what each program of the pass is, by its name
    ("bucket shifts", ("propagation/shift", "propagation/fill")),
    ("dense slices", ("denseSlices",)),
    ("control", ("propagation/init", "propagation/step")),
    ("reduction", ("reduce", "cast")),
    ("products", ("distribution", "propagation/compute")),
)


def parts(engine: poplar.Engine, runs: int) -> str:
    """Host time per run of each part of the pass (compute sets and copies by name)."""
    from tremula.engine import nodes, run

    spent: dict[str, float] = dict.fromkeys([p for p, _ in PARTS] + ["other"], 0.0)
    saved = dict(run.KINDS)

    def timed(kind: type, name: Callable[[Any], str]) -> run.Kind:
        def handler(rt: Any, node: Any, rsel: Any) -> None:
            start = time.perf_counter()
            saved[kind].run(rt, node, rsel)
            label = name(node)
            part = next((p for p, keys in PARTS if any(k in label for k in keys)), "other")
            spent[part] += time.perf_counter() - start

        return dataclasses.replace(saved[kind], run=handler)

    run.KINDS[nodes.OnTileNode] = timed(nodes.OnTileNode, lambda n: n.ccs.name)
    run.KINDS[nodes.ExchangeNode] = timed(nodes.ExchangeNode, lambda n: n.name)
    try:
        for _ in range(runs):
            engine.run()
    finally:
        run.KINDS.update(saved)
    return ", ".join(f"{p} {t / runs * 1e3:.1f}" for p, t in spent.items() if t > 0)


def with_kernels(on: bool, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run with the compiled kernels (the ``fast`` extra) on or off."""

    def run() -> Any:
        previous = jit.set_enabled(on)
        try:
            return fn()
        finally:
            jit.set_enabled(previous)

    return run


def timings(sides: dict[str, Callable[[], Any]], repeat: int, rounds: int) -> dict[str, list]:
    """Best of ``repeat`` runs of every side, per round; rounds alternate the sides so that
    they all see the same load."""
    found: dict[str, list] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, fn in sides.items():
            found[name].append(best(fn, repeat))
    return found


def cpu_time(block: int, dtype: poplar.Type, repeat: int, rounds: int) -> None:
    """The CPU time lines of one case (see the module docstring, part 1)."""
    rng = np.random.default_rng(0)
    m = pattern(rng, SIZE, block, DENSITY)
    x = rng.standard_normal((BATCH, SIZE)).astype(dtype.numpy)
    xf = x.astype(np.float32)
    cases = [(0.3, m), (1.0, m)]
    if block == 16 and dtype == poplar.HALF:  # (float 16x16 plans a grain of 8x8)
        cases.append((0.3, None))
    dense = None if block == 1 else dense_engine("ipu2", dtype, BATCH)
    for oversize, m in cases:
        layer = build(
            "ipu2", dtype, block, DENSITY, BATCH, {"metaInfoBucketOversizeProportion": oversize}
        )
        what = "uniform"
        if m is None:
            m, what = balanced(rng, layer, block, DENSITY), "balanced"
        w = m.to_dense(SIZE, SIZE).astype(np.float32)
        if block == 1:
            csr = sp.csr_matrix(w)
            ref_name, ref = "scipy CSR x dense", lambda csr=csr: csr @ xf.T
        else:
            ref_name, ref = "numpy.matmul (dense, float32)", lambda w=w: np.matmul(xf, w.T)
        steps = load(layer, m, x)
        sides = {"ours": with_kernels(True, layer.engine.run), "ref": ref}
        if jit.available():
            sides["numpy path"] = with_kernels(False, layer.engine.run)
        if dense is not None:
            sides["poplin"] = dense.run
        err = max(error(layer, xf, w, on) for on in (True, False))
        kind = "element-wise" if block == 1 else f"{block}x{block} blocks"
        label = (
            f"{kind} {dtype} {what} (grain {layer.partitioner.plan.block_dimensions}, "
            f"oversize {oversize})"
        )
        print(cpu_line(label, ref_name, timings(sides, repeat, rounds)))
        print(
            f"    {steps} propagation computes; build+compile {layer.build_seconds:.1f} s; "
            f"max relative error {err:.1e}; ms per run: {parts(layer.engine, repeat)}"
        )


def error(layer: Layer, xf: np.ndarray, w: np.ndarray, kernels: bool) -> float:
    """The largest error of the layer's output relative to its largest value."""
    with_kernels(kernels, layer.engine.run)()
    got = layer.engine.read_tensor("y").astype(np.float64)
    return float(np.abs(got - xf.astype(np.float64) @ w.T).max() / np.abs(got).max())


def cpu_line(label: str, ref_name: str, t: dict[str, list]) -> str:
    """One case's times and ratios (best round; the range of the per-round ratios)."""

    def ratio(a: str, b: str) -> str:
        per = np.array(t[a]) / np.array(t[b])
        return f"{min(t[a]) / min(t[b]):.2f} (rounds {per.min():.2f}-{per.max():.2f})"

    line = (
        f"CPU {SIZE}x{SIZE} Z={BATCH} d=1/16 {label}: engine.run {min(t['ours']) * 1e3:.1f} "
        f"ms ({'compiled kernels' if jit.available() else 'NumPy path: no fast extra'}), "
        f"{ref_name} {min(t['ref']) * 1e3:.1f} ms, ratio {ratio('ours', 'ref')}"
    )
    if "poplin" in t:
        line += (
            f"; dense poplin.matmul engine.run {min(t['poplin']) * 1e3:.1f} ms, ratio "
            f"{ratio('ours', 'poplin')}"
        )
    if "numpy path" in t:
        line += (
            f"\n    NumPy path (kernels off): engine.run {min(t['numpy path']) * 1e3:.1f} ms, "
            f"ratio to {ref_name} {ratio('numpy path', 'ref')}"
        )
        if "poplin" in t:
            line += f", to dense poplin.matmul {ratio('numpy path', 'poplin')}"
    return line


@dataclass(frozen=True)
class SparseRun:
    """The simulated forward pass of one layer: cycles, non-zeros, propagation computes."""

    cycles: int
    nnz: int
    steps: int
    layer: Layer


def sparse_run(
    machine: str, dtype: poplar.Type, block: int, density: float, n: int
) -> SparseRun | str:
    """One simulated forward pass on a uniformly random pattern, or why it was not built."""
    rng = np.random.default_rng(1)
    try:
        layer = build(machine, dtype, block, density, n, {})
    except TremulaError as err:
        return f"not built: {err}"
    m = pattern(rng, SIZE, block, density)
    steps = load(layer, m, rng.standard_normal((n, SIZE)).astype(dtype.numpy))
    layer.engine.reset_execution_profile()
    layer.engine.run()
    cycles = layer.engine.get_execution_profile()["simulation"]["cycles"]
    return SparseRun(cycles, m.nz_values.size, steps, layer)


def sparse_simulated(machine: str, dtype: poplar.Type, block: int, density: float, n: int) -> str:
    run = sparse_run(machine, dtype, block, density, n)
    if isinstance(run, str):
        return run
    cycles, steps, layer = run.cycles, run.steps, run.layer
    target = poplar.IPUModel(machine).create_target()
    seconds = cycles / target.tile_clock_frequency
    flops = 2.0 * run.nnz * n
    plan = layer.partitioner.plan
    return (
        f"{seconds * 1e6:8.1f} us {flops / seconds / 1e12:6.2f} TFLOP/s ({cycles} cycles, "
        f"estimate {plan.cost.fwd_cycles}, {steps} propagation computes, partition "
        f"{plan.partition.xyz})"
    )


def dense_engine(machine: str, dtype: poplar.Type, n: int, fc_pass: str = "NONE") -> poplar.Engine:
    """A loaded engine running the dense ``poplin.matmul`` ``[n, SIZE] x [SIZE, SIZE]`` with
    ``fullyConnectedPass`` ``fc_pass`` (``TRAINING_FWD``: the batch stays the AMP's output
    positions; ``NONE``: the planner may swap the operands)."""
    device = poplar.IPUModel(machine).create_device()
    graph = poplar.Graph(device.target)
    opts = {"fullyConnectedPass": fc_pass}
    a = poplin.create_matmul_input_lhs(graph, dtype, (n, SIZE), (SIZE, SIZE), "x", opts)
    b = poplin.create_matmul_input_rhs(graph, dtype, (n, SIZE), (SIZE, SIZE), "w", opts)
    prog = poplar.Sequence()
    poplin.matmul(graph, a, b, prog, options=opts)
    engine = poplar.Engine(graph, prog, NO_OOM)
    engine.load(device)
    return engine


def dense_cycles(machine: str, dtype: poplar.Type, n: int, fc_pass: str = "NONE") -> int:
    """Simulated cycles of the dense ``poplin.matmul`` ``[n, SIZE] x [SIZE, SIZE]`` (see
    :func:`dense_engine`)."""
    engine = dense_engine(machine, dtype, n, fc_pass)
    engine.run()
    return int(engine.get_execution_profile()["simulation"]["cycles"])


def dense_simulated(machine: str, dtype: poplar.Type, n: int) -> str:
    cycles = dense_cycles(machine, dtype, n)
    seconds = cycles / poplar.IPUModel(machine).create_target().tile_clock_frequency
    flops = 2.0 * n * SIZE * SIZE
    return f"{seconds * 1e6:8.1f} us {flops / seconds / 1e12:6.2f} TFLOP/s ({cycles} cycles)"


def simulated(quick: bool, machines: list[str]) -> None:
    ns = (64,) if quick else (4, 64, 1024)
    densities = (1 / 8, 1 / 32) if quick else (1 / 4, 1 / 8, 1 / 16, 1 / 32)
    blocks = (1, 16) if quick else (1, 4, 8, 16)
    for machine, dtype, n in itertools.product(machines, (poplar.FLOAT, poplar.HALF), ns):
        name = MACHINES.get(machine, machine)
        start = time.perf_counter()
        print(f"SIMULATED {name} {dtype} m=k={SIZE} n={n}: dense poplin.matmul "
              f"{dense_simulated(machine, dtype, n)}", flush=True)  # fmt: skip
        for block, density in itertools.product(blocks, densities):
            gc.collect()  # engines hold cycles; large ones must go before the next
            line = sparse_simulated(machine, dtype, block, density, n)
            print(f"    b={block:2d} d=1/{round(1 / density):<2d} sparse fwd {line}", flush=True)
        print(f"    ({time.perf_counter() - start:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="simulate a subset")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-cpu", action="store_true")
    parser.add_argument("--skip-simulated", action="store_true")
    parser.add_argument("--cases", default="ew,b16half,b16float", help="CPU-time cases")
    parser.add_argument("--machines", default="ipu2,bow")
    parser.add_argument("--paper", action="store_true", help="only the paper's tables")
    parser.add_argument("--paper-ns", default="4,64,256,1024,2048,4096", help="sparse n of --paper")
    parser.add_argument(
        "--paper-dense-ns", default="4,64,256,512", help="dense n of --paper, simulated"
    )
    parser.add_argument(
        "--paper-dense-estimate-ns",
        default="1024,4096,8192,16384",
        help="dense n of --paper, poplin's plan estimate only",
    )
    parser.add_argument("--paper-seeds", default="123,1,2,3", help="patterns of --paper")
    parser.add_argument(
        "--paper-cases",
        default="",
        help="sparse cases of --paper only, e.g. 16half,16float (default: all six)",
    )
    parser.add_argument(
        "--paper-what-if",
        default="",
        help="target parameters of the sparse side's Bow model, a what-if "
        "(e.g. fp16_in_fp32_out_conv_units_per_tile=8); the dense side stays Bow",
    )
    parser.add_argument(
        "--paper-dense-breakdown",
        default="",
        help="only the dense reference's plan per serial step at these n (e.g. 16384), "
        "against the paper's rate; planned, not simulated",
    )
    args = parser.parse_args()
    if args.paper_dense_breakdown:
        popsparse_paper_dense.breakdown_tables(
            tuple(int(x) for x in args.paper_dense_breakdown.split(","))
        )
        return
    if args.paper:

        def ints(text: str) -> tuple[int, ...]:
            return tuple(int(x) for x in text.split(","))

        popsparse_paper.paper_tables(
            ints(args.paper_ns),
            ints(args.paper_dense_ns),
            ints(args.paper_dense_estimate_ns),
            ints(args.paper_seeds),
            popsparse_paper.parse_cases(args.paper_cases),
            popsparse_paper.parse_what_if(args.paper_what_if),
        )
        return
    cases = {"ew": (1, poplar.FLOAT), "b16half": (16, poplar.HALF), "b16float": (16, poplar.FLOAT)}
    for name in [] if args.skip_cpu else args.cases.split(","):
        cpu_time(*cases[name], args.repeat, args.rounds)
    if not args.skip_simulated:
        simulated(args.quick, args.machines.split(","))


if __name__ == "__main__":
    main()
