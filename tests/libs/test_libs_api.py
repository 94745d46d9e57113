"""The API the issue names, called exactly as written there, against NumPy."""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.libs import popops
from tremula.profile import validate


def test_popops_issue_api():
    device = poplar.IPUModel(tiles_per_ipu=16).create_device()
    graph = poplar.Graph(device.target)
    a = graph.add_variable(poplar.FLOAT, (8, 10), "a", mapping="linear")
    b = graph.add_variable(poplar.FLOAT, (8, 10), "b", mapping="linear")
    table = graph.add_variable(poplar.FLOAT, (20, 4), "table", mapping="linear")
    indices = graph.add_variable(poplar.UNSIGNED_INT, (6,), "indices", mapping="linear")
    rows = graph.add_variable(poplar.FLOAT, (6, 4), "rows", mapping="linear")
    for name, t in (("a", a), ("b", b), ("table", table), ("indices", indices), ("rows", rows)):
        graph.create_host_write(name, t)
    prog = poplar.Sequence()
    total = popops.add(graph, a, b, prog)
    mapped = popops.map(graph, popops.expr._1 * popops.expr._2 + 1, [a, b], prog)
    popops.scaled_add_to(graph, a, b, 0.5, prog)
    summed = popops.reduce(graph, total, [1], popops.Operation.ADD, prog)
    gathered = popops.multi_slice(graph, table, indices, prog)
    popops.multi_update_add(graph, table, indices, rows, 2.0, prog)
    outs = {
        "total": total,
        "mapped": mapped,
        "a2": a,
        "summed": summed,
        "gathered": gathered,
        "table2": table,
    }
    for name, t in outs.items():
        graph.create_host_read(name, t)
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    rng = np.random.default_rng(7)
    av, bv = rng.standard_normal((2, 8, 10)).astype(np.float32)
    tv = rng.standard_normal((20, 4)).astype(np.float32)
    iv = np.array([3, 3, 0, 19, 7, 3], dtype=np.uint32)
    rv = rng.standard_normal((6, 4)).astype(np.float32)
    for name, value in (("a", av), ("b", bv), ("table", tv), ("indices", iv), ("rows", rv)):
        engine.write_tensor(name, value)
    engine.run(0)
    got = {name: engine.read_tensor(name) for name in outs}
    np.testing.assert_allclose(got["total"], av + bv, rtol=1e-6)
    np.testing.assert_allclose(got["mapped"], av * bv + 1, rtol=1e-6)
    np.testing.assert_allclose(got["a2"], av + 0.5 * bv, rtol=1e-6)
    np.testing.assert_allclose(got["summed"], (av + bv).sum(1), rtol=1e-5)
    np.testing.assert_array_equal(got["gathered"].reshape(6, 4), tv[iv])
    expected = tv.copy()
    np.add.at(expected, iv, 2.0 * rv)
    np.testing.assert_allclose(got["table2"], expected, rtol=1e-6)
    validate(engine.get_graph_profile(), engine.get_execution_profile())
