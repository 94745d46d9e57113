"""Where the cycles of the PopSparse paper's dense reference go (issue 28, the dense side):
``bench_popsparse_fc.py --paper-dense-breakdown 16384``.

For ``poplin.matmul(W [4096][4096], X [4096][n])`` with float partials on Bow, poplin's
plan (the estimate the simulation reproduces, see ``popsparse_paper.dense_table``) taken
apart per serial step with the estimators' own terms:

* the operand exchange (the broadcast before an N loop, then each step's columns);
* the AMP partials (PopLibs' ``ConvPartial1x1Out`` shape, ``profile-and-machine.md`` 3.5):
  per pass of ``conv_units`` output channels over an input group of 16, the pass and
  weight-load cycles and the workers' fixed and per-position cycles, against the
  ``MACs / max_macs_per_cycle_per_tile`` ideal;
* stage 2 (the reduction of the float partials of the K slices): its exchange and its
  ``ReduceAdd`` compute;

next to the cycles the paper's rate implies. It also re-plans with larger
``availableMemoryProportion`` to show the cheaper plans the memory budget excludes, with
the temporaries they need against the budget: which plan the product gets is decided there.
Nothing is simulated (a few seconds).
"""

from __future__ import annotations

import popsparse_paper as pp  # benchmarks/, on the path when run as a script

from tremula import poplar
from tremula.libs import poplin
from tremula.libs.poplin import estimators as est

#: Larger memory budgets re-planned to show what the default 0.6 excludes.
WIDER_BUDGETS = (0.7, 0.8, 1.0)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _target() -> poplar.Target:
    return poplar.IPUModel("bow").create_target()


def _plan(type_name: str, n: int, proportion: float = 0.6) -> poplin.Plan:
    opts = {"partialsType": "float", "availableMemoryProportion": proportion}
    shapes = ((pp.SIZE, pp.SIZE), (pp.SIZE, n))
    return poplin.matmul_plan(_target(), pp.TYPES[type_name], *shapes, options=opts)


def amp_terms(plan: poplin.Plan) -> dict[str, int]:
    """One serial step's AMP vertex on a full block, by the terms of
    ``estimators.amp_cycles``: passes (input groups x output-channel passes), per pass
    the supervisor's pass and weight-load cycles and the workers' fixed and per-position
    cycles, the per-vertex cycles, and the ideal at the tile's MACs per cycle."""
    target = _target()
    in_size = poplar.as_type(plan.params.in_type).size
    p_size = poplar.as_type(plan.params.partials_type).size
    W = target.num_worker_contexts
    units = est.amp_out_chans(target, in_size, p_size)
    core = _cdiv(est.AMP_IN_CHANS, est.amp_load_elems(target, in_size))
    weight_load = _cdiv(units * est.AMP_IN_CHANS * in_size, est.AMP_COEFF_LOAD_BYTES_PER_CYCLE)
    step_n = plan.step_n or plan.block_n
    m, k = plan.block_m, plan.step_k
    in_groups, passes = _cdiv(k, est.AMP_IN_CHANS), _cdiv(step_n, units)
    per_worker = _cdiv(m, W)
    positions = max(per_worker - est.AMP_PIPELINE_POSITIONS, 0)
    total = int(est.amp_cycles(target, in_size, p_size, plan.block_g, m, k, step_n))
    ideal = _cdiv(
        plan.block_g * m * k * step_n, target.max_macs_per_cycle_per_tile(in_size, p_size)
    )
    return {
        "passes": in_groups * passes,
        "pass + weight load": est.AMP_PASS_CYCLES + weight_load,
        "workers fixed": W * est.AMP_WORKER_CYCLES,
        "workers positions": W * positions * core,
        "vertex fixed": total - in_groups * passes * (
            est.AMP_PASS_CYCLES + weight_load + W * (est.AMP_WORKER_CYCLES + positions * core)
        ),
        "total": total,
        "ideal": ideal,
    }  # fmt: skip


