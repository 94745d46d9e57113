"""Benchmarks of popops' reductions and scatter-add against NumPy, measured in the same run.

1. ``popops.reduce`` ADD over a 16M-element float32 tensor mapped linearly over the 1472
   tiles of the Mk2 IPU Model, to a scalar: run time of the engine program over
   ``numpy.sum`` of the same data (target: at most 3). Row and column reductions of a
   4096 x 4096 tensor (dims 1 and 0) against ``numpy.sum(axis=...)`` (target: at most 1.5
   each), with the compiled kernels of the ``fast`` extra and with the NumPy path, rounds
   alternating the three.
3. The reductions autodiff emits in the digits MLP (``tremula train``'s model: the bias
   gradients, ``[32, n]`` summed over the batch) and in the char-GRU example's step: the
   run time of each reduction's compute sets in a session against ``numpy.sum(axis=0)`` of
   an array reducing as many elements to as many outputs (target: at most 1.5).
2. ``popops.multi_update_add`` of 200k rows of 64 floats with many duplicate indices (10k
   distinct rows) into a 100k x 64 float32 table: ``numpy.add.at`` time over the engine
   program's (target: at least 5), with the same result. It runs on the CPU device (one
   tile), where the plan has a single partition; on an IPU Model of this size every row
   partition would receive all 51 MB of updates (PopLibs' broadcast), which does not fit.

Times are the best of several interleaved runs. ``python benchmarks/bench_popops_reduce_slice.py``
(``--quick`` for smaller sizes, ``--clock cpu`` for this process's CPU time, ``--only-2d`` for
the row and column sums alone).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np

from tremula import poplar
from tremula.libs import jit
from tremula.libs.popops.reduce import reduce
from tremula.libs.popops.slicing import create_sliceable_tensor, multi_update_add

#: the clock (``--clock``): wall time, or this process's CPU time (steadier on a machine
#: other work loads; both sides run on one thread)
CLOCK = time.perf_counter


def best_of(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """The best time of each function, calls interleaved to share machine noise."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = CLOCK()
            fn()
            best[i] = min(best[i], CLOCK() - start)
    return best


def bench_reduce(shape: tuple[int, ...], dims: tuple[int, ...], repeats: int) -> float:
    """Run time of the engine program over ``numpy.sum`` (both kernels when the compiled
    ones are available); returns the default path's ratio."""
    device = poplar.IPUModel().create_device()
    graph = poplar.Graph(device.target)
    t = graph.add_variable(poplar.FLOAT, shape, "t")
    poplar.map_tensor_linearly(graph, t)
    prog = poplar.Sequence()
    out = reduce(graph, t, dims, "ADD", prog)
    graph.create_host_write("t", t)
    graph.create_host_read("out", out)
    start = time.perf_counter()
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    build = time.perf_counter() - start
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    engine.write_tensor("t", x)
    engine.run(0)
    want = x.astype(np.float64).sum(axis=dims)
    np.testing.assert_allclose(engine.read_tensor("out"), want, rtol=1e-4, atol=1e-2)
    cycles = engine.get_execution_profile()["simulation"]["cycles"]

    def numpy_path() -> None:
        previous = jit.set_enabled(False)
        engine.run(0)
        jit.set_enabled(previous)

    fns = [lambda: engine.run(0), lambda: x.sum(axis=dims)]
    if jit.available():
        fns.append(numpy_path)
    times = best_of(fns, repeats)
    ratio = times[0] / times[1]
    kind = "compiled kernels" if jit.available() else "NumPy path (no fast extra)"
    line = (
        f"reduce ADD {shape} dims {dims} on {device.target.num_tiles} tiles: engine "
        f"{times[0] * 1e3:.1f} ms ({kind}), numpy.sum {times[1] * 1e3:.1f} ms, ratio "
        f"{ratio:.2f}"
    )
    if len(times) > 2:
        line += f"; NumPy path {times[2] * 1e3:.1f} ms, ratio {times[2] / times[1]:.2f}"
    print(f"{line} (compile {build:.1f} s, {cycles} simulated cycles per run)")
    return ratio


