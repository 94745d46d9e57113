"""Devices: an IPU Model of chosen parameters, or the CPU target."""

from __future__ import annotations

import json
import os
from dataclasses import fields
from typing import Any

from tremula import target as targets
from tremula.errors import TargetError
from tremula.target import Target


class IPUModel:
    """Poplar's ``IPUModel``: choose a version, override any parameter, create a device.

    ``IPUModel()`` is a Mk2 (ipu2) with 1 IPU of 1472 tiles. Parameters are the fields of
    :class:`tremula.target.Target` (``tiles_per_ipu``, ``num_ipus``,
    ``memory_bytes_per_tile``, ``tile_clock_frequency``, ``exchange_bytes_per_cycle`` ...),
    given as keyword arguments or set as attributes before ``create_device``.
    """

    def __init__(self, version: str = "ipu2", **params: Any) -> None:
        object.__setattr__(self, "_version", version)
        object.__setattr__(self, "_params", {})
        names = {f.name for f in fields(Target)}
        for key, value in params.items():
            if key not in names:
                raise TargetError(f"IPUModel: unknown parameter {key!r}; known: {sorted(names)}")
            self._params[key] = value
        self.create_target()  # validate now

    def __setattr__(self, key: str, value: Any) -> None:
        names = {f.name for f in fields(Target)}
        if key not in names:
            raise TargetError(f"IPUModel: unknown parameter {key!r}; known: {sorted(names)}")
        self._params[key] = value

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        return getattr(self.create_target(), key)

    def create_target(self) -> Target:
        params = {**_target_options(), **self._params}
        return targets.preset(self._version, target_type="IPU_MODEL", **params)

    def create_device(self) -> Device:
        return Device(self.create_target())


def _target_options() -> dict[str, Any]:
    """Poplar's ``POPLAR_TARGET_OPTIONS`` (a JSON object): ``ipuLinkDomainSize``, the IPUs
    of one IPU-Link domain (copies between domains go over the GW-Links)."""
    text = os.environ.get("POPLAR_TARGET_OPTIONS")
    if not text:
        return {}
    try:
        options = json.loads(text)
    except json.JSONDecodeError as err:
        raise TargetError(f"POPLAR_TARGET_OPTIONS is not valid JSON: {err}") from None
    if not isinstance(options, dict):
        raise TargetError("POPLAR_TARGET_OPTIONS must hold a JSON object")
    size = options.get("ipuLinkDomainSize")
    if size is None:
        return {}
    if not str(size).isdigit() or int(size) < 1:
        raise TargetError(f"POPLAR_TARGET_OPTIONS: ipuLinkDomainSize {size!r} must be >= 1")
    return {"ipu_link_domain_size": int(size)}


class Device:
    """A device a program is loaded on; ``device.target`` describes it."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.attached = True

    @staticmethod
    def create_cpu_device() -> Device:
        """Poplar's CPU device: one tile, no replication, no cycle fidelity."""
        return Device(targets.cpu())

    def attach(self) -> bool:
        self.attached = True
        return True

    def detach(self) -> None:
        self.attached = False

    def __repr__(self) -> str:
        return f"Device({self.target.describe()})"
