"""``popops.pow2scale_cast`` on the Poplar layer: codes equal the host encoder's, decoding is
exact, the run-time scale check, build-time errors that leave the graph unchanged, the
estimator, and a valid profile."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.errors import ApplicationRuntimeError, GraphError
from tremula.libs import popops
from tremula.libs.popops.codelets.fp8 import Pow2ScaleCast
from tremula.poplar.quarter import F143, F152, decode, encode
from tremula.profile import validate

Q = {poplar.QUARTER_F143: F143, poplar.QUARTER_F152: F152}


def _graph(tiles: int = 4):
    device = poplar.IPUModel(tiles_per_ipu=tiles).create_device()
    return device, poplar.Graph(device.target)


def _run(device, graph, prog, writes: dict, reads: list[str]) -> tuple[dict, poplar.Engine]:
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    for name, value in writes.items():
        engine.write_tensor(name, value)
    engine.run(0)
    return {name: engine.read_tensor(name) for name in reads}, engine


@pytest.mark.parametrize("q", [poplar.QUARTER_F143, poplar.QUARTER_F152])
@pytest.mark.parametrize("src", [poplar.HALF, poplar.FLOAT])
def test_encode_then_decode_on_tiles(q, src):
    device, graph = _graph()
    x = graph.add_variable(src, (7, 13), "x", mapping="linear")
    s = graph.add_variable(poplar.INT, (), "s", mapping="linear")
    graph.create_host_write("x", x)
    graph.create_host_write("s", s)
    prog = poplar.Sequence()
    codes = popops.pow2scale_cast(graph, x, q, s, prog, nan_on_overflow=False, name="enc")
    back = popops.pow2scale_cast(graph, codes, src, -2, prog, name="dec")
    graph.create_host_read("codes", codes)
    graph.create_host_read("back", back)
    rng = np.random.default_rng(3)
    with np.errstate(over="ignore"):
        xv = (rng.standard_normal((7, 13)) * 100).astype(src.numpy)
    xv[0, :4] = [np.inf, -np.inf, np.nan, 0]
    got, engine = _run(device, graph, prog, {"x": xv, "s": np.int32(2)}, ["codes", "back"])
    want = encode(xv, Q[q], 2, nan_on_overflow=False)
    assert codes.dtype is q and got["codes"].dtype == np.uint8
    np.testing.assert_array_equal(got["codes"].reshape(7, 13), want)
    np.testing.assert_array_equal(got["back"].reshape(7, 13), decode(want, Q[q], -2, src.numpy))
    validate(engine.get_graph_profile(), engine.get_execution_profile())


def test_scale_tensor_out_of_range_raises_when_run():
    device, graph = _graph()
    x = graph.add_variable(poplar.HALF, (8,), "x", mapping="linear")
    s = graph.add_variable(poplar.INT, (1,), "s", mapping="linear")
    graph.create_host_write("s", s)
    prog = poplar.Sequence()
    popops.pow2scale_cast(graph, x, poplar.QUARTER_F152, s, prog, what="layer 'w8'")
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    engine.write_tensor("s", np.array([31], np.int32))
    engine.run(0)
    engine.write_tensor("s", np.array([-40], np.int32))
    with pytest.raises(
        ApplicationRuntimeError, match=r"layer 'w8': log2_scale = -40 .*\[-32, 31\]"
    ):
        engine.run(0)


def _state(graph):
    st = graph.state
    return len(st.variables), len(st.compute_sets), st.num_vertices


@pytest.mark.parametrize(
    "src,dst,scale,match",
    [
        (poplar.INT, poplar.QUARTER_F143, 0, "source type int not supported"),
        (poplar.HALF, poplar.INT, 0, "destination type int not supported"),
        (poplar.HALF, poplar.QUARTER_F143, 32, r"outside \[-32, 31\]"),
        (poplar.HALF, poplar.QUARTER_F143, 1.0, "must be an int or a tensor"),
        (poplar.HALF, poplar.QUARTER_F143, "float", "must be an int tensor of one element"),
    ],
)
def test_build_errors_leave_the_graph_unchanged(src, dst, scale, match):
    _, graph = _graph()
    x = graph.add_variable(src, (4,), "x", mapping="linear")
    if scale == "float":
        scale = graph.add_variable(poplar.FLOAT, (), "s", mapping="linear")
    before = _state(graph)
    with pytest.raises(GraphError, match=match):
        popops.pow2scale_cast(graph, x, dst, scale, poplar.Sequence())
    assert _state(graph) == before


def test_plain_cast_refuses_quarter_types():
    _, graph = _graph()
    x = graph.add_variable(poplar.HALF, (4,), "x", mapping="linear")
    before = _state(graph)
    with pytest.raises(GraphError, match="pow2scale_cast"):
        popops.cast(graph, x, poplar.QUARTER_F143, poplar.Sequence())
    assert _state(graph) == before
    assert not poplar.QUARTER_F143.is_float and not poplar.QUARTER_F143.is_integral


def test_estimator_grows_with_the_elements_and_float_ends():
    device, graph = _graph(1)
    prog = poplar.Sequence()
    outs = {}
    for src in (poplar.HALF, poplar.FLOAT):
        x = graph.add_variable(src, (240,), f"x{src}", mapping="linear")
        outs[src] = popops.pow2scale_cast(graph, x, poplar.QUARTER_F143, 0, prog, name=f"c{src}")
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    profile = engine.get_graph_profile()
    names = profile["computeSets"]["names"]
    cycles = profile["computeSets"]["cycleEstimates"]["cyclesByTile"]
    half = max(cycles[next(k for k, n in enumerate(names) if n.startswith("chalf/"))])
    flt = max(cycles[next(k for k, n in enumerate(names) if n.startswith("cfloat/"))])
    assert 0 < half < flt
    assert Pow2ScaleCast.name == "popops::Pow2ScaleCast"


def test_gathered_fields_take_the_batched_compute_path():
    """A transposed source is gathered (no direct views): ``compute`` runs, not ``prepare``'s
    closure, with the same codes; two runs with different scales."""
    device, graph = _graph()
    x = graph.add_variable(poplar.FLOAT, (6, 10), "x", mapping="linear")
    s = graph.add_variable(poplar.INT, (), "s", mapping="linear")
    graph.create_host_write("x", x)
    graph.create_host_write("s", s)
    prog = poplar.Sequence()
    codes = popops.pow2scale_cast(graph, x.transpose(), poplar.QUARTER_F143, s, prog)
    graph.create_host_read("codes", codes)
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    xv = np.random.default_rng(5).standard_normal((6, 10)).astype(np.float32) * 50
    engine.write_tensor("x", xv)
    for scale in (0, -3):
        engine.write_tensor("s", np.int32(scale))
        engine.run(0)
        got = engine.read_tensor("codes").reshape(10, 6)
        np.testing.assert_array_equal(got, encode(xv.T, F143, scale))
