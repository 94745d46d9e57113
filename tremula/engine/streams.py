"""Host streams of a run: host buffers and callbacks bound to a graph's data streams.

A :class:`StreamConnection` is what ``Engine.connect_stream`` binds: a host array (read or
written round-robin, one row per replica and a depth of buffered transfers) or a callback.
The interpreter's host actions (:mod:`tremula.engine.hostactions`) take rows from it for
stream copies to the device and give rows to it for copies to the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tremula.errors import StreamError
from tremula.poplar.handles import DataStream
from tremula.poplar.types import Type, exact_cast

#: the replica selection of every replica (the fast path)
ALL = slice(None)


def host_buffer(stream: DataStream, source: Any) -> np.ndarray:
    """Check (and for host-to-device data of other types, convert) a stream's host buffer.

    A device-to-host stream fills a NumPy array in place: it must be one, of the stream's
    type, writable and C-contiguous. Host-to-device data of the stream's type are used as they
    are; an array of another numeric type is checked now and converted at each transfer
    (so later changes to it are seen); anything else is converted now. Conversions keep
    every value or fail (:func:`tremula.poplar.types.exact_cast`).

    Raises:
        StreamError: Naming the stream and what is wrong with the buffer.
    """
    what = f"stream {stream.name!r}"
    if stream.is_host_to_device:
        if isinstance(source, np.ndarray) and source.dtype.kind in "biuf":
            exact_cast(source, stream.dtype, what)
            return source
        return exact_cast(source, stream.dtype, what)
    want = stream.dtype.numpy
    if not isinstance(source, np.ndarray):
        raise StreamError(
            f"{what}: the device fills a NumPy array in place, got {type(source).__name__} "
            f"(use e.g. np.zeros({stream.num_elements}, np.{want}))"
        )
    if source.dtype != want:
        raise StreamError(
            f"{what} is {stream.dtype}: the output buffer is {source.dtype}; pass a {want} "
            f"array (the device writes its values as they are)"
        )
    if not source.flags.writeable:
        raise StreamError(f"{what}: the output buffer is read-only")
    if not source.flags.c_contiguous:
        raise StreamError(
            f"{what}: the host buffer must be C-contiguous so that the device can fill it in place"
        )
    return source


class StreamConnection:
    """A host buffer consumed (host to device) or filled (device to host) one transfer at a
    time, circularly, or a callback called once per transfer with a ``[replica, n]`` array
    (``[n]`` when there is one replica)."""

    def __init__(self, stream: DataStream, source: Any, replicas: int) -> None:
        self.stream = stream
        self.replicas = replicas
        self.pos = np.zeros(replicas, dtype=np.int64)
        self._all = np.arange(replicas)
        n = stream.num_elements
        name = stream.name
        if callable(source):
            self.callback: Callable[..., Any] | None = source
            self.buffer: np.ndarray | None = None
            return
        self.callback = None
        source = host_buffer(stream, source)
        shared = replicas == 1 or stream.replication_mode == "broadcast"
        if shared:
            if source.size == 0 or source.size % n:
                raise StreamError(
                    f"stream {name!r}: host buffer has {source.size} elements; "
                    f"expected a positive multiple of {n} (one transfer)"
                )
            view = source.reshape(1, -1, n)
        else:
            if (
                source.ndim < 1
                or source.shape[0] != replicas
                or source.size == 0
                or (source.size // replicas) % n
            ):
                raise StreamError(
                    f"stream {name!r}: host buffer of shape {source.shape}; "
                    f"expected shape ({replicas}, k * {n}) with a leading "
                    f"replica axis"
                )
            view = source.reshape(replicas, -1, n)
        if not stream.is_host_to_device and not np.shares_memory(view, source):
            raise StreamError(f"stream {name!r}: cannot write into the host buffer in place")
        self.buffer = view
        self.shared = shared
        self._source_shape = source.shape
        self._want = stream.dtype.numpy

    def rebind(self, source: Any) -> bool:
        """Take ``source`` as the buffer, restarting at its first transfer, when it is an
        array of the current buffer's shape, type and contiguity (the checks of a new
        connection then hold already); False (nothing changed) otherwise.

        Raises:
            StreamError: ``source`` is an array this stream cannot use (see
                :func:`host_buffer`).
        """
        old = self.buffer
        if old is None or type(source) is not np.ndarray:
            return False
        flags = source.flags
        if not (
            source.dtype == self._want
            and flags.c_contiguous
            and (flags.writeable or self.stream.is_host_to_device)
        ):  # (an array of the stream's type, contiguous and, for the device to fill,
            # writable passes host_buffer's checks as it is)
            source = host_buffer(self.stream, source)
        if (
            source.shape != self._source_shape
            or source.dtype != old.dtype
            or not source.flags.c_contiguous
        ):
            return False
        self.buffer = source.reshape(old.shape)
        self.pos.fill(0)
        return True

    def _exact(self, data: Any) -> np.ndarray:
        """One transfer's host data as the stream's type (converted only when exact)."""
        return exact_cast(data, self.stream.dtype, f"stream {self.stream.name!r}")

    @property
    def _array(self) -> np.ndarray:
        """The host buffer, ``[rows, transfers, n]``."""
        if self.buffer is None:
            raise StreamError(f"stream {self.stream.name!r} is connected to a callback")
        return self.buffer

    def _rows(self, rsel: slice | np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        reps = self._all if rsel is ALL else np.arange(self.replicas)[rsel]
        pos = self.pos[reps] % depth
        self.pos[reps] = pos + 1
        return (np.zeros_like(reps) if self.shared else reps), pos

    def take(self, rsel: slice | np.ndarray, dtype: Type) -> np.ndarray:
        """The next transfer for each selected replica, ``[replica, n]``."""
        if self.callback is not None:
            count = np.arange(self.replicas)[rsel].size
            out = np.zeros((count, self.stream.num_elements), dtype=dtype.numpy)
            res = self.callback(out[0] if self.replicas == 1 else out)
            if res is not None:
                res = self._exact(res)
                if res.size != out.size:
                    raise StreamError(
                        f"stream {self.stream.name!r}: the callback returned {res.size} "
                        f"values for a transfer of {out.size}"
                    )
                out[...] = res.reshape(out.shape)
            return out
        buf = self._array
        if self.replicas == 1 and self._one(rsel):  # a view of the transfer, no fancy index
            return self._exact(buf[0, self._next(buf.shape[1])])[None]
        reps, pos = self._rows(rsel, buf.shape[1])
        return self._exact(buf[reps, pos])

    @staticmethod
    def _one(rsel: slice | np.ndarray) -> bool:
        return isinstance(rsel, slice) or len(rsel) == 1

    def _next(self, depth: int) -> int:
        """The one replica's next transfer (and advance)."""
        pos = int(self.pos[0]) % depth
        self.pos[0] = pos + 1
        return pos

    def give(self, rsel: slice | np.ndarray, data: np.ndarray) -> None:
        if self.callback is not None:
            self.callback(data[0].copy() if self.replicas == 1 else data.copy())
            return
        buf = self._array
        if self.replicas == 1 and self._one(rsel):
            buf[0, self._next(buf.shape[1])] = data[0]
            return
        reps, pos = self._rows(rsel, buf.shape[1])
        buf[reps, pos] = data


