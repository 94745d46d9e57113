"""popops.reduce / reduce_with_output against NumPy: every operation over every set of
dimensions, several types, scale and update, odd and empty shapes, views, multi-stage
plans, estimates, and bad input."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs.popops.reduce import Operation, reduce, reduce_with_output


def _helpers():
    name = "tremula_tests_popops_reduce_helpers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("test_popops_reduce_helpers.py")
        )
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()
Rig, graph_size = H.Rig, H.graph_size
ALL_DIMS = [d for r in range(4) for d in itertools.combinations(range(3), r)]
RNG = np.random.default_rng(7)


def reference(op: str, x: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    if not dims:
        return x * x if op == "SQUARE_ADD" else x
    x64 = x.astype(np.float64) if x.dtype.kind == "f" else x
    table = {
        "ADD": lambda: np.sum(x64, axis=dims),
        "MUL": lambda: np.prod(x64, axis=dims),
        "MIN": lambda: np.min(x, axis=dims),
        "MAX": lambda: np.max(x, axis=dims),
        "SQUARE_ADD": lambda: np.sum(x64 * x64, axis=dims),
        "LOG_ADD": lambda: np.log(np.sum(np.exp(x64), axis=dims)),
        "LOGICAL_AND": lambda: np.all(x, axis=dims),
        "LOGICAL_OR": lambda: np.any(x, axis=dims),
    }
    return table[op]()


def data_for(op: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    if op.startswith("LOGICAL"):
        return RNG.random(shape) < (0.8 if op == "LOGICAL_AND" else 0.1)
    if np.dtype(dtype).kind in "iu":
        hi = 3 if op == "MUL" else 50
        lo = 0 if np.dtype(dtype).kind == "u" else -hi
        return RNG.integers(lo, hi, shape).astype(dtype)
    x = RNG.standard_normal(shape)
    if op == "MUL":
        x = 1 + 0.1 * x
    return x.astype(dtype)


@pytest.mark.parametrize("op", [o.name for o in Operation])
def test_every_op_over_every_set_of_dims(op: str) -> None:
    rig = Rig(tiles=16)
    dtype = np.bool_ if op.startswith("LOGICAL") else np.float32
    x = data_for(op, (7, 5, 6), dtype)
    t = rig.input(x)
    outs = [reduce(rig.graph, t, dims, op, rig.prog, name=f"r{dims}") for dims in ALL_DIMS]
    results = rig.run(outs)
    for dims, got in zip(ALL_DIMS, results):
        want = reference(op, x, dims)
        assert got.shape == np.shape(want), dims
        if dtype is np.bool_:
            np.testing.assert_array_equal(got, want, err_msg=str(dims))
        else:
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, err_msg=str(dims))


@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
@pytest.mark.parametrize("op", ["ADD", "MUL", "MIN", "MAX", "SQUARE_ADD"])
def test_integer_reductions_are_exact(op: str, dtype) -> None:
    rig = Rig(tiles=4)
    x = data_for(op, (9, 4, 3), dtype)
    t = rig.input(x)
    dims_list = [(0,), (1, 2), (0, 1, 2)]
    outs = [reduce(rig.graph, t, d, op, rig.prog, name=f"r{d}") for d in dims_list]
    for d, got in zip(dims_list, rig.run(outs)):
        want = reference(op, x, d).astype(dtype)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["ADD", "MAX", "LOG_ADD", "SQUARE_ADD"])
def test_half_input_accumulates_in_float(op: str) -> None:
    rig = Rig(tiles=16)
    x = (RNG.standard_normal((40, 33)) * (0.1 if op == "LOG_ADD" else 1)).astype(np.float16)
    t = rig.input(x)
    a = reduce(rig.graph, t, [0], op, rig.prog, name="half_out")
    b = reduce(rig.graph, t, [0, 1], op, rig.prog, name="float_out", out_dtype=poplar.FLOAT)
    c = reduce(
        rig.graph,
        t,
        [1],
        op,
        rig.prog,
        name="half_partials",
        options={"accumType.interTile": "half"},
    )
    ga, gb, gc = rig.run([a, b, c])
    assert ga.dtype == np.float16 and gb.dtype == np.float32
    np.testing.assert_allclose(ga, reference(op, x, (0,)), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(gb, reference(op, x, (0, 1)), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(gc, reference(op, x, (1,)), rtol=4e-3, atol=4e-3)


def test_scale_and_update() -> None:
    rig = Rig(tiles=16)
    x = RNG.standard_normal((30, 20)).astype(np.float32)
    init = RNG.standard_normal(20).astype(np.float32)
    t = rig.input(x)
    set_out = rig.input(init)
    upd_out = rig.input(init)
    reduce_with_output(rig.graph, t, set_out, [0], "ADD", rig.prog, scale=0.5)
    reduce_with_output(rig.graph, t, upd_out, [0], Operation.MAX, rig.prog, scale=-2.0, update=True)
    rig.run()
    np.testing.assert_allclose(rig.read(1), 0.5 * x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rig.read(2), init - 2.0 * x.max(0), rtol=1e-6)


def test_integer_scale_truncates_and_single_stage_update() -> None:
    rig = Rig(tiles=4)
    x = RNG.integers(-20, 20, (4, 10)).astype(np.int32)
    t = rig.input(x, mapping=np.repeat(np.arange(4), 10).reshape(4, 10))
    out = rig.input(np.full(4, 100, np.int32), mapping=np.arange(4))
    reduce_with_output(rig.graph, t, out, [1], "ADD", rig.prog, scale=0.5, update=True)
    assert rig.compute_sets("reduce/ReduceStage") == ["reduce/ReduceStage1"]  # rows on tiles
    rig.run()
    want = 100 + (x.sum(1).astype(np.float64) * 0.5).astype(np.int32)
    np.testing.assert_array_equal(rig.read(1), want)


def test_multi_stage_plan_on_16_tiles_with_small_fan_in() -> None:
    rig = Rig(tiles=16)
    x = RNG.standard_normal((64, 50)).astype(np.float32)
    t = rig.input(x)
    out = reduce(rig.graph, t, [0, 1], "ADD", rig.prog, options={"maxFanIn": 2})
    stages = rig.compute_sets("reduce/ReduceStage")
    assert len(stages) >= 4  # stage 1, then a tree of fan-in 2 over 16 partials
    (got,) = rig.run([out])
    assert got.shape == ()
    np.testing.assert_allclose(got, x.astype(np.float64).sum(), rtol=1e-5)


def test_strided_reduction_with_rows_split_over_tiles() -> None:
    rig = Rig(tiles=16)
    x = RNG.standard_normal((37, 29)).astype(np.float32)
    t = rig.input(x)
    outs = [reduce(rig.graph, t, [0], op, rig.prog, name=op) for op in ("ADD", "MIN")]
    assert len(rig.compute_sets("ADD/ReduceStage")) >= 2
    got_add, got_min = rig.run(outs)
    np.testing.assert_allclose(got_add, x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got_min, x.min(0))


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request):
    """Run with the optional compiled kernels (when numba is installed) and without."""
    from tremula.libs import jit

    if request.param == "compiled" and not jit.available():
        pytest.skip("numba (the fast extra) is not installed")
    previous = jit.set_enabled(request.param == "compiled")
    yield request.param
    jit.set_enabled(previous)


def _fast_paths(rig: Rig) -> list[str]:
    """Vertex types of the compiled engine that run a prepared (in-place) path."""
    plan = rig.engine.step_plan
    return [g.vertex_type.name for c in plan.compute_sets for g in c.groups if g._fast]


@pytest.mark.parametrize("op", ["ADD", "MAX", "MUL"])
def test_column_reduction_reads_rows_and_partials_in_place(kernels, op) -> None:
    """A column reduction of a matrix spread over the tiles: stage 1 sums each tile's two
    or three whole rows in place (compiled or NumPy), the later stages read their pieces as
    a grid of device memory listed tile by tile; every stage runs a prepared path and the
    numbers are NumPy's, over several runs with new data."""
    rig = Rig(tiles=24)
    t = rig.input(RNG.standard_normal((64, 48)).astype(np.float32))
    out = reduce(rig.graph, t, [0], op, rig.prog, options={"maxFanIn": 4})
    assert len(rig.compute_sets("reduce/ReduceStage")) >= 3
    for _ in range(2):
        x = data_for(op, (64, 48), np.float32)
        rig.feeds["in0"] = x
        (got,) = rig.run([out])
        np.testing.assert_allclose(got, reference(op, x, (0,)), rtol=1e-5, atol=1e-5)
    fast = _fast_paths(rig)  # stage 1 and the first later stage (16 equal groups of 4)
    types = [f"popops::{kind}<{op},float,float>" for kind in ("ReduceBlock", "ReducePartials")]
    assert fast[:2] == types, fast


