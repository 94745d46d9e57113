"""Listings 9.7.1 and 9.7.2: code loading from streaming memory. The values are unchanged;
the memory profile shows the graph's code no longer always live (compared with the same
program without the loads)."""

import numpy as np

import popxl
import popxl.ops as ops


def build(load: str):
    """``load``: "none", "once" (9.7.1) or "every" (9.7.2: a load before every call)."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(4, dtype=np.float32), name="x")
        g = ir.create_graph(lambda t: t * 2 + 1, x)
        outs = []
        with popxl.in_sequence():
            for i in range(3):
                if load == "every" or (load == "once" and i == 0):
                    ops.remote_code_load(g, destination="executable")
                (o,) = ops.call(g, x)
                outs.append(o)
        stream = popxl.d2h_stream(o.shape, o.dtype, name="out")
        ops.host_store(stream, outs[-1])
    session = popxl.Session(ir, "ipu_model")
    with session:
        result = session.run()[stream]
    return result, session.engine.get_graph_profile()["memory"]


values = {}
memory = {}
for load in ("none", "once", "every"):
    values[load], memory[load] = build(load)
    np.testing.assert_array_equal(values[load], np.arange(4) * 2 + 1)


def code(mem, kind):
    return sum(
        sum(mem["byCategory"]["vertexCode"][r][kind])
        for r in ("nonInterleaved", "interleaved", "overflowed")
    )


# without loads the graph's code is always live; with loads it is not-always-live
assert code(memory["none"], "overlapped") == 0
assert code(memory["once"], "nonOverlapped") < code(memory["none"], "nonOverlapped")
assert code(memory["once"], "overlapped") > 0
assert code(memory["every"], "overlapped") > 0
print(
    "listing 9.7: always-live vertex code",
    code(memory["none"], "nonOverlapped"),
    "->",
    code(memory["once"], "nonOverlapped"),
    "bytes with code loading",
)
