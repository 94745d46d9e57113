"""PopXL's ``popxl.utils``: host data normalisation (:func:`to_numpy`), the table printer
PopXL programs use for reports, and the float8 host helpers and dtypes it re-exports."""

from __future__ import annotations

import builtins
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.popxl import dtypes
from tremula.popxl.dtypes import *  # noqa: F403  (PopXL's utils re-exports the dtypes)
from tremula.popxl.fp8_utils import (
    host_fp8_mse_scale,
    host_fp8_mse_scale_pb,
    host_pow2scale_cast_from_fp8,
    host_pow2scale_cast_to_fp8,
)

#: Seconds PopXL waits for a hardware device to become free (kept for programs that read it).
HW_DEVICE_CONNECTION_TIMEOUT = 3600

#: The 64-bit NumPy types and the 32-bit types host data are downcast to.
downcast_np_dtypes: dict[np.dtype, np.dtype] = {
    np.dtype(np.int64): np.dtype(np.int32),
    np.dtype(np.uint64): np.dtype(np.uint32),
    np.dtype(np.float64): np.dtype(np.float32),
}


def torch_imported() -> builtins.bool:
    """Whether ``torch`` has been imported (Tremula never imports it itself)."""
    return "torch" in sys.modules


def _is_torch_tensor(x: Any) -> builtins.bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _memmap(x: np.memmap, dtype: dtypes.dtype | None, downcast: builtins.bool) -> np.ndarray:
    """A memory-mapped array is used in place, so it must already be what the tensor holds."""
    want = dtype.as_numpy() if dtype is not None else x.dtype
    if downcast and dtype is None:
        want = downcast_np_dtypes.get(x.dtype, x.dtype)
    flags = x.flags
    if x.dtype != want or not flags["C_CONTIGUOUS"] or not flags["ALIGNED"]:
        raise ValueError(
            f"When passing a memory-mapped NumPy array it must already have the tensor's "
            f"dtype ({np.dtype(want)}), be C-contiguous and aligned, as it is used in place; "
            f"got dtype {x.dtype}, C-contiguous {flags['C_CONTIGUOUS']}, aligned "
            f"{flags['ALIGNED']}"
        )
    return x


def to_numpy(
    x: Any,
    dtype: dtypes.dtype | None = None,
    downcast: builtins.bool = True,
    copy: builtins.bool = True,
    log2_scale: int | None = None,
    nan_on_overflow: builtins.bool | None = None,
) -> np.ndarray:
    """Host data as a NumPy array, as PopXL stores them for tensors and streams.

    Args:
        x: A NumPy array (a ``np.memmap`` is kept by reference), a torch tensor, a Python
            number or a nested sequence of numbers.
        dtype: The dtype of the result. None: the data's own, with 64-bit types downcast
            to 32-bit ones when ``downcast`` is True (``downcast_np_dtypes``). A float8
            dtype converts float16/32/64 data with ``log2_scale`` (default 0) and
            ``nan_on_overflow`` (default True); float8 or uint8 codes are taken as they are.
        downcast: Downcast 64-bit data when ``dtype`` is None.
        copy: Return a copy even when no conversion is needed (not for a memmap).
        log2_scale: For a float8 ``dtype`` only: the data are multiplied by
            ``2**log2_scale`` before rounding.
        nan_on_overflow: For a float8 ``dtype`` only: values out of range become NaN (True)
            or saturate (False).

    Returns:
        The array.

    Raises:
        RuntimeError: ``log2_scale`` or ``nan_on_overflow`` with a dtype that is not float8.
        TypeError: data of a type float8 cannot be made from.
        ValueError: a memmap that is not already of the result's dtype, C-contiguous and
            aligned.
    """
    dt = None if dtype is None else dtypes.dtype.as_dtype(dtype)
    float8 = dt is not None and dt in (dtypes.float8_143, dtypes.float8_152)
    if not float8 and (log2_scale is not None or nan_on_overflow is not None):
        raise RuntimeError(
            f"to_numpy: log2_scale and nan_on_overflow apply to float8 dtypes only, got dtype "
            f"{dt} with log2_scale={log2_scale!r}, nan_on_overflow={nan_on_overflow!r}"
        )
    if _is_torch_tensor(x):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.memmap):
        return _memmap(x, dt, downcast)
    arr = np.array(x, copy=copy) if copy else np.asarray(x)
    if float8:
        from tremula.popxl.fp8_utils import fp8_host_data

        return fp8_host_data(arr, dt, log2_scale, nan_on_overflow)  # type: ignore[arg-type]
    if dt is not None:
        return arr.astype(dt.as_numpy(), copy=False)
    if downcast and arr.dtype in downcast_np_dtypes:
        return arr.astype(downcast_np_dtypes[arr.dtype])
    return arr