def stage2_terms(plan: poplin.Plan) -> tuple[int, int] | None:
    """(exchange with its sync, launch + ``ReduceAdd``) of one step's stage 2 on a full
    block: each of the ``blocks_k`` tiles of a block receives the other slices' partials of
    its piece and sends its partials of the other pieces; None for a K loop (its steps
    update an accumulator) or no stage 2."""
    if plan.loop == "k" or not plan.stage2:
        return None
    target = _target()
    p_size = poplar.as_type(plan.params.partials_type).size
    out_size = poplar.as_type(plan.params.out_type).size
    bg, bm, sn, nk = plan.block_g, plan.block_m, plan.step_n or plan.block_n, plan.blocks_k
    cut, other = (bm, bg * sn) if plan.split == "m" else (sn, bg * bm)
    big, small = _cdiv(cut, nk) * other, cut // nk * other
    busy = max((nk - 1) * big, bg * bm * sn - small) * p_size
    exchange = int(est.exchange_cycles(target, busy))
    reduce = int(est.reduce_cycles(target, big, nk, p_size, out_size, False))
    return exchange, target.compute_set_launch_cycles + reduce


def implied_cycles(type_name: str, n: int) -> int:
    """Cycles of ``2 m k n`` FLOPs at the paper's dense rate, at Bow's clock."""
    clock = _target().tile_clock_frequency
    flops = 2.0 * pp.SIZE * pp.SIZE * n
    return round(flops * clock / (pp.PAPER_DENSE_TFLOPS[type_name] * 1e12))


def breakdown(type_name: str, n: int) -> None:
    """Print the plan at ``n`` per serial step, what the paper implies, and the plans a
    larger memory budget would take."""
    plan = _plan(type_name, n)
    steps = plan.serial
    amp = amp_terms(plan)
    launch = _target().compute_set_launch_cycles
    rate = pp.tflops(2.0 * pp.SIZE * pp.SIZE * n, plan.cycles)
    implied = implied_cycles(type_name, n)
    paper = pp.PAPER_DENSE_TFLOPS[type_name]
    print(f"\n{type_name} n = {n}: {plan.describe()}")
    off = 100 * (plan.cycles / implied - 1)
    print(f"  total {plan.cycles:,} cycles, {rate:.1f} TFLOP/s; the paper's ~{paper:.0f} "
          f"implies {implied:,} (Tremula's cycles {off:+.1f} %)")  # fmt: skip
    print(f"  per serial step ({steps} steps):")
    print(f"    operand exchange   {plan.exchange_cycles / steps:>10,.0f}  "
          f"(all steps with the broadcast before the loop: {plan.exchange_cycles:,})")  # fmt: skip
    print(f"    AMP partials       {plan.compute_cycles / steps:>10,.0f}  = vertex "
          f"{amp['total']:,} + launch {launch}; ideal {amp['ideal']:,} "
          f"({100 * amp['ideal'] / amp['total']:.0f} % of the vertex)")  # fmt: skip
    print(f"      {amp['passes']} passes x (pass + weight load {amp['pass + weight load']} + "
          f"workers fixed {amp['workers fixed']} + positions {amp['workers positions']}) "
          f"+ vertex fixed {amp['vertex fixed']}")  # fmt: skip
    stage2 = stage2_terms(plan)
    split = "" if stage2 is None else f" = exchange {stage2[0]:,} + ReduceAdd {stage2[1]:,}"
    print(f"    stage 2            {plan.reduce_cycles / steps:>10,.0f}{split}  (the K slices' "
          f"{plan.params.partials_type} partials; all steps: {plan.reduce_cycles:,})")  # fmt: skip
    budget = int(0.6 * _target().memory_bytes_per_tile)
    print(f"  temporaries {plan.temp_bytes:,} B per tile (budget 0.6 x tile = {budget:,} B)")
    for proportion in WIDER_BUDGETS:
        wider = _plan(type_name, n, proportion)
        if wider.cycles >= plan.cycles:
            continue
        wrate = pp.tflops(2.0 * pp.SIZE * pp.SIZE * n, wider.cycles)
        planned = pp.dense_planned_bytes(wider, type_name, n)
        print(f"  with availableMemoryProportion {proportion}: {wrate:.1f} TFLOP/s "
              f"({wider.blocks_k} K slices, {wider.serial} steps of N={wider.step_n}), "
              f"temporaries {wider.temp_bytes:,} B ({100 * wider.temp_bytes / budget:.1f} % "
              f"of the 0.6 budget), planned bytes {pp.fit_note(planned)}")  # fmt: skip


def breakdown_tables(ns: tuple[int, ...]) -> None:
    """:func:`breakdown` for both types at every ``n``."""
    for type_name in pp.TYPES:
        for n in ns:
            breakdown(type_name, n)
