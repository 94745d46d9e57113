"""poplin.matmul benchmarks (issue 3, PopLibs: poplin).

1. Planning time of a 1024 x 1024 x 1024 float matmul on the Mk2 model (cache cleared;
   target: under 100 ms).
2. Wall-clock time of one ``engine.run`` of a 1024^3 float32 matmul on the Mk2 model
   (1472 tiles) against ``numpy.matmul`` of the same operands in the same run (target: at
   most 2x in issue 3, 1.5x in issue 27), for operands from ``create_matmul_input_*`` and
   for plain linearly mapped ones. Each round takes the best of ``--repeat`` runs of each;
   the rounds give a range (the host may be shared).
3. Simulated performance (SIMULATED: cycles of the execution profile) of float and half
   matmuls on the Mk2 model, as TFLOP/s and as a share of the AMP peak
   (``Target.peak_flops``), with the planner's estimate beside it.
4. The planner's ESTIMATES for shapes too slow to simulate here (the estimate equals the
   simulation within a few cycles where both exist, see
   ``tests/libs/poplin/test_poplin_plan.py``).
5. ``--paper`` (only this table): the shape of the PopSparse paper's dense curve (arXiv
   2303.16999, as quoted in issue 17: m = k = 4096, FP16 inputs with FP32 partials, a
   1,472-tile IPU whose generation the paper does not give). The planner's estimated
   TFLOP/s on Mk2 and Bow at each n, next to the published figures, and each figure over
   its own large-n figure (the curve's shape, which does not depend on the clock): target
   within 15 % of the paper's. Two products: the plain ``matmul`` of ``[m, k] x [k, n]``
   (the planner may swap the operands) and the forward pass of a training FC layer,
   ``x [n, k] x W [k, m]`` with ``fullyConnectedPass`` ``TRAINING_FWD``, which PopLibs
   plans jointly and never swaps: the batch ``n`` stays the AMP's output positions.

Run: ``python benchmarks/bench_poplin_matmul.py [--size 1024] [--repeat 5] [--rounds 5]
[--simulate 1024x1024x1024] [--simulate-half 4096x4096x4096,4096x8192x4096]
[--estimate 8192] [--partials float,half] [--paper] [--clock wall|cpu] [--only-run]``
(``--clock cpu``: the run ratios by this process's CPU time; ``--only-run``: only item 2).
Issue 3's target, a large half matmul at 70 % of the AMP peak in simulated cycles
(4096x8192x4096 with half partials: 72.5 % then), predates PopLibs' serial loops (a reduction
per serial step, issue 17): that shape is now planned at 65.1 %, as the paper's dense curve
(230 TFLOP/s on a Bow, 66 % of its peak) suggests an IPU reaches.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tremula import poplar
from tremula import target as target_presets
from tremula.libs import poplin
from tremula.libs.poplin import plan as plan_mod

#: the clock of the run ratios (``--clock``): wall time, or this process's CPU time (both
#: sides run on one thread, so on a machine other work loads their CPU time is steadier)
CLOCK = time.perf_counter


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = CLOCK()
        fn()
        times.append(CLOCK() - start)
    return min(times)


def planning_time(n: int, repeat: int) -> float:
    target = poplar.IPUModel().create_target()

    def plan() -> None:
        plan_mod._plan.cache_clear()
        poplin.matmul_plan(target, poplar.FLOAT, (n, n), (n, n))

    return best(plan, repeat)


def build(shape: tuple[int, int, int], dtype: poplar.Type, created: bool, opts=None) -> tuple:
    """A loaded engine computing ``c = a @ b`` on the Mk2 model, and the operands."""
    m, k, n = shape
    device = poplar.IPUModel().create_device()
    graph = poplar.Graph(device.target)
    prog = poplar.Sequence()
    if created:
        a = poplin.create_matmul_input_lhs(graph, dtype, (m, k), (k, n), "a", opts)
        b = poplin.create_matmul_input_rhs(graph, dtype, (m, k), (k, n), "b", opts)
    else:
        a = graph.add_variable(dtype, (m, k), "a", mapping="linear")
        b = graph.add_variable(dtype, (k, n), "b", mapping="linear")
    c = poplin.matmul(graph, a, b, prog, options=opts)
    graph.create_host_write("a", a)
    graph.create_host_write("b", b)
    graph.create_host_read("c", c)
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((m, k)).astype(dtype.numpy)
    B = rng.standard_normal((k, n)).astype(dtype.numpy)
    engine.write_tensor("a", A)
    engine.write_tensor("b", B)
    return engine, device.target, A, B


def run_ratio(n: int, repeat: int, rounds: int, created: bool) -> None:
    start = time.perf_counter()
    engine, _, A, B = build((n, n, n), poplar.FLOAT, created)
    built = time.perf_counter() - start
    engine.run()
    ours, ref = [], []
    for _ in range(rounds):
        ours.append(best(engine.run, repeat))
        ref.append(best(lambda: np.matmul(A, B), repeat))
    ratios = np.array(ours) / np.array(ref)
    got = engine.read_tensor("c")
    err = float(np.abs(got - A.astype(np.float64) @ B).max() / np.abs(got).max())
    kind = "created" if created else "linear"
    print(
        f"run {n}^3 float32 on Mk2, {kind} operands: engine.run {min(ours) * 1e3:.1f} ms, "
        f"numpy.matmul {min(ref) * 1e3:.1f} ms, ratio {min(ours) / min(ref):.2f} (rounds "
        f"{ratios.min():.2f}-{ratios.max():.2f}; target <= 1.5); build+compile {built:.1f} s; "
        f"max relative error {err:.1e}"
    )


def efficiency(target: poplar.Target, plan: poplin.Plan, cycles: float) -> tuple[float, float]:
    p = plan.params
    flops = 2.0 * p.groups * p.m * p.k * p.n
    seconds = cycles / target.tile_clock_frequency
    peak = target.peak_flops(poplar.as_type(p.in_type).size, 4)
    return flops / seconds / 1e12, flops / seconds / peak


def simulated(shape: tuple[int, int, int], dtype: poplar.Type, partials: str) -> None:
    m, k, n = shape
    opts = {"partialsType": partials}
    start = time.perf_counter()
    engine, target, _, _ = build(shape, dtype, True, opts)
    built = time.perf_counter() - start
    engine.reset_execution_profile()
    engine.run()
    cycles = engine.get_execution_profile()["simulation"]["cycles"]
    plan = poplin.matmul_plan(target, dtype, (m, k), (k, n), options=opts)
    tflops, share = efficiency(target, plan, cycles)
    print(
        f"SIMULATED {m}x{k}x{n} {dtype} ({partials} partials) on Mk2: {cycles} cycles "
        f"(estimate {plan.cycles}), "
        f"{tflops:.1f} TFLOP/s, {100 * share:.1f} % of the AMP peak "
        f"({target.peak_flops(dtype.size, 4) / 1e12:.1f} TFLOP/s); build+compile {built:.0f} s"
    )


def estimated(n: int, dtype: poplar.Type, partials: str) -> None:
    target = poplar.IPUModel().create_target()
    opts = {"partialsType": partials}
    plan = poplin.matmul_plan(target, dtype, (n, n), (n, n), options=opts)
    tflops, share = efficiency(target, plan, plan.cycles)
    print(
        f"ESTIMATED {n}^3 {dtype} ({partials} partials) on Mk2: {plan.cycles} cycles, "
        f"{tflops:.1f} TFLOP/s, {100 * share:.1f} % of the AMP peak\n    {plan.describe()}"
    )


#: Dense TFLOP/s of the PopSparse paper at m = k = 4096 (issue 17; None: not quoted).
PAPER_HALF = {4: 19.0, 64: 130.0, 1024: None, 16384: 230.0}
PAPER_FLOAT_LARGE = 55.0
PAPER_LARGE = 16384  # "large n": the end of the paper's sweep
#: Dense FP16 TFLOP/s at n = 1024 implied by the paper's sparse figures if their best n is
#: 1024 (16x16 half: 27 TFLOP/s x 16 / speed-up 1.9 = 227; element-wise half: 5.8 x 16 /
#: 0.4 = 232); not a published dense figure.
PAPER_IMPLIED_1024 = 230.0


#: The products of the table: label -> (fullyConnectedPass, batch-major operands).
PAPER_PRODUCTS = {
    "matmul [m,k]x[k,n]": ("NONE", False),
    "FC fwd x[n,k]xW[k,m], TRAINING_FWD": ("TRAINING_FWD", True),
}


def paper_plan(machine: str, dtype: poplar.Type, n: int, product: str) -> poplin.Plan:
    """The plan of a ``4096 x 4096 x n`` product (float partials) on a preset."""
    target = target_presets.preset(machine)
    fc_pass, batch_major = PAPER_PRODUCTS[product]
    opts = {"partialsType": "float", "fullyConnectedPass": fc_pass}
    a, b = ((n, 4096), (4096, 4096)) if batch_major else ((4096, 4096), (4096, n))
    return poplin.matmul_plan(target, dtype, a, b, options=opts)


def paper_figures(machine: str, dtype: poplar.Type, n: int, product: str) -> float:
    """Planned TFLOP/s of a ``4096 x 4096 x n`` product (float partials) on a preset."""
    plan = paper_plan(machine, dtype, n, product)
    return efficiency(target_presets.preset(machine), plan, plan.cycles)[0]


#: How a plan's serial steps read, by its loop.
LOOPS = {
    "": lambda p: "1 step",
    "k": lambda p: f"{p.serial} K steps into an accumulator",
    "n": lambda p: f"{p.serial} steps of {p.step_n} columns",
}


def paper_breakdown(product: str) -> None:
    """Where each n's cycles go (the plan's phases; the simulated profile equals them): the
    operand exchange with its syncs, the block products (and the share of the AMP peak
    their vertices reach on the busiest tile), the stage-2 exchange and reduction."""
    target = target_presets.preset("mk2")
    print(f"  phases (Mk2 cycles, share of the total), {product}:")
    for n in PAPER_HALF:
        plan = paper_plan("mk2", poplar.HALF, n, product)
        _, m, _, n_ = plan.dims
        k_steps = 1 if plan.loop == "n" else plan.serial
        tile_macs = plan.block_g * plan.block_m * plan.block_n * plan.step_k * k_steps
        peak = target.max_macs_per_cycle_per_tile(2, 4)
        amp = tile_macs / peak / max(plan.compute_cycles, 1)
        parts = (plan.exchange_cycles, plan.compute_cycles, plan.reduce_cycles)
        share = "/".join(f"{100 * c / plan.cycles:.0f}" for c in parts)
        print(
            f"  {n:>6}: {plan.cycles:>8} = {parts[0]} exchange + {parts[1]} products "
            f"({plan.method}, {100 * amp:.0f} % of peak) + {parts[2]} stage 2 ({share} %); "
            f"blocks {plan.block_m}x{plan.block_n} of {m}x{n_}, {plan.blocks_k} K slice(s) of "
            f"{plan.step_k}, {LOOPS[plan.loop](plan)}, {plan.tiles} tiles"
        )


def paper_table() -> None:
    """The paper's dense FP16 curve next to Tremula's Mk2 and Bow estimates of each product,
    and the shape of each curve (figure over its own large-n figure)."""
    print("dense FP16, m = k = 4096, float partials (planner estimates), TFLOP/s;")
    print(f"ratio: figure / its own n = {PAPER_LARGE} figure; off: Mk2 ratio / paper ratio - 1")
    for product in PAPER_PRODUCTS:
        ours = {
            m: {n: paper_figures(m, poplar.HALF, n, product) for n in PAPER_HALF}
            for m in ("mk2", "bow")
        }
        print(f"{product}:")
        print(f"{'n':>6} {'paper':>6} {'Mk2':>6} {'Bow':>6}   {'paper':>6} {'Mk2':>6} {'off':>6}")
        for n, published in PAPER_HALF.items():
            print(_paper_row(n, published, ours["mk2"], ours["bow"][n]))
        implied = PAPER_IMPLIED_1024 / PAPER_HALF[PAPER_LARGE]  # type: ignore[operator]
        ratio = ours["mk2"][1024] / ours["mk2"][PAPER_LARGE]
        print(
            f"  n = 1024 against the figure the paper's sparse tables imply "
            f"(~{PAPER_IMPLIED_1024:.0f}): ratio {implied:.3f}, Mk2 {ratio:.3f}, "
            f"off {100 * (ratio / implied - 1):+.0f}%"
        )
        flt = [paper_figures(m, poplar.FLOAT, PAPER_LARGE, product) for m in ("mk2", "bow")]
        print(
            f"  FP32 at n = {PAPER_LARGE}: paper ~{PAPER_FLOAT_LARGE:.0f}, Mk2 {flt[0]:.1f}, "
            f"Bow {flt[1]:.1f} TFLOP/s"
        )
        paper_breakdown(product)


def _paper_row(n: int, published: float | None, mk2: dict[int, float], bow: float) -> str:
    ratio = mk2[n] / mk2[PAPER_LARGE]
    if published is None:
        pub, pub_ratio, off = "-", "-", "-"
    else:
        paper_ratio = published / PAPER_HALF[PAPER_LARGE]  # type: ignore[operator]
        pub, pub_ratio = f"{published:.0f}", f"{paper_ratio:.3f}"
        off = f"{100 * (ratio / paper_ratio - 1):+.0f}%"
    return f"{n:>6} {pub:>6} {mk2[n]:>6.1f} {bow:>6.1f}   {pub_ratio:>6} {ratio:>6.3f} {off:>6}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--simulate", default="1024x1024x1024", help="float and half shapes")
    parser.add_argument(
        "--simulate-half", default="4096x4096x4096,4096x8192x4096", help="large half shapes"
    )
    parser.add_argument("--estimate", default="8192")
    parser.add_argument("--partials", default="float,half", help="partials types of simulated half")
    parser.add_argument("--paper", action="store_true", help="only the paper's dense curve")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="the run ratios' clock"
    )
    parser.add_argument("--only-run", action="store_true", help="only the run ratios")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    if args.only_run:
        for created in (True, False):
            run_ratio(args.size, args.repeat, args.rounds, created)
        return
    if args.paper:
        paper_table()
        return
    print(f"planning {args.size}^3: {planning_time(args.size, args.repeat) * 1e3:.1f} ms "
          f"(target < 100 ms)")  # fmt: skip
    for created in (True, False):
        run_ratio(args.size, args.repeat, args.rounds, created)
    for text in filter(None, args.simulate.split(",")):
        shape = tuple(int(x) for x in text.split("x"))
        simulated(shape, poplar.FLOAT, "float")  # type: ignore[arg-type]
        for partials in args.partials.split(","):
            simulated(shape, poplar.HALF, partials)  # type: ignore[arg-type]
    for text in filter(None, args.simulate_half.split(",")):
        shape = tuple(int(x) for x in text.split("x"))
        for partials in args.partials.split(","):
            simulated(shape, poplar.HALF, partials)  # type: ignore[arg-type]
    for n in (int(x) for x in args.estimate.split(",") if x):
        estimated(n, poplar.FLOAT, "float")
        for partials in ("float", "half"):
            estimated(n, poplar.HALF, partials)


if __name__ == "__main__":
    main()
