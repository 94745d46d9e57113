"""The host side of ``Session.run``: the arrays it takes and fills, checked against the
streams the program uses, and their layout as the engine's stream buffers.

Host arrays are ``[num_host_transfers if > 1] + [replicas if > 1] + stream shape`` (the
replicas of this instance in a PopRun job; any all-ones shape where that is all ones); the
engine's per-replica stream buffers are
``[replica, transfers * elements]``. Inputs are converted to the stream's type only when
every value is kept (``poplar.exact_cast``); outputs must be writable arrays of the stream's
type. Every error names the stream.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tremula.errors import reworded
from tremula.poplar.types import QuarterType, exact_cast
from tremula.popxl.ir import Ir
from tremula.popxl.utils import to_numpy


class HostStreams:
    """The host arrays of a compiled Ir's streams.

    Args:
        ir: The Ir (its transfer count may change between runs).
        replicas: The replicas this process feeds (all of them, or an instance's in a
            PopRun job).
        h2d: The host-to-device streams the program reads.
        d2h: The device-to-host streams it writes.
    """

    def __init__(self, ir: Ir, replicas: int, h2d: Iterable[Any], d2h: Iterable[Any]) -> None:
        self.ir = ir
        self.replicas = replicas
        self.h2d = h2d
        self.d2h = d2h
        self._shapes: tuple[tuple[int, int], dict[Any, tuple[int, ...]]] = ((0, 0), {})
        #: the h2d streams as a set, made again when lowering added streams (its length)
        self._h2d_set: tuple[int, frozenset[Any]] = (-1, frozenset())
        #: stream -> the NumPy type of a host array taken as it is (None: always converted)
        self._plain: dict[Any, np.dtype | None] = {}

    # ---- shapes ----
    def _counts(self) -> tuple[int, int]:
        return self.ir.num_host_transfers, self.replicas

    def host_shape(self, s: Any) -> tuple[int, ...]:
        """The host array shape of stream ``s`` (made once per transfer count)."""
        key = self._counts()
        shapes = self._shapes
        if shapes[0] != key:
            shapes = self._shapes = (key, {})
        shape = shapes[1].get(s)
        if shape is None:
            shape = shapes[1][s] = self.full_shape(s.shape)
        return shape

    def full_shape(self, shape: Iterable[int]) -> tuple[int, ...]:
        """``[num_host_transfers if > 1] + [replicas if > 1] + shape``."""
        return tuple(d for d in self._counts() if d > 1) + tuple(int(d) for d in shape)

    def _shape_error(self, what: str, s: Any, shape: tuple[int, ...]) -> ValueError:
        nht, R = self._counts()
        job = self.ir.replication_factor
        # in a PopRun job, arrays carry this instance's replicas, not the job's (feeding
        # every replica's data is the usual slip of a program ported to poprun)
        whose = "" if job == R else f", this instance's of the job's {job}"
        return ValueError(
            f"{what}: the array for stream {s.tensor_id!r} has shape {shape}; expected "
            f"{self.host_shape(s)} ([num_host_transfers={nht} if > 1] + [replicas={R}{whose} "
            f"if > 1] + stream shape {tuple(s.shape)})"
        )

    def _fits(self, s: Any, shape: tuple[int, ...]) -> bool:
        """The array shape for stream ``s``: exact, or any all-ones shape (a scalar too)
        when the expected shape is all ones."""
        want = self.host_shape(s)
        return shape == want or (all(d == 1 for d in want) and all(d == 1 for d in shape))

    # ---- checks ----
    def check_streams(
        self, given: Mapping[Any, Any], wanted: Iterable[Any], what: str, kind: str
    ) -> None:
        """``ValueError`` unless ``given`` is keyed by exactly the ``wanted`` streams, saying
        what each wrong key is (a name, a stream of another Ir, a stream no op uses)."""
        wanted = set(wanted)
        if set(given) == wanted:
            return
        ours = {id(s) for s in self.ir._streams}
        by_id = {s.tensor_id: s for s in wanted}
        notes = []
        for key in given:
            if key in wanted:
                continue
            if isinstance(key, str):
                hint = f"the stream {key!r} itself" if key in by_id else "the stream objects"
                notes.append(f"{key!r} is a name: key by {hint}, not by its name")
            elif not hasattr(key, "tensor_id"):
                notes.append(f"{key!r} ({type(key).__name__}) is not a stream")
            elif id(key) not in ours:
                notes.append(f"stream {key.tensor_id!r} belongs to another Ir, not this session's")
            else:
                notes.append(f"stream {key.tensor_id!r} is not an {kind} stream this program uses")
        missing = sorted(s.tensor_id for s in wanted - set(given))
        raise ValueError(
            f"{what}: the {kind} streams given are not the ones the program uses "
            f"(expected {sorted(by_id)}"
            + (f"; missing {missing}" if missing else "")
            + ")"
            + "".join(f"; {n}" for n in notes)
        )

    def check_inputs(self, inputs: Mapping[Any, Any], downcast: bool) -> dict[Any, np.ndarray]:
        """Each input as a contiguous array of its stream's device type and host shape.

        A C-contiguous NumPy array (not a subclass) of the stream's host shape and device
        type is taken as it is: the conversion below would give a copy of it, and the run
        only reads it."""
        if set(inputs) != self._h2d_streams():
            self.check_streams(inputs, self.h2d, "Session.run", "input")  # raises
        out = {}
        for s, value in inputs.items():
            plain = self._plain_dtype(s)
            if (
                type(value) is np.ndarray
                and plain is not None  # (a dtype compared with None is float64)
                and value.dtype == plain
                and value.flags.c_contiguous
                and value.shape == self.host_shape(s)
            ):
                out[s] = value
                continue
            try:
                arr = _input_array(s, value, downcast)
            except (TypeError, ValueError) as err:
                message = f"Session.run: stream {s.tensor_id!r} ({s.dtype.name}): {err}"
                raise reworded(err, message) from None
            if not self._fits(s, arr.shape):
                raise self._shape_error("Session.run", s, arr.shape)
            out[s] = arr.reshape(self.host_shape(s))
        return out

    def _h2d_streams(self) -> frozenset[Any]:
        n, streams = self._h2d_set
        if n != len(self.h2d):  # type: ignore[arg-type]
            streams = frozenset(self.h2d)
            self._h2d_set = (len(streams), streams)
        return streams

    def _plain_dtype(self, s: Any) -> np.dtype | None:
        """The NumPy type of stream ``s``'s device type, None for float8 (codes)."""
        if s not in self._plain:
            device_type = s.dtype.as_poplar()
            quarter = isinstance(device_type, QuarterType)
            self._plain[s] = None if quarter else np.dtype(device_type.numpy)
        return self._plain[s]

    def check_outputs(self, outputs: Mapping[Any, np.ndarray]) -> None:
        """Outputs must be writable NumPy arrays of each stream's type and host shape."""
        what = "Session.run_with_outputs"
        self.check_streams(outputs, self.d2h, what, "output")
        for s, arr in outputs.items():
            if not isinstance(arr, np.ndarray):
                raise TypeError(
                    f"{what}: the output for stream {s.tensor_id!r} must be a NumPy array, "
                    f"got {type(arr).__name__}"
                )
            codes = (np.dtype(np.uint8),) if s.dtype.as_numpy().names else ()
            if arr.dtype != s.dtype.as_numpy() and arr.dtype not in codes:
                raise TypeError(
                    f"{what}: the output for stream {s.tensor_id!r} is {arr.dtype}; the stream "
                    f"is {s.dtype.name}: pass an array of that type "
                    f"(Session.create_host_outputs() makes them)"
                )
            if not arr.flags.writeable:
                raise ValueError(
                    f"{what}: the output for stream {s.tensor_id!r} is read-only; the run "
                    f"writes into it"
                )
            if not self._fits(s, arr.shape):
                raise self._shape_error(what, s, arr.shape)

    # ---- layout ----
    def create_outputs(self) -> dict[Any, np.ndarray]:
        """Zeroed output arrays, ``[num_host_transfers?, replicas?] + stream.shape``."""
        return {s: np.zeros(self.host_shape(s), dtype=s.dtype.as_numpy()) for s in self.d2h}

    def to_engine(self, arr: np.ndarray) -> np.ndarray:
        """A host array ``[nht, R, ...]`` (ones omitted) as the engine's stream buffer:
        ``[nht * n]`` for one replica, ``[R, nht * n]`` for several."""
        nht, R = self._counts()
        if R == 1 and arr.flags.c_contiguous:
            return arr.reshape(-1)  # (what the general case gives: a flat view)
        full = arr.reshape(nht, R, -1)
        if R == 1:
            return np.ascontiguousarray(full[:, 0].reshape(-1))
        return np.ascontiguousarray(full.transpose(1, 0, 2).reshape(R, -1))

    def as_codes(self, s: Any, output: np.ndarray) -> np.ndarray:
        """Output array ``output`` of stream ``s`` in its host shape, float8 as uint8 codes
        (a view)."""
        start = output.reshape(self.host_shape(s))
        return start.view(np.uint8) if start.dtype.names else start

    def output_buffer(self, s: Any, output: np.ndarray) -> np.ndarray:
        """The engine's buffer for stream ``s``, starting from ``output``'s values (slices
        the run does not write keep them); float8 as uint8 codes."""
        return self.to_engine(self.as_codes(s, output)).copy()

    def fill_output(self, s: Any, buffer: np.ndarray, output: np.ndarray) -> None:
        """Copy the engine's buffer of stream ``s`` back into the host array ``output``."""
        if not output.size:  # a zero-element stream: nothing moved
            return
        nht, R = self._counts()
        n = max(1, math.prod(s.shape))
        arr = buffer.reshape(R, nht, n).transpose(1, 0, 2).reshape(output.shape)
        output[...] = arr.view(output.dtype) if output.dtype.names else arr


def _input_array(s: Any, value: Any, downcast: bool) -> np.ndarray:
    """A stream's host value as the engine's array: float8 as uint8 codes (codes of the
    stream's format or uint8 taken as they are, float16/32/64 numbers encoded as
    ``to_numpy`` encodes a float8 variable's data, anything else refused, whatever
    ``downcast``); other types converted only when every value is kept
    (``poplar.exact_cast``: 2.7 or NaN for an integer stream are refused, not truncated;
    floats are rounded to the stream's)."""
    device_type = s.dtype.as_poplar()
    if isinstance(device_type, QuarterType):
        arr = to_numpy(value, s.dtype, downcast)
        return np.ascontiguousarray(arr).view(np.uint8)
    return np.ascontiguousarray(exact_cast(to_numpy(value, None, False), device_type, ""))
