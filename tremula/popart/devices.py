"""PopART's ``DeviceManager`` and ``DeviceInfo``: devices are IPU Models (there is no
hardware; an "available device" is an IPU Model of the asked size) or the CPU target.

A ``DeviceInfo`` *is* a :class:`tremula.poplar.Device`, so PopXL's ``Session`` accepts it as
its device, as PopXL accepts a ``popart.DeviceInfo``; the class lives with PopART's other
core types (``tremula.popxl._ir.core.devices``) because PopXL's ``Session`` makes one for
each device it creates (``session.device``).
"""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.errors import PopartException
from tremula.popxl._ir.core.devices import DeviceInfo
from tremula.popxl._ir.core.enums import DeviceConnectionType, DeviceType, SyncPattern
from tremula.popxl._ir.core.log import LOG

__all__ = ["DeviceInfo", "DeviceManager"]

_LOG = LOG.getChild("devicex")
_MK2_TILES = 1472
#: the IPUs of the system DeviceManager models for hardware queries (an IPU-POD16)
SYSTEM_IPUS = 16
#: PopART's ipuVersion option values -> Tremula target presets
_VERSIONS = {"ipu1": "ipu1", "ipu2": "ipu2", "ipu21": "bow", "bow": "bow"}
_MODEL_OPTIONS = {"numIPUs", "tilesPerIPU", "compileIPUCode", "ipuVersion", "syncPattern"}


def _int_option(opts: dict[str, Any], key: str, default: int) -> int:
    value = opts.get(key, default)
    try:
        n = int(str(value))
    except ValueError:
        raise PopartException(
            f"createIpuModelDevice: option {key!r} must be an integer, got {value!r}"
        ) from None
    if n < 1:
        raise PopartException(f"createIpuModelDevice: option {key!r} must be >= 1, got {n}")
    return n


def _connection(value: Any) -> Any:
    """A DeviceConnectionType from the enum or its name."""
    try:
        return (
            DeviceConnectionType[value] if isinstance(value, str) else DeviceConnectionType(value)
        )
    except (KeyError, ValueError):
        raise PopartException(
            f"DeviceManager: {value!r} is not a popart.DeviceConnectionType"
        ) from None


class DeviceManager:
    """PopART's device manager (a singleton): IPU Models of any size and the CPU device."""

    _instance: DeviceManager | None = None
    _next_id: int

    def __new__(cls) -> DeviceManager:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance._next_id = 0
        return cls._instance

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def createCpuDevice(self) -> DeviceInfo:
        """Poplar's CPU device: one tile, no replication, no cycle fidelity."""
        return DeviceInfo(poplar.Device.create_cpu_device().target, DeviceType.Cpu, self._new_id())

    def _model(
        self,
        opts: dict[str, Any] | None,
        kind: Any,
        what: str,
        conn: Any,
        device_id: int | None = None,
    ) -> DeviceInfo:
        opts = dict(opts or {})
        unknown = sorted(set(opts) - _MODEL_OPTIONS)
        if unknown:
            raise PopartException(
                f"{what}: unknown options {unknown}; known: {sorted(_MODEL_OPTIONS)}"
            )
        version = str(opts.get("ipuVersion", "ipu2")).lower()
        if version not in _VERSIONS:
            raise PopartException(
                f"{what}: ipuVersion {version!r} unknown; known: {sorted(_VERSIONS)}"
            )
        ipus = _int_option(opts, "numIPUs", 1)
        tiles = _int_option(opts, "tilesPerIPU", _MK2_TILES if version != "ipu1" else 1216)
        model = poplar.IPUModel(_VERSIONS[version], num_ipus=ipus, tiles_per_ipu=tiles)
        _LOG.debug("%s: %d IPUs x %d tiles (%s)", what, ipus, tiles, version)
        made_id = self._new_id() if device_id is None else device_id
        return DeviceInfo(model.create_target(), kind, made_id, conn)

    def createIpuModelDevice(self, opts: dict[str, Any] | None = None) -> DeviceInfo:
        """An IPU Model; options ``numIPUs``, ``tilesPerIPU``, ``ipuVersion`` (``ipu1``,
        ``ipu2``, ``ipu21``), ``compileIPUCode`` (values may be strings, as in PopART)."""
        return self._model(
            opts, DeviceType.IpuModel, "createIpuModelDevice", DeviceConnectionType.Always
        )

    def createSimDevice(self, opts: dict[str, Any] | None = None) -> DeviceInfo:
        """A simulator device: an IPU Model here."""
        return self._model(opts, DeviceType.Sim, "createSimDevice", DeviceConnectionType.Always)

    def createOfflineIPUDevice(self, opts: dict[str, Any] | None = None) -> DeviceInfo:
        """An offline device (compile only, cannot attach): an IPU Model here."""
        return self._model(
            opts, DeviceType.OfflineIpu, "createOfflineIPUDevice", DeviceConnectionType.Never
        )

    def acquireAvailableDevice(
        self,
        numIpus: int = 1,
        tilesPerIpu: int = 0,
        pattern: Any = SyncPattern.Full,
        connectionType: Any = DeviceConnectionType.Always,
        selectionCriterion: Any = None,
    ) -> DeviceInfo:
        """An IPU Model of ``numIpus`` IPUs (``tilesPerIpu`` 0: a whole Mk2 IPU)."""
        opts = {"numIPUs": numIpus, "tilesPerIPU": tilesPerIpu or _MK2_TILES}
        return self._model(
            opts, DeviceType.Ipu, "acquireAvailableDevice", _connection(connectionType)
        )

    tryAcquireAvailableDevice = acquireAvailableDevice

    def acquireDeviceById(
        self,
        id: int,
        pattern: Any = SyncPattern.Full,
        connectionType: Any = DeviceConnectionType.Always,
    ) -> DeviceInfo:
        """Device ``id`` (IPU Model devices are made on demand: a one-IPU Mk2 model)."""
        return self._model({}, DeviceType.Ipu, "acquireDeviceById", _connection(connectionType))

    tryAcquireDeviceById = acquireDeviceById

    def enumerateDevices(
        self,
        pattern: Any = SyncPattern.Full,
        numIpus: int = 1,
        deviceType: Any = DeviceType.Ipu,
        connectionType: Any = DeviceConnectionType.Always,
        tilesPerIPU: int = 0,
    ) -> list[DeviceInfo]:
        """The IPU devices of ``numIpus`` IPUs: with no hardware, those of a modelled
        IPU-POD16 of IPU Models (``SYSTEM_IPUS`` Mk2 IPUs, in devices of 1, 2, 4, 8 and 16
        IPUs numbered as on a POD: the single IPUs 0 to 15, then the pairs, ...), so that
        programs and tests that ask whether hardware is there find it and run on the IPU
        Model. Other device types, or a size the system does not divide into, give none.
        """
        n = int(numIpus)
        if DeviceType(deviceType) != DeviceType.Ipu or n < 1 or SYSTEM_IPUS % n or n & (n - 1):
            return []
        first = sum(SYSTEM_IPUS // (1 << k) for k in range(n.bit_length() - 1))
        opts = {"numIPUs": n, "tilesPerIPU": tilesPerIPU or _MK2_TILES}
        conn = _connection(connectionType)
        return [
            self._model(opts, DeviceType.Ipu, "enumerateDevices", conn, first + i)
            for i in range(SYSTEM_IPUS // n)
        ]

    def setOnDemandAttachTimeout(self, seconds: int) -> None:
        """Accepted for compatibility (attaching never waits)."""
