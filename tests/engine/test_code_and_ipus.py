"""Function code loaded from streaming memory, and exchanges between IPUs."""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.demo import SquarePlusOne
from tremula.profile import validate


def _function_program(buffered: bool):
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    g.add_codelets(SquarePlusOne)
    x = g.add_variable(poplar.FLOAT, (4, 8), "x", mapping="linear")
    y = g.add_variable(poplar.FLOAT, (4, 8), "y", mapping="linear")
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    cs = g.add_compute_set("square")
    g.add_vertices(cs, "demo::SquarePlusOne", {"x": x, "y": y}, range(4))
    fn = g.add_function(poplar.Execute(cs), "square_fn")
    steps = [poplar.Call(fn)]
    if buffered:
        steps.insert(0, poplar.Copy(g.add_function_buffer(fn), fn))
    engine = poplar.Engine(g, poplar.Sequence(steps))
    engine.load(device)
    engine.write_tensor("x", np.arange(32.0))
    engine.run(0)
    np.testing.assert_allclose(engine.read_tensor("y").reshape(-1), np.arange(32.0) ** 2 + 1)
    validate(engine.get_graph_profile(), engine.get_execution_profile())
    return engine


def test_remote_code_is_not_always_live_and_costs_a_load():
    plain, loaded = _function_program(False), _function_program(True)
    code = SquarePlusOne.code_bytes
    mem_plain = plain.get_graph_profile()["memory"]
    mem_loaded = loaded.get_graph_profile()["memory"]
    vc_plain = mem_plain["byCategory"]["vertexCode"]["nonInterleaved"]
    vc_loaded = mem_loaded["byCategory"]["vertexCode"]["nonInterleaved"]
    assert vc_plain["nonOverlapped"] == [code] * 4 and vc_plain["overlapped"] == [0] * 4
    # with a function buffer the vertex code (and the function's control code) is
    # not-always-live: it occupies tile memory only from the load to the call
    assert vc_loaded["nonOverlapped"] == [0] * 4
    assert all(b >= code for b in vc_loaded["overlapped"])
    always_plain = mem_plain["liveness"]["alwaysLive"]["bytesByTile"]
    always_loaded = mem_loaded["liveness"]["alwaysLive"]["bytesByTile"]
    assert all(a < b for a, b in zip(always_loaded, always_plain))
    steps = loaded.get_execution_profile()["simulation"]["steps"]
    names = [s.get("name", "") for s in steps if s["type"] == "StreamCopy"]
    assert names == ["square_fn/CodeLoad"]


def test_vertex_reading_another_ipu_gets_a_global_exchange():
    device = poplar.IPUModel(tiles_per_ipu=2, num_ipus=2).create_device()
    g = poplar.Graph(device.target)
    g.add_codelets(SquarePlusOne)
    x = g.add_variable(poplar.FLOAT, (6,), "x")
    y = g.add_variable(poplar.FLOAT, (6,), "y")
    g.set_tile_mapping(x, 0)  # IPU 0
    g.set_tile_mapping(y, 3)  # IPU 1
    cs = g.add_compute_set("square")
    g.add_vertex(cs, "demo::SquarePlusOne", {"x": x, "y": y}, tile=3)
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    engine = poplar.Engine(g, poplar.Execute(cs))
    engine.load(device)
    engine.write_tensor("x", np.arange(6.0))
    engine.run(0)
    np.testing.assert_allclose(engine.read_tensor("y"), np.arange(6.0) ** 2 + 1)
    graph, execution = engine.get_graph_profile(), engine.get_execution_profile()
    validate(graph, execution)
    external = graph["externalExchanges"]
    assert external["bytesSentByTile"] == [[24, 0, 0, 0]]
    assert external["bytesReceivedByTile"] == [[0, 0, 0, 24]]
    kinds = [s["type"] for s in execution["simulation"]["steps"]]
    assert kinds == ["Sync", "GlobalExchange", "OnTileExecute"]
    sync = execution["simulation"]["steps"][0]
    assert sync["syncType"] == "External"


def test_empty_variable_last_in_its_space_compiles():
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    g.add_variable(poplar.FLOAT, (4,), "x", mapping="linear")
    g.add_variable(poplar.FLOAT, (0,), "empty")
    engine = poplar.Engine(g, poplar.Sequence())
    total = engine.get_graph_profile()["memory"]["byCategory"]["variable"]["total"]
    assert total == [4, 4, 4, 4]