def replayed_take(
    streams: dict[str, StreamConnection],
    name: str,
    want: np.dtype,
    put: Callable[[np.ndarray], None],
    fallback: Callable[[], None],
) -> Callable[[], None]:
    """A replayed host-to-device transfer of stream ``name`` for a device of one replica:
    the connection is looked up at each call (a run may connect another buffer), and a
    buffer of the stream's type hands ``put`` a ``[1, n]`` view of its next transfer, as
    :meth:`StreamConnection.take` does, without its checks and conversion; a callback, a
    buffer of another type (converted at each transfer) or no connection go through
    ``fallback`` (the interpreter's handler, with its errors)."""

    def take() -> None:
        conn = streams.get(name)
        buf = None if conn is None else conn.buffer
        if conn is None or buf is None or buf.dtype != want:
            fallback()
            return
        put(buf[0, conn._next(buf.shape[1])][None])

    return take


def replayed_give(
    streams: dict[str, StreamConnection],
    name: str,
    get: Callable[[], np.ndarray],
    fallback: Callable[[], None],
) -> Callable[[], None]:
    """A replayed device-to-host transfer of stream ``name`` for a device of one replica
    (see :func:`replayed_take`): ``get()[0]`` into the buffer's next transfer, as
    :meth:`StreamConnection.give` does; a callback or no connection go through
    ``fallback``."""

    def give() -> None:
        conn = streams.get(name)
        buf = None if conn is None else conn.buffer
        if conn is None or buf is None:
            fallback()
            return
        buf[0, conn._next(buf.shape[1])] = get()[0]

    return give
