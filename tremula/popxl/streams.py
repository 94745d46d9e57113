"""Host streams: ``h2d_stream`` / ``d2h_stream`` (always in the main graph)."""

from __future__ import annotations

from typing import Any

from tremula.popxl import dtypes
from tremula.popxl.context import get_current_graph
from tremula.popxl.tensor import Tensor, TensorSpec


class Stream:
    """A host stream (PopXL's ``popxl.streams.Stream``, the base of both directions).

    Streams compare and hash by identity (object's own, in C: a session's run looks each
    one up in several dicts)."""

    _spec: TensorSpec
    _name: str
    _tensor: Tensor | None  # the stream's tensor in the main graph

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"popxl.{type(self).__name__} cannot be constructed directly: use "
            f"popxl.h2d_stream / popxl.d2h_stream"
        )

    @property
    def _stream_tensor(self) -> Tensor:
        """The stream's tensor in the main graph (PopXL's attribute: the tensor the stream
        wraps, whose id is ``tensor_id``)."""
        if self._tensor is None:
            raise ValueError(f"{self!r} was not made by h2d_stream / d2h_stream")
        return self._tensor

    @classmethod
    def _from_tensor(cls, stream_tensor: Tensor) -> Stream:
        """The stream of a stream tensor (PopXL's constructor from the tensor): the very
        stream object ``h2d_stream`` / ``d2h_stream`` made for it.

        Raises:
            ValueError: the tensor is no stream's tensor, or a stream of the other direction.
        """
        for stream in stream_tensor.ir._streams:
            if stream._tensor is stream_tensor:
                if not isinstance(stream, cls):
                    raise ValueError(
                        f"{cls.__name__}._from_tensor: {stream_tensor.id!r} is the tensor of "
                        f"{stream!r}"
                    )
                return stream
        raise ValueError(
            f"{cls.__name__}._from_tensor: {stream_tensor.id!r} is not the tensor of a stream "
            f"(make streams with popxl.h2d_stream / d2h_stream)"
        )

    @property
    def shape(self) -> tuple[int, ...]:
        return self._spec.shape

    @property
    def dtype(self) -> dtypes.dtype:
        return self._spec.dtype

    @property
    def spec(self) -> TensorSpec:
        return self._spec

    @property
    def tensor_id(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self._name} {self.dtype} {self.shape}]"


class HostToDeviceStream(Stream):
    """A stream from the host: ``ops.host_load`` pops its next slice."""


class DeviceToHostStream(Stream):
    """A stream to the host: ``ops.host_store`` pushes its next slice."""


def _make(
    cls: type[Stream], shape: tuple[int, ...], dtype: dtypes.dtype, name: str | None, default: str
) -> Stream:
    """A stream named as PopXL names it: a tensor id of the main graph (the name, else
    ``default``, through ``Graph._create_tensor_id``: name scopes, clash suffix)."""
    ir = get_current_graph().ir  # streams belong to the Ir's main graph wherever made
    main = ir.main_graph  # the stream's tensor, listed in main_graph.tensors as in PopXL
    stream = cls.__new__(cls)
    stream._spec = TensorSpec(tuple(shape), dtypes.dtype.as_dtype(dtype))
    stream._name = main._create_tensor_id(name or default)
    ir._streams.append(stream)
    ir._stream_names.add(stream._name)
    stream._tensor = Tensor._create(main, stream.tensor_id, stream.spec)
    main._add_tensor(stream._tensor)
    return stream


def h2d_stream(
    shape: tuple[int, ...], dtype: dtypes.dtype, name: str | None = None
) -> HostToDeviceStream:
    return _make(HostToDeviceStream, shape, dtype, name, "h2d_stream")  # type: ignore[return-value]


def d2h_stream(
    shape: tuple[int, ...], dtype: dtypes.dtype, name: str | None = None
) -> DeviceToHostStream:
    return _make(DeviceToHostStream, shape, dtype, name, "d2h_stream")  # type: ignore[return-value]
