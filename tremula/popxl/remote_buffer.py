"""Remote buffers: storage outside tile memory with ``entries`` slots of one tensor shape."""

from __future__ import annotations

from typing import Any

from tremula.popxl import dtypes
from tremula.popxl.context import get_current_graph
from tremula.popxl.tensor import Tensor


class RemoteBuffer:
    """``entries`` slots of ``tensor_shape`` x ``tensor_dtype`` in streaming memory."""

    def __init__(
        self, tensor_shape: tuple[int, ...], tensor_dtype: dtypes.dtype, entries: int = 1
    ) -> None:
        # everything is checked before the Ir allocates an id: a refused buffer takes none
        shape = tuple(int(s) for s in tensor_shape)
        dtype = dtypes.dtype.as_dtype(tensor_dtype)
        _check_entries(entries, f"RemoteBuffer({dtype} {shape})")
        ir = get_current_graph().ir
        self._ir = ir
        self._remote_buffer_id = ir._next_remote_buffer_id()
        self._shape = shape
        self._dtype = dtype
        self._entries = int(entries)
        self.meta_shape: tuple[int, ...] = ()
        ir._remote_buffers.append(self)

    @property
    def _current_ir(self) -> Any:
        """The buffer's Ir in PopXL's IR bindings (``ir._pb_ir``, whose
        ``getRemoteBufferInfo(remote_buffer_id)`` describes this buffer), as PopXL's
        attribute of that name."""
        return self._ir._pb_ir

    @property
    def remote_buffer_id(self) -> int:
        """The buffer's id in its Ir (1, 2, ...; read-only)."""
        return self._remote_buffer_id

    @property
    def tensor_shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def tensor_dtype(self) -> dtypes.dtype:
        return self._dtype

    @property
    def entries(self) -> int:
        return self._entries

    @entries.setter
    def entries(self, value: int) -> None:
        _check_entries(value, repr(self))
        self._entries = int(value)

    def set_remote_buffer_info(
        self, tensor_dtype: dtypes.dtype, tensor_shape: tuple[int, ...], entries: int = 1
    ) -> None:
        """Describe the buffer again: ``entries`` slots of ``tensor_shape`` x
        ``tensor_dtype`` (PopXL's default: one entry).

        Raises:
            ValueError: ``entries`` is not a positive integer (nothing is changed).
        """
        _check_entries(entries, repr(self))  # before changing anything
        dtype = dtypes.dtype.as_dtype(tensor_dtype)
        self._shape = tuple(int(s) for s in tensor_shape)
        self._dtype = dtype
        self._entries = int(entries)

    def validate_tensor_matches_buffer(self, t: Tensor, num_shards: int = 1) -> None:
        if t.dtype != self._dtype or t.shape != self._shape:
            raise ValueError(
                f"Tensor {t.id} does not match buffer. Tensor: {t.dtype} {t.shape}; "
                f"remote buffer {self.remote_buffer_id}: {self._dtype} {self._shape}"
            )

    def __repr__(self) -> str:
        return (
            f"RemoteBuffer[id={self.remote_buffer_id} {self._dtype} {self._shape} "
            f"entries={self._entries}]"
        )


def _check_entries(entries: Any, what: str) -> None:
    """``ValueError`` naming the buffer unless ``entries`` is an integer >= 1."""
    try:
        ok = not isinstance(entries, bool) and int(entries) == entries and entries >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"Entries must be a non-zero, positive integer. Got {entries!r} ({what})")


def remote_buffer(
    tensor_shape: tuple[int, ...], tensor_dtype: dtypes.dtype, entries: int = 1
) -> RemoteBuffer:
    return RemoteBuffer(tensor_shape, tensor_dtype, entries)