def _popxl_to_numpy(t: Any) -> np.ndarray:
    """The host value of a constant or variable ``t`` as it was given (a copy)."""
    data = getattr(t, "_data", None)
    if data is None:
        raise TypeError(f"{t!r} is not a constant or a variable: it has no host value")
    return np.array(data)


def _to_device_info(device_type: str, num_ipus: int = 1, use_popdist: builtins.bool = False) -> Any:
    """A ``popart.DeviceInfo`` of ``num_ipus`` IPUs for ``device_type``, as PopXL's helper
    makes one: ``"ipu_model"`` an IPU Model, ``"cpu"`` Poplar's CPU device, ``"ipu_hw"``
    an IPU device (an IPU Model in Tremula; ``use_popdist``: the instance's share of a PopRun
    job's IPUs is still ``num_ipus``).

    Raises:
        ValueError: another device type, or fewer than one IPU.
    """
    if device_type not in ("cpu", "ipu_model", "ipu_hw"):
        raise ValueError(
            f"Incorrect device type provided: {device_type}, must be one of: `ipu_hw`, "
            f"`ipu_model`, `cpu`"
        )
    if isinstance(num_ipus, builtins.bool) or int(num_ipus) != num_ipus or num_ipus < 1:
        raise ValueError(f"_to_device_info: num_ipus must be a positive integer, got {num_ipus!r}")
    from tremula import poplar
    from tremula.popxl._ir.core.devices import DeviceInfo
    from tremula.popxl._ir.core.enums import DeviceType

    if device_type == "cpu":
        return DeviceInfo(poplar.Device.create_cpu_device().target, DeviceType.Cpu, 0)
    target = poplar.IPUModel(num_ipus=int(num_ipus)).create_target()
    kind = DeviceType.Ipu if device_type == "ipu_hw" else DeviceType.IpuModel
    return DeviceInfo(target, kind, 0)


def _acquire_hw_device_with_timeout(num_ipus: int = 1) -> Any:
    """An IPU device of ``num_ipus`` IPUs (PopXL waits up to
    ``HW_DEVICE_CONNECTION_TIMEOUT`` seconds for hardware; Tremula's is an IPU Model, there
    at once)."""
    return _to_device_info("ipu_hw", num_ipus)


def table_to_string(
    rows: Sequence[Sequence[Any]], delimiter: str = " | ", header: builtins.bool = True
) -> str:
    """Rows as a text table with left-aligned columns, the first row underlined as a header.

    Args:
        rows: The rows; each cell is printed with ``str``. Rows may differ in length.
        delimiter: What separates two columns.
        header: Underline the first row with dashes.

    Returns:
        The table, one line per row (plus the underline), without a trailing newline.
    """
    cells = [[str(c) for c in row] for row in rows]
    if not cells:
        return ""
    n = max(len(r) for r in cells)
    cells = [r + [""] * (n - len(r)) for r in cells]
    widths = [max(len(r[i]) for r in cells) for i in range(n)]
    lines = [delimiter.join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    if header:
        lines.insert(1, "-" * len(delimiter.join("-" * w for w in widths)))
    return "\n".join(lines)


__all__ = [
    "HW_DEVICE_CONNECTION_TIMEOUT",
    "downcast_np_dtypes",
    "host_fp8_mse_scale",
    "host_fp8_mse_scale_pb",
    "host_pow2scale_cast_from_fp8",
    "host_pow2scale_cast_to_fp8",
    "table_to_string",
    "to_numpy",
    "torch_imported",
]