def test_super_tile_pair_receives_shared_data_at_twice_the_rate():
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    g.add_codelets(SquarePlusOne)
    x = g.add_variable(poplar.FLOAT, (400,), "x")
    g.set_tile_mapping(x, 3)
    cs = g.add_compute_set("both")
    for tile in (0, 2):  # tiles 0 and 2 are on different super-tiles; then 0 and 1 share one
        y = g.add_variable(poplar.FLOAT, (400,), f"y{tile}")
        g.set_tile_mapping(y, tile)
        g.add_vertex(cs, "demo::SquarePlusOne", {"x": x, "y": y}, tile=tile)
    apart = poplar.Engine(g, poplar.Execute(cs)).get_graph_profile()["exchanges"]
    fixed, bpc = device.target.exchange_fixed_cycles, device.target.exchange_bytes_per_cycle
    assert apart["cyclesByTile"][0][:3] == [fixed + 1600 // bpc, 0, fixed + 1600 // bpc]

    g2 = poplar.Graph(device.target)
    g2.add_codelets(SquarePlusOne)
    x2 = g2.add_variable(poplar.FLOAT, (400,), "x")
    g2.set_tile_mapping(x2, 3)
    cs2 = g2.add_compute_set("pair")
    for tile in (0, 1):
        y = g2.add_variable(poplar.FLOAT, (400,), f"y{tile}")
        g2.set_tile_mapping(y, tile)
        g2.add_vertex(cs2, "demo::SquarePlusOne", {"x": x2, "y": y}, tile=tile)
    pair = poplar.Engine(g2, poplar.Execute(cs2)).get_graph_profile()["exchanges"]
    assert pair["bytesReceivedByTile"][0][:2] == [1600, 1600]  # bytes are still bytes
    assert pair["cyclesByTile"][0][:2] == [fixed + 800 // bpc] * 2  # at twice the rate
    assert pair["bytesSentByTile"][0][3] == 1600  # one send feeds both


def test_exchange_regions_follow_tile_memory_not_logical_order():
    """Rows 0, 2, 4 of a matrix on tile 1 are one region in tile 1's memory (a tile stores
    its share of a variable contiguously), so receiving them takes one exchange region."""
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    g.add_codelets(SquarePlusOne)
    m = g.add_variable(poplar.FLOAT, (6, 4), "m")
    g.set_tile_mapping(m, np.repeat([1, 2, 1, 2, 1, 2], 4).reshape(6, 4))
    y = g.add_variable(poplar.FLOAT, (3, 4), "y")
    g.set_tile_mapping(y, 0)
    cs = g.add_compute_set("gather_rows")
    g.add_vertex(cs, "demo::SquarePlusOne", {"x": m[::2], "y": y}, tile=0)
    code = poplar.Engine(g, poplar.Execute(cs)).get_graph_profile()["exchanges"]
    per_region = device.target.exchange_code_bytes_per_region
    assert code["bytesReceivedByTile"][0][0] == 48
    assert code["codeBytesByTile"][0][0] == per_region  # one region, not three


def _code_program(steps_of):
    """A function with a function buffer, a 4 KiB temporary ``tmp`` written by a stream and
    read by another, and a program from ``steps_of(fn, buffer, tmp_in, tmp_out, graph)``.
    Returns the peak not-always-live bytes on tile 0 and the function's code bytes there."""
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    g.add_codelets(SquarePlusOne)
    x = g.add_variable(poplar.FLOAT, (4, 8), "x", mapping="linear")
    y = g.add_variable(poplar.FLOAT, (4, 8), "y", mapping="linear")
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    cs = g.add_compute_set("square")
    g.add_vertices(cs, "demo::SquarePlusOne", {"x": x, "y": y}, range(4))
    fn = g.add_function(poplar.Execute(cs), "square_fn")
    buffer = g.add_function_buffer(fn)
    tmp = g.add_variable(poplar.FLOAT, (1024,), "tmp")
    g.set_tile_mapping(tmp, 0)
    tmp_in = poplar.Copy(g.add_host_to_device_fifo("in", poplar.FLOAT, 1024), tmp)
    tmp_out = poplar.Copy(tmp, g.add_device_to_host_fifo("out", poplar.FLOAT, 1024))
    engine = poplar.Engine(g, poplar.Sequence(steps_of(fn, buffer, tmp_in, tmp_out, g)))
    liveness = engine.get_graph_profile()["memory"]["liveness"]["notAlwaysLive"]
    code = engine.step_plan.function_code[fn.id][0]
    return liveness["maxBytesByTile"][0], int(code)


def test_code_is_dead_between_a_call_and_the_next_load():
    def steps(fn, buf, tmp_in, tmp_out, g):
        return [
            poplar.Copy(buf, fn),
            poplar.Call(fn),
            tmp_in,
            tmp_out,
            poplar.Copy(buf, fn),
            poplar.Call(fn),
        ]

    peak, code = _code_program(steps)
    assert peak == max(4096, code)  # the temporary and the code never overlap

    def steps_without_reload(fn, buf, tmp_in, tmp_out, g):
        return [poplar.Copy(buf, fn), poplar.Call(fn), tmp_in, tmp_out, poplar.Call(fn)]

    peak, code = _code_program(steps_without_reload)
    assert peak == 4096 + code  # live from the load to the last call, across the temporary


def test_a_load_inside_a_branch_is_ignored_after_the_branch():
    def steps(fn, buf, tmp_in, tmp_out, g):
        flag = g.add_variable(poplar.INT, (1,), "flag")
        g.set_tile_mapping(flag, 1)
        g.create_host_write("flag", flag)
        return [tmp_in, tmp_out, poplar.If(flag, poplar.Copy(buf, fn)), poplar.Call(fn)]

    peak, code = _code_program(steps)
    assert peak == 4096 + code  # pessimistic: the code is taken as live from the start

    def steps_unconditional(fn, buf, tmp_in, tmp_out, g):
        return [tmp_in, tmp_out, poplar.Copy(buf, fn), poplar.Call(fn)]

    peak, code = _code_program(steps_unconditional)
    assert peak == max(4096, code)
