"""The data effect of a host node (``nodes.HostNode``): one handler per host action
(stream copies, remote-buffer loads and stores, host-function calls, prints, code loads),
on a replica selection ``rsel`` of the runtime (``run.Runtime``). Host functions and stream
callbacks, the user's code, run under the caller's floating-point error state
(``numerics.as_caller``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.plan import Gather
from tremula.engine.streams import StreamConnection
from tremula.errors import EngineError, StreamError
from tremula.numerics import as_caller
from tremula.poplar.handles import DataStream

if TYPE_CHECKING:
    from tremula.engine.run import Runtime


def _host(rt: Runtime, node: N.HostNode, rsel: Any) -> None:
    action, handler = node.action, HOST_ACTIONS[type(node.action)]
    if _calls_user_code(rt, action):  # the user's error state, not the run's quiet one
        as_caller(handler, rt, action, rsel, node.name)
    else:
        handler(rt, action, rsel, node.name)


def _calls_user_code(rt: Runtime, action: Any) -> bool:
    """Whether a host action calls the user's code: a host function, or a stream transfer
    whose connection is a callback."""
    if isinstance(action, N.HostCall):
        return True
    if isinstance(action, N.StreamIn | N.StreamOut):
        conn = rt.streams.get(action.stream.name)
        return conn is not None and conn.callback is not None
    return False


def _remote_rows(
    rt: Runtime, action: N.RemoteLoad | N.RemoteStore, rsel: Any, where: str
) -> np.ndarray:
    buf, offset = action.buffer, action.offset
    if isinstance(offset, Gather):
        rows = offset.read(rt.storage, rsel).astype(np.int64)
    else:
        count = np.arange(rt.replicas)[rsel].size
        rows = np.full((count, 1), offset, dtype=np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= buf.repeats):
        bad = int(rows.min() if rows.min() < 0 else rows.max())
        raise EngineError(
            f"remote buffer {buf.name!r}: row offset {bad} out of range "
            f"[0, {buf.repeats}) in program {where!r}"
        )
    return rows


def _stream(rt: Runtime, stream: DataStream, where: str) -> StreamConnection:
    conn = rt.streams.get(stream.name)
    if conn is None:
        raise StreamError(
            f"stream {stream.name!r} is used by program {where!r} but not connected; call "
            f"engine.connect_stream({stream.name!r}, buffer_or_callback)"
        )
    return conn


def _stream_in(rt: Runtime, a: N.StreamIn, rsel: Any, where: str) -> None:
    data = _stream(rt, a.stream, where).take(rsel, a.stream.dtype)
    a.dst.write(rt.storage, rsel, data)


def _stream_out(rt: Runtime, a: N.StreamOut, rsel: Any, where: str) -> None:
    _stream(rt, a.stream, where).give(rsel, a.src.read(rt.storage, rsel))


def _remote_load(rt: Runtime, a: N.RemoteLoad, rsel: Any, where: str) -> None:
    rows = _remote_rows(rt, a, rsel, where)
    reps = np.arange(rt.replicas)[rsel]
    data = rt.remote[a.buffer.name][reps[:, None], rows]  # [replica, k, n]
    a.dst.write(rt.storage, rsel, data.reshape(reps.size, -1))


def _remote_store(rt: Runtime, a: N.RemoteStore, rsel: Any, where: str) -> None:
    rows = _remote_rows(rt, a, rsel, where)
    reps = np.arange(rt.replicas)[rsel]
    data = a.src.read(rt.storage, rsel).reshape(reps.size, rows.shape[1], -1)
    rt.remote[a.buffer.name][reps[:, None], rows] = data


def _host_call(rt: Runtime, a: N.HostCall, rsel: Any, where: str) -> None:
    hf = a.function
    connected = rt.host_functions.get(hf.name)
    if connected is None:
        raise EngineError(
            f"host function {hf.name!r} is called by program {where!r} but not connected; "
            f"call engine.connect_host_function({hf.name!r}, fn)"
        )
    fn, all_replicas = connected
    ins = [g.read(rt.storage, rsel) for g in a.inputs]
    reps = np.arange(rt.replicas)[rsel]
    outs = [np.zeros((reps.size, spec.num_elements), dtype=spec.dtype.numpy) for spec in hf.outputs]
    if all_replicas:  # one callback for the replicas together
        _host_results(hf, fn([x.copy() for x in ins], outs), outs)
    else:  # host work: one callback per replica, as Poplar does
        for i in range(reps.size):
            row_outs = [o[i] for o in outs]
            _host_results(hf, fn([x[i].copy() for x in ins], row_outs), row_outs)
    for g, o in zip(a.outputs, outs):
        g.write(rt.storage, rsel, o)


def _host_results(hf: Any, res: Any, outs: list[np.ndarray]) -> None:
    """Copy what a host callback returned (if anything) into its output arrays."""
    if res is None:
        return
    res = [res] if isinstance(res, np.ndarray) else list(res)
    if len(res) != len(outs):
        raise EngineError(
            f"host function {hf.name!r} returned {len(res)} arrays, declared {len(outs)} outputs"
        )
    for o, r in zip(outs, res):
        o[...] = np.asarray(r).reshape(o.shape)


def _print(rt: Runtime, a: N.Print, rsel: Any, where: str) -> None:
    data = a.src.read(rt.storage, rsel)
    for i, r in enumerate(rt.replica_ids[rsel]):
        prefix = a.title + (f" (replica {r})" if rt.group.total > 1 else "")
        value = data[i].reshape(a.shape)
        value = np.array2string(value, separator=", ") if a.fmt is None else a.fmt.format(value)
        print(f"{prefix}: {value}", file=rt.out)


def _code_load(rt: Runtime, a: N.CodeLoad, rsel: Any, where: str) -> None:
    return None  # code is immutable; only the time and the liveness change


HOST_ACTIONS: dict[type, Callable[[Runtime, Any, Any, str], None]] = {
    N.StreamIn: _stream_in,
    N.StreamOut: _stream_out,
    N.RemoteLoad: _remote_load,
    N.RemoteStore: _remote_store,
    N.HostCall: _host_call,
    N.Print: _print,
    N.CodeLoad: _code_load,
}
