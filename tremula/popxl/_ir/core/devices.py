"""PopART's ``DeviceInfo``: a device PopART sessions and PopXL's ``Session`` run on (an IPU
Model, or Poplar's CPU target; there is no hardware). ``popart.DeviceManager`` makes them;
PopXL's ``Session`` makes one for a ``device_desc`` string (``session.device``).

Imported when a device is made, not by ``import popxl`` (it needs the Poplar layer).
"""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.errors import PopartException
from tremula.popxl._ir.core.enums import DeviceConnectionType, DeviceType

__all__ = ["DeviceInfo"]


class DeviceInfo(poplar.Device):
    """A device PopART sessions (and PopXL's ``Session``) run on."""

    def __init__(
        self,
        target: Any,
        device_type: Any,
        device_id: int,
        connection: Any = DeviceConnectionType.Always,
    ) -> None:
        super().__init__(target)
        self._type = DeviceType(device_type)
        self._id = int(device_id)
        self._connection = DeviceConnectionType(connection)
        self.attached = connection != DeviceConnectionType.Never

    @property
    def type(self) -> Any:
        return self._type

    @property
    def connectionType(self) -> Any:
        return self._connection

    @property
    def id(self) -> int:
        return self._id

    @property
    def numIpus(self) -> int:
        return self.target.num_ipus

    @property
    def tilesPerIPU(self) -> int:
        return self.target.tiles_per_ipu

    @property
    def numWorkerContexts(self) -> int:
        return 6

    @property
    def version(self) -> str:
        return self.target.ipu_version

    @property
    def driverIds(self) -> list[int]:
        return list(range(self.numIpus))

    @property
    def isAttached(self) -> bool:
        return self.attached

    def attach(self) -> bool:
        if self._connection == DeviceConnectionType.Never:
            raise PopartException(
                f"DeviceInfo {self._id}: an offline device (connection type Never) cannot attach"
            )
        return super().attach()

    def tryAttachUntilTimeout(self) -> bool:
        return self.attach()

    def __enter__(self) -> DeviceInfo:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.detach()

    def __repr__(self) -> str:
        return (
            f"Device Type:{self._type.name} Connection Type:{self._connection.name} "
            f"Id:{self._id} Version:{self.version} NumIPUs:{self.numIpus} "
            f"NumTilesPerIPU:{self.tilesPerIPU}"
        )