def test_row_reduction_reads_around_single_element_pieces() -> None:
    """Rows whose last element sits on another tile: that element is a partial of its
    own (no vertex), so stage 1's input has gaps; it is still read in place (the runs of
    the memory covering it), with NumPy's numbers."""
    tiles = np.repeat(np.arange(8), 16).reshape(8, 16)
    tiles[:, 15] = (np.arange(8) + 1) % 8
    rig = Rig(tiles=8)
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    t = rig.input(x, mapping=tiles)
    out = reduce(rig.graph, t, [1], "ADD", rig.prog)
    (got,) = rig.run([out])
    np.testing.assert_allclose(got, x.sum(1), rtol=1e-5, atol=1e-5)
    assert _fast_paths(rig)[0] == "popops::ReduceBlock<ADD,float,float>"


@pytest.mark.parametrize("ufunc", [np.add, np.maximum, np.multiply])
def test_short_blocks_reduce_as_numpy_does(ufunc) -> None:
    """Blocks of one outer row and 2 to 7 inner elements combined by strided ufunc calls
    give ``ufunc.reduce``'s numbers bit for bit; other blocks keep ``reduce``."""
    from tremula.libs.popops.reduce_inplace import _reducer

    rng = np.random.default_rng(5)
    for inner in range(1, 10):
        for n in (1, 3):
            src = (rng.standard_normal((2, 50, 1, n, inner)) * 100).astype(np.float32)
            got, want = np.empty((2, 50, n), np.float32), np.empty((2, 50, n), np.float32)
            _reducer(ufunc, src, got, (2, 4))()
            ufunc.reduce(src, axis=(2, 4), out=want)
            np.testing.assert_array_equal(got, want)