def autodiff_reductions(engine: poplar.Engine, replicas: int, label: str, repeats: int) -> None:
    """Each popops reduction autodiff emitted in a compiled step (the ``.../reducesum*``
    compute sets, one or more stages each): the run time of its stages against
    ``numpy.sum(axis=0)`` of a ``[inputs // outputs, outputs]`` array (the same elements
    reduced to the same number of outputs)."""
    storage, everyone = engine.runtime.storage, np.arange(replicas)
    stages: dict[str, list] = {}
    for cs in engine.step_plan.compute_sets:
        head, sep, _ = cs.name.rpartition("/ReduceStage")
        name = head if sep else cs.name
        if "/reducesum" in name:
            stages.setdefault(name, []).append(cs)
    for name, sets in stages.items():
        first = sum(g.gathers["partials"].size for g in sets[0].groups)  # per replica
        outputs = sum(g.gathers["out"].size for g in sets[-1].groups)
        ref = np.random.default_rng(0).standard_normal((replicas, first // outputs, outputs))
        ref = ref.astype(np.float32)

        def ours(sets=sets) -> None:
            for cs in sets:
                cs.run(storage, slice(None), everyone)

        mine, theirs = best_of([ours, lambda ref=ref: ref.sum(1)], repeats * 50)
        print(
            f"{label}, {name} ({len(sets)} stage(s)): {mine * 1e6:.1f} us, numpy.sum of "
            f"{ref.shape} over axis 1 {theirs * 1e6:.1f} us, ratio {mine / theirs:.2f} "
            f"(target <= 1.5)"
        )


def bench_mlp_reductions(repeats: int) -> None:
    """The bias-gradient reductions of the digits MLP's training step."""
    from tremula.digits import build_training, load_digits

    x, y, _, _ = load_digits()
    trainer = build_training(32, 0.05)
    with trainer.session as session:
        session.run({trainer.x: x[:32], trainer.labels: y[:32]})
        autodiff_reductions(session.engine, 1, "MLP step", repeats)


def bench_gru_reductions(repeats: int) -> None:
    """The reductions autodiff emits in the char-GRU example's step (device embedding, two
    replicas: each replica's reduction runs in the same call)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "examples" / "host_embedding" / "char_gru.py"
    spec = importlib.util.spec_from_file_location("char_gru", path)
    assert spec is not None and spec.loader is not None
    char_gru = sys.modules["char_gru"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(char_gru)  # registered first: its dataclasses look it up
    cfg = char_gru.Config(device_embedding=True)
    trainer = char_gru.build(cfg)
    text = next(char_gru.batches(cfg)).reshape(cfg.iterations, cfg.replicas, cfg.batch, -1)
    with trainer.session as session:
        session.run({trainer.text: text})
        autodiff_reductions(session.engine, cfg.replicas, "char-GRU step", repeats)


def bench_multi_update_add(rows: int, cols: int, n: int, distinct: int, repeats: int) -> float:
    device = poplar.Device.create_cpu_device()
    graph = poplar.Graph(device.target)
    table = create_sliceable_tensor(graph, poplar.FLOAT, (rows, cols), "table")
    idx = graph.add_variable(poplar.UNSIGNED_INT, (n,), "indices", mapping="linear")
    upd = graph.add_variable(poplar.FLOAT, (n, cols), "updates", mapping="linear")
    for name, t in (("table", table), ("indices", idx), ("updates", upd)):
        graph.create_host_write(name, t)
    graph.create_host_read("result", table)
    prog = poplar.Sequence()
    multi_update_add(graph, table, idx, upd, 1.0, prog)
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    rng = np.random.default_rng(0)
    t0 = rng.standard_normal((rows, cols)).astype(np.float32)
    i0 = rng.integers(0, distinct, n).astype(np.uint32)
    u0 = rng.standard_normal((n, cols)).astype(np.float32)
    engine.write_tensor("table", t0)
    engine.write_tensor("indices", i0)
    engine.write_tensor("updates", u0)
    engine.run(0)
    want = t0.copy()
    np.add.at(want, i0, u0)
    np.testing.assert_array_equal(engine.read_tensor("result"), want)  # bit for bit

    def reference() -> None:
        np.add.at(t0.copy(), i0, u0)

    def copy_only() -> None:  # the reference's table copy, subtracted below
        t0.copy()

    mine, ref, copy = best_of([lambda: engine.run(0), reference, copy_only], repeats)
    speedup = (ref - copy) / mine
    print(
        f"multi_update_add {n} x {cols} rows ({distinct} distinct indices) into "
        f"{rows} x {cols}: engine {mine * 1e3:.1f} ms, numpy.add.at {(ref - copy) * 1e3:.1f} "
        f"ms, speedup {speedup:.2f} (identical result)"
    )
    return speedup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--only-2d", action="store_true", help="only the row and column sums")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    repeats = 3 if args.quick else 7
    n = 1 << (20 if args.quick else 24)
    side = 1024 if args.quick else 4096
    if args.only_2d:
        for dims in ((1,), (0,)):
            r = bench_reduce((side, side), dims, repeats)
            print(f"  -> target: ratio <= 1.5: {'met' if r <= 1.5 else 'MISSED'}")
        return
    r = bench_reduce((n,), (0,), repeats)
    print(f"  -> target: ratio <= 3: {'met' if r <= 3 else 'MISSED'}")
    for dims in ((1,), (0,)):
        r = bench_reduce((side, side), dims, repeats)
        print(f"  -> target: ratio <= 1.5: {'met' if r <= 1.5 else 'MISSED'}")
    bench_mlp_reductions(repeats)
    bench_gru_reductions(repeats)
    scale = 10 if args.quick else 1
    s = bench_multi_update_add(100_000 // scale, 64, 200_000 // scale, 10_000 // scale, repeats)
    print(f"  -> target: speedup >= 5: {'met' if s >= 5 else 'MISSED'}")


if __name__ == "__main__":
    main()
