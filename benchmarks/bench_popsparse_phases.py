"""Where the simulated cycles of a dynamic sparse FC forward pass go, phase by phase, next
to the dense FC pass of the same shape (issue 17, PopSparse against the paper).

For each case (block size and type, d = 1/16, m = k = 4096, uniformly random pattern as in
``bench_popsparse_fc.py``) and each n, one simulated run (Mk2 model) of
``fully_connected_fwd`` and of the dense ``poplin.matmul`` with ``fullyConnectedPass``
``TRAINING_FWD`` (the paper's dense curve): the execution profile's steps are walked in
order and each step is charged the cycles by which it moves the end of the run so far
(its share of the critical path), so that the phases add up to the total exactly.

For element-wise cases whose pattern does not propagate, the line ``pattern`` gives the
distribution vertex as PopLibs' estimator costs it on *this* pattern's buckets (each bucket's rows
split over the workers as the partitioner splits them, the slowest worker, the slowest
tile: :func:`estimators.ew_fwd_split_worker`, plus zeroing the partials), next to the
static estimate the device charges (the plan's uniform rows, as an IPU Model's
compile-time estimators do): what a pattern's imbalance would add on a real IPU.

Run: ``python benchmarks/bench_popsparse_phases.py [--ns 4,64,1024]
[--cases b1half,b1float,b16half,b16float]``.
"""

from __future__ import annotations

import argparse
import gc
from typing import Any

import numpy as np
from bench_popsparse_fc import SIZE, dense_engine, pattern, sparse_run
from popsparse_paper import TYPES

from tremula import poplar
from tremula.libs.popsparse import decoding
from tremula.libs.popsparse import estimators as est

CASES = {"b1half": (1, "half"), "b1float": (1, "float"), "b16half": (16, "half"),
         "b16float": (16, "float")}  # fmt: skip


def _label(step: dict[str, Any], programs: list[dict], cs_names: list[str]) -> str:
    """The phase of one step: its compute set, or the program it belongs to (an exchange
    and the sync before it are one phase), without the layer's prefix."""
    if step["type"] == "OnTileExecute":
        name, kind = cs_names[step["computeSet"]], "compute"
    else:
        name = step.get("name") or str(programs[step["program"]].get("name", step["program"]))
        kind = "exchange" if name.endswith("ExchangePre") else step["type"].lower()
        name = name.removesuffix("/ExchangePre")
    return f"{name.split('/', 1)[-1]} {kind}"


def phases(engine: Any) -> tuple[int, dict[str, int]]:
    """Total cycles and each phase's share of the critical path (they add up to it)."""
    execution, graph = engine.get_execution_profile(), engine.get_graph_profile()
    programs, cs_names = graph["programs"], graph["computeSets"]["names"]
    shares: dict[str, int] = {}
    end = 0
    for step in execution["simulation"]["steps"]:
        grown = max(step["cyclesTo"] - end, 0)
        end += grown
        label = _label(step, programs, cs_names)
        shares[label] = shares.get(label, 0) + grown
    return int(execution["simulation"]["cycles"]), shares


def pattern_vertex(run: Any, block: int, n: int) -> tuple[int, int] | None:
    """(static estimate, on this pattern) of the distribution vertex's slowest tile, for an
    element-wise layer whose pattern stays in its Z groups; None otherwise."""
    if block != 1 or run.steps:
        return None
    layer = run.layer
    plan, target = layer.partitioner.plan, poplar.IPUModel("ipu2").create_target()
    rng = np.random.default_rng(1)  # the pattern sparse_run loaded
    impl = layer.partitioner.create_sparsity_data_impl(pattern(rng, SIZE, block, 1 / 16))
    rows, _, slots = decoding.walk(plan, impl.meta_info)
    bucket = slots // plan.nz_elems_per_bucket
    cut = np.flatnonzero((np.diff(rows) != 0) | (np.diff(bucket) != 0)) + 1
    starts = np.concatenate([[0], cut])
    row_nnz = np.diff(np.concatenate([starts, [rows.size]]))
    row_bucket = bucket[starts]
    gz = plan.method.grouping[3]
    worst = np.zeros(plan.num_buckets, dtype=np.int64)
    for b in np.unique(row_bucket):
        nnz = row_nnz[row_bucket == b]
        worst[b] = est.ew_fwd_split_worker(target, plan.type_factor, gz, plan.z_tile // gz, nnz)
    pz, py = plan.partition.z, plan.partition.y
    per_group = worst.reshape(-1, pz).sum(axis=1)
    partials = np.repeat(plan.sizes("x"), py) * plan.z_tile * 4  # float partials
    w = target.num_worker_contexts
    zeroing = est.zero_cycles(target, partials)
    on_pattern = int(est.ew_supervisor(30, pz, pz)) + int((w * per_group + zeroing).max())
    graph = layer.engine.get_graph_profile()
    names = graph["computeSets"]["names"]
    active = graph["computeSets"]["cycleEstimates"]["activeCyclesByTile"]
    static = max(max(active[i]) for i, nm in enumerate(names) if nm.endswith("/distribution"))
    return int(static), on_pattern


def report(case: str, n: int) -> None:
    block, type_name = CASES[case]
    gc.collect()
    run = sparse_run("ipu2", TYPES[type_name], block, 1 / 16, n)
    if isinstance(run, str):
        print(f"{case} n={n}: {run}")
        return
    plan = run.layer.partitioner.plan
    total, shares = phases(run.layer.engine)
    extra = pattern_vertex(run, block, n)
    del run
    gc.collect()
    engine = dense_engine("ipu2", TYPES[type_name], n, "TRAINING_FWD")
    engine.run()
    dense_total, dense_shares = phases(engine)
    print(f"{case} n={n} (Mk2 cycles): sparse {total} (planner estimate {plan.cost.fwd_cycles}, "
          f"partition {plan.partition.xyz}), dense FC pass {dense_total}, speed-up "
          f"{dense_total / total:.2f}")  # fmt: skip
    for side, found in (("sparse", shares), ("dense", dense_shares)):
        for label, cycles in found.items():
            if cycles:
                print(f"    {side:>6} {cycles:>8} {100 * cycles / sum(found.values()):5.1f}% "
                      f"{label}")  # fmt: skip
    if extra is not None:
        static, on_pattern = extra
        change = f"{100 * (on_pattern / static - 1):+.0f}%, {on_pattern - static:+d} cycles"
        print(f"    pattern: distribution vertex, slowest tile: static estimate {static}, "
              f"PopLibs' estimate on this pattern's buckets {on_pattern} ({change})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns", default="4,64,1024")
    parser.add_argument("--cases", default="b1half")
    args = parser.parse_args()
    for case in args.cases.split(","):
        if case not in CASES:
            raise SystemExit(f"--cases: unknown case {case!r} (known: {', '.join(CASES)})")
        for n in (int(x) for x in args.ns.split(",")):
            report(case, n)


if __name__ == "__main__":
    main()