def test_row_sum_over_tiles_of_four_elements() -> None:
    """A [16, 256] row sum whose tiles hold 4 elements each (the char-GRU step's): stage 1
    runs prepared (short blocks) and the result is NumPy's."""
    tiles = (np.arange(16 * 256) // 4).reshape(16, 256)
    rig = Rig(tiles=1024)
    x = RNG.standard_normal((16, 256)).astype(np.float32)
    t = rig.input(x, mapping=tiles)
    out = reduce(rig.graph, t, [1], "ADD", rig.prog)
    (got,) = rig.run([out])
    np.testing.assert_allclose(got, x.sum(1), rtol=1e-5, atol=1e-4)
    assert _fast_paths(rig)[0] == "popops::ReduceBlock<ADD,float,float>"


def test_row_runs_are_summed_in_row_order(kernels) -> None:
    """The stage-1 row sums equal a left-to-right sum of each unit's rows, bit for bit, in
    both implementations, over chunk boundaries and units of 1 to 4 rows."""
    from tremula.libs.popops import reduce_inplace as reduce_rows

    rng = np.random.default_rng(3)
    count = rng.integers(1, 5, 300)
    first = np.r_[0, np.cumsum(count)[:-1]]
    rows = rng.standard_normal((2, int(count.sum()), 96)).astype(np.float32)
    out = np.empty((2, count.size, 96), np.float32)
    runs = reduce_rows.plan_runs(first, count, row_bytes=96 * 4 * 20)  # chunks of ~136
    assert len(runs.chunks) > 1
    reduce_rows.reduce_rows(np.add, rows, out, runs)
    want = np.zeros_like(out)
    for u, (f, c) in enumerate(zip(first, count)):
        acc = rows[:, f].copy()
        for i in range(1, c):
            acc = acc + rows[:, f + i]
        want[:, u] = acc
    np.testing.assert_array_equal(out, want)


def test_views_transposed_and_irregular() -> None:
    rig = Rig(tiles=8)
    x = RNG.standard_normal((12, 10, 6)).astype(np.float32)
    t = rig.input(x)
    views = {
        "transposed": (t.dim_shuffle([2, 0, 1]), x.transpose(2, 0, 1)),
        "reversed": (t.reverse(1), x[:, ::-1]),
        "subsampled": (t.subsample(2, 0), x[::2]),
    }
    outs, wants = [], []
    for label, (view, ref) in views.items():
        for dims in [(0,), (1, 2), (0, 2)]:
            outs.append(reduce(rig.graph, view, dims, "ADD", rig.prog, name=f"{label}{dims}"))
            wants.append(ref.sum(axis=dims))
    for got, want in zip(rig.run(outs), wants):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("shape", "dims"),
    [((1, 13, 1), (1,)), ((3, 1, 5), (0, 1)), ((1,), (0,)), ((2, 3), ()), ((5,), ())],
)
def test_odd_shapes(shape, dims) -> None:
    rig = Rig(tiles=4)
    x = RNG.standard_normal(shape).astype(np.float32)
    t = rig.input(x)
    (got,) = rig.run([reduce(rig.graph, t, dims, "ADD", rig.prog)])
    np.testing.assert_allclose(got, reference("ADD", x, dims), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "value"), [("ADD", 0), ("MUL", 1), ("MAX", -np.inf), ("LOG_ADD", -np.inf)]
)
def test_empty_reduced_dimension_gives_the_identity(op: str, value: float) -> None:
    rig = Rig(tiles=4)
    t = rig.graph.add_variable(poplar.FLOAT, (0, 5), "empty")
    (got,) = rig.run([reduce(rig.graph, t, [0], op, rig.prog)])
    np.testing.assert_array_equal(got, np.full(5, value, np.float32))


