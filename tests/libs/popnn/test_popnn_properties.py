"""Property tests of popnn's layout helpers and invariants: the loss's row partition over
any tile mapping, the normalisation views, and softmax rows summing to one."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tremula import poplar
from tremula.libs import popnn
from tremula.libs.popnn.loss import row_partition
from tremula.libs.popnn.norms import Norm


def _helpers():
    name = "tremula_tests_popnn_helpers"
    if name not in sys.modules:
        path = Path(__file__).with_name("popnn_helpers.py")
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()
TARGET = poplar.IPUModel(tiles_per_ipu=16).create_device().target


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 60),
    cols=st.integers(1, 9),
    seed=st.integers(0, 2**16),
    linear=st.booleans(),
)
def test_row_partition_covers_each_row_once_on_its_tile(rows, cols, seed, linear) -> None:
    graph = poplar.Graph(TARGET)
    t = graph.add_variable(poplar.FLOAT, (rows, cols), "t")
    if linear:
        poplar.map_tensor_linearly(graph, t)
    else:
        graph.set_tile_mapping(t, np.random.default_rng(seed).integers(0, 16, (rows, cols)))
    order, tiles, sizes, row_tiles = row_partition(graph, t)
    assert sorted(order.tolist()) == list(range(rows))
    assert sizes.sum() == rows and np.all(sizes > 0)
    vertex_of_row = np.repeat(np.arange(tiles.size), sizes)
    assert np.array_equal(row_tiles[order], tiles[vertex_of_row])
    assert np.bincount(tiles).max() <= TARGET.num_worker_contexts
    assert np.array_equal(row_tiles, graph.tiles_of(t[:, cols // 2]))


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(1, 4),
    groups=st.integers(1, 4),
    per_group=st.integers(1, 3),
    f=st.integers(1, 4),
    strided=st.booleans(),
)
def test_norm_views_group_each_statistic_elements(b, groups, per_group, f, strided) -> None:
    """Reducing the view over its dims and spreading the statistics back give each
    element the statistic of its (sample, group)."""
    graph = poplar.Graph(TARGET)
    c = groups * per_group
    t = graph.add_variable(poplar.FLOAT, (b, c, f), "t")
    norm = Norm((b, c, f), groups, strided)
    view, dims = norm.view(t)
    kept = [s for d, s in enumerate(view.shape) if d not in dims]
    assert tuple(kept) == norm.stats_shape and norm.count * norm.num_stats == t.num_elements
    stat_of = H.stat_index((b, c, f), "group", groups, strided)
    # each reduced group of the view holds exactly the addresses of one statistic
    addr = np.moveaxis(view.addresses, dims, (-2, -1)).reshape(norm.num_stats, -1)
    base = t.addresses.reshape(-1)[0]
    for k in range(norm.num_stats):
        assert np.all(stat_of.reshape(-1)[addr[k] - base] == k)
    stats = graph.add_variable(poplar.FLOAT, (norm.num_stats,), "stats")
    spread = norm.spread(stats).broadcast_to((b, c, f))
    assert np.array_equal(spread.addresses - stats.addresses[0], stat_of)


@settings(max_examples=8, deadline=None)
@given(
    shape=st.sampled_from([(1, 1), (3, 17), (2, 2, 5), (40,)]),
    scale=st.sampled_from([1.0, 30.0, 3000.0]),
    seed=st.integers(0, 1000),
)
def test_softmax_rows_sum_to_one_and_log_softmax_is_its_log(shape, scale, seed) -> None:
    rig = H.Rig()
    x = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    t = rig.input(x)
    s, ls = rig.run(
        [popnn.softmax(rig.graph, t, rig.prog), popnn.log_softmax(rig.graph, t, rig.prog)]
    )
    np.testing.assert_allclose(s.sum(-1), 1, rtol=1e-5)
    assert np.all(s >= 0) and np.all(ls <= 1e-6) and np.isfinite(ls).all()
    np.testing.assert_allclose(np.exp(ls), s, rtol=1e-4, atol=1e-30)