def test_log_add_is_stable() -> None:
    rig = Rig(tiles=4)
    x = np.array([[1000.0, 1000.0, -np.inf], [-np.inf, -np.inf, -np.inf]], np.float32)
    t = rig.input(x)
    (got,) = rig.run([reduce(rig.graph, t, [1], "LOG_ADD", rig.prog)])
    np.testing.assert_allclose(got, [1000 + np.log(2), -np.inf], rtol=1e-6)


def test_estimates_grow_with_the_work() -> None:
    cycles = []
    for n in (600, 6000):
        rig = Rig(tiles=4)
        t = rig.input(np.ones((n,), np.float32))
        reduce(rig.graph, t, [0], "ADD", rig.prog)
        rig.run()
        profile = rig.engine.get_graph_profile()
        names = profile["computeSets"]["names"]
        by_tile = profile["computeSets"]["cycleEstimates"]["cyclesByTile"]
        cycles.append(max(by_tile[names.index("reduce/ReduceStage1")]))
    assert cycles[1] > 5 * cycles[0] / 2 and cycles[1] < 12 * cycles[0]


BAD = [
    ({"dims": [3]}, "dimension 3 in dims [3] is out of range"),
    ({"dims": [0, 0]}, "repeat a dimension"),
    ({"dims": [-1]}, "out of range"),
    ({"dims": [0.5]}, "dims must be integers"),
    ({"op": "SUM"}, "unknown operation 'SUM'"),
    ({"op": "LOG_ADD", "dtype": poplar.INT}, "LOG_ADD does not accept input of type int"),
    ({"op": "LOGICAL_OR"}, "LOGICAL_OR does not accept input of type float"),
    ({"out_dtype": poplar.INT}, "output type int does not match input type float"),
    ({"options": {"maxFanIn": 1}}, "maxFanIn must be an integer >= 2"),
    ({"options": {"fanIn": 4}}, "unknown option(s) ['fanIn']"),
    ({"options": {"accumType.interTile": "half"}}, "accumType.interTile='half' is not valid"),
    ({"unmapped": True}, "is not completely mapped"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_bad_input_names_the_problem_and_leaves_the_graph(kwargs, message) -> None:
    rig = Rig(tiles=4)
    dtype = kwargs.get("dtype", poplar.FLOAT)
    t = rig.graph.add_variable(dtype, (4, 5, 6), "t")
    if not kwargs.get("unmapped"):
        poplar.map_tensor_linearly(rig.graph, t)
    before = graph_size(rig.graph)
    with pytest.raises(GraphError) as err:
        reduce(
            rig.graph,
            t,
            kwargs.get("dims", [0]),
            kwargs.get("op", "ADD"),
            rig.prog,
            options=kwargs.get("options"),
            out_dtype=kwargs.get("out_dtype"),
        )
    assert message in str(err.value)
    assert graph_size(rig.graph) == before
    assert not rig.prog.programs


def test_reduce_with_output_checks_out() -> None:
    rig = Rig(tiles=4)
    t = rig.input(np.ones((4, 5), np.float32))
    wrong_shape = rig.input(np.ones(4, np.float32))
    wrong_type = rig.input(np.ones(5, np.int32))
    bools = rig.input(np.ones((4, 5), bool))
    bool_out = rig.input(np.ones(5, bool))
    before = graph_size(rig.graph)
    cases = [
        (t, wrong_shape, "ADD", {}, "out has shape (4,), expected (5,)"),
        (t, wrong_type, "ADD", {}, "output type int does not match input type float"),
        (t, wrong_shape.reshape((4,)), "ADD", {"scale": float("nan")}, "shape"),
        (bools, bool_out, "LOGICAL_AND", {"update": True}, "takes no scale"),
        (t, t[0], "ADD", {"scale": "2"}, "scale must be a number"),
    ]
    for inp, out, op, kw, message in cases:
        with pytest.raises(GraphError, match=message.replace("(", r"\(").replace(")", r"\)")):
            reduce_with_output(rig.graph, inp, out, [0], op, rig.prog, **kw)
    assert graph_size(rig.graph) == before


def test_planning_is_deterministic() -> None:
    names = []
    for _ in range(2):
        rig = Rig(tiles=16)
        t = rig.input(np.ones((50, 30), np.float32))
        reduce(rig.graph, t, [0], "ADD", rig.prog)
        groups = rig.graph.state.vertex_groups
        names.append(
            [
                (cs, [(g.vertex_type.name, g.n, g.tiles.tolist()) for g in groups[i]])
                for i, cs in enumerate(rig.compute_sets())
            ]
        )
    assert names[0] == names[1]


def test_replicas_reduce_their_own_data() -> None:
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target, replication_factor=3)
    prog = poplar.Sequence()
    t = g.add_variable(poplar.FLOAT, (10, 7), "t", mapping="linear")
    outs = [
        reduce(g, t, d, op, prog, name=f"{op}{d}")
        for op in ("ADD", "LOG_ADD")
        for d in ([0], [1], [0, 1])
    ]
    g.create_host_write("t", t)
    for i, o in enumerate(outs):
        g.create_host_read(f"o{i}", o)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    x = RNG.standard_normal((3, 10, 7)).astype(np.float32)
    engine.write_tensor("t", x)
    engine.run(0)
    H.validate_engine(engine)
    i = 0
    for op in ("ADD", "LOG_ADD"):
        for d in ((0,), (1,), (0, 1)):
            want = np.stack([reference(op, x[r], d) for r in range(3)])
            np.testing.assert_allclose(engine.read_tensor(f"o{i}"), want, rtol=1e-5, atol=1e-5)
            i += 1


def test_prepared_reductions_of_gathered_partials_give_the_bits_of_compute(monkeypatch):
    """Reductions whose partials are no view of device memory (a transposed, then
    concatenated input: stage 1 and later stages gather) run prepared over a kept buffer
    refilled each run: run after run, the bits of ``compute``."""
    from tremula.libs.popops.codelets import reduce as codelets

    gathered: list[str] = []
    real_gather = poplar.Batch.stable_gather

    def spy(self, name, *args):
        found = real_gather(self, name, *args)
        if found is not None and name == "partials":
            gathered.append(self.vertex_type.name)
        return found

    monkeypatch.setattr(poplar.Batch, "stable_gather", spy)
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal((2, 40, 48)).astype(np.float32) for _ in range(3)]
    results = []
    for prepared in (True, False):
        if not prepared:
            for cls in codelets.CODELETS:
                monkeypatch.setattr(cls, "prepare", None)
        device = poplar.IPUModel(tiles_per_ipu=16).create_device()
        g = poplar.Graph(device.target)
        parts = [g.add_variable(poplar.FLOAT, (40, 48), f"x{i}", mapping="linear") for i in (0, 1)]
        x = poplar.concat([p.transpose() for p in parts[::-1]], 0)  # [96, 40], gathered
        prog = poplar.Sequence()
        outs = [reduce(g, x, dims, "ADD", prog) for dims in ((0,), (1,))]
        for i, p in enumerate(parts):
            g.create_host_write(f"x{i}", p)
        for i, o in enumerate(outs):
            g.create_host_read(f"out{i}", o)
        engine = poplar.Engine(g, prog)
        engine.load(device)
        got = []
        for data in inputs:
            for i in (0, 1):
                engine.write_tensor(f"x{i}", data[i])
            engine.run()
            got.append([engine.read_tensor(f"out{i}").tobytes() for i in (0, 1)])
            want = np.concatenate([data[1].T, data[0].T]).astype(np.float64)
            np.testing.assert_allclose(
                engine.read_tensor("out0"), want.sum(0), rtol=1e-5, atol=1e-4
            )
            np.testing.assert_allclose(
                engine.read_tensor("out1"), want.sum(1), rtol=1e-5, atol=1e-4
            )
        results.append(got)
    assert gathered  # some stage ran prepared over a gathered buffer
    assert results[0] == results[1]
