"""Targets and devices: the presets against the spec's table (profile-and-machine.md, 2.1),
derived values recomputed by hand, and the IPUModel / Device front ends."""

from __future__ import annotations

import dataclasses
import math
import re
from fractions import Fraction

import pytest

from tremula import poplar, target
from tremula.errors import TargetError

KIB = 1024
MIB = 1024 * KIB

# name: (tiles per IPU, bytes per tile, clock Hz, fp16 MACs/cycle/tile, fp32 MACs/cycle/tile)
SPEC_TABLE = {
    "ipu1": (1216, 256 * KIB, 1.6e9, 32, 8),
    "ipu2": (1472, 624 * KIB, 1.33e9, 64, 16),
    "bow": (1472, 624 * KIB, 1.85e9, 64, 16),
}
PRESET_FUNCTIONS = {"ipu1": target.ipu1, "ipu2": target.ipu2, "bow": target.bow}


@pytest.mark.parametrize("name", sorted(SPEC_TABLE))
def test_presets_follow_the_spec_table(name):
    tiles, bytes_per_tile, clock, fp16_macs, fp32_macs = SPEC_TABLE[name]
    for t in (PRESET_FUNCTIONS[name](), target.preset(name), target.preset(name.upper())):
        assert t.ipu_version == name
        assert t.tiles_per_ipu == tiles and t.num_ipus == 1 and t.num_tiles == tiles
        assert t.memory_bytes_per_tile == bytes_per_tile
        assert t.tile_clock_frequency == clock
        assert t.max_macs_per_cycle_per_tile(2) == fp16_macs
        assert t.max_macs_per_cycle_per_tile(2, 2) == fp16_macs
        assert t.max_macs_per_cycle_per_tile(4) == fp32_macs
        assert t.num_worker_contexts == 6
        assert t.vector_width(4) == 2 and t.vector_width(2) == 4
    assert target.preset("mk2") == target.ipu2()


@pytest.mark.parametrize(
    ("name", "ipu_bytes"), [("ipu1", 304 * MIB), ("ipu2", 897 * MIB), ("bow", 897 * MIB)]
)
def test_memory_per_ipu(name, ipu_bytes):
    t = target.preset(name, num_ipus=4)
    assert t.bytes_per_ipu == ipu_bytes
    assert t.num_tiles == 4 * t.tiles_per_ipu
    assert t.total_memory == 4 * ipu_bytes


@pytest.mark.parametrize(
    ("name", "itemsize", "peak"),
    [
        ("ipu1", 2, 124.5e12),
        ("ipu1", 4, 31.1e12),
        ("ipu2", 2, 250e12),
        ("ipu2", 4, 62.5e12),
        ("bow", 2, 350e12),
    ],
)
def test_peak_flops_within_one_percent_of_the_datasheets(name, itemsize, peak):
    t = target.preset(name)
    assert t.peak_flops(itemsize) == pytest.approx(peak, rel=0.01)
    assert target.preset(name, num_ipus=2).peak_flops(itemsize) == pytest.approx(2 * peak, rel=0.01)


def test_cpu_target():
    t = target.cpu()
    assert t.is_cpu and t.target_type == "CPU" and t.num_tiles == 1
    assert poplar.Device.create_cpu_device().target.num_tiles == 1


@pytest.mark.parametrize(
    ("clock", "ipus", "cycles"),
    [
        (1.33e9, 1, 50),  # 49.875
        (1.33e9, 2, 60),  # 59.85
        (1.33e9, 4, 80),  # 79.8
        (1.6e9, 1, 60),  # exactly 60
        (1.6e9, 4, 96),  # exactly 96
        (1.85e9, 2, 84),  # 83.25
        (1.85e9, 16, 278),  # 277.5
    ],
)
def test_global_sync_delay(clock, ipus, cycles):
    exact = Fraction(15, 10**9) * Fraction(clock) * (1 + Fraction(ipus, 4)) * 2
    assert math.ceil(exact) == cycles
    assert target.ipu2(tile_clock_frequency=clock, num_ipus=ipus).global_sync_delay == cycles
    assert target.ipu2(num_ipus=ipus, global_sync_cycles=7).global_sync_delay == 7


def test_with_overrides():
    t = target.ipu2()
    u = t.with_overrides(tiles_per_ipu=8, num_ipus=2)
    assert (u.tiles_per_ipu, u.num_ipus, u.num_tiles) == (8, 2, 16)
    assert t.tiles_per_ipu == 1472  # a frozen value: the original is unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.num_ipus = 2
    with pytest.raises(TargetError, match=r"unknown Target parameter\(s\) \['tiles', 'turbo'\]"):
        t.with_overrides(tiles=8, turbo=True)
    with pytest.raises(TargetError, match=r"unknown target preset 'ipu9'"):
        target.preset("ipu9")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_ipus", 0, "Target.num_ipus = 0: expected a positive integer"),
        ("tiles_per_ipu", 2.5, "Target.tiles_per_ipu = 2.5: expected a positive integer"),
        ("ipu_version", "ipu3", "Target.ipu_version = 'ipu3'"),
        ("tile_clock_frequency", 0.0, "Target.tile_clock_frequency = 0.0: expected > 0 Hz"),
        ("target_type", "GPU", "Target.target_type = 'GPU'"),
    ],
)
def test_invalid_targets(field, value, message):
    with pytest.raises(TargetError, match=re.escape(message)):
        target.ipu2(**{field: value})


def test_ipu_model():
    default = poplar.IPUModel().create_device().target
    assert default.ipu_version == "ipu2" and default.tiles_per_ipu == 1472
    assert default.target_type == "IPU_MODEL"
    m = poplar.IPUModel("ipu1", num_ipus=2, tiles_per_ipu=16)
    t = m.create_device().target
    assert (t.ipu_version, t.num_ipus, t.tiles_per_ipu, t.num_tiles) == ("ipu1", 2, 16, 32)
    assert t.memory_bytes_per_tile == 256 * KIB  # the rest from the ipu1 preset
    assert m.tiles_per_ipu == 16 and m.num_tiles == 32  # attributes read the target


def test_ipu_model_attribute_setting():
    m = poplar.IPUModel()
    m.tiles_per_ipu = 8
    m.exchange_bytes_per_cycle = 8
    t = m.create_device().target
    assert t.tiles_per_ipu == 8 and t.exchange_bytes_per_cycle == 8 and t.num_tiles == 8


def test_ipu_model_rejects_unknown_parameters():
    with pytest.raises(TargetError, match="IPUModel: unknown parameter 'tilesPerIPU'"):
        poplar.IPUModel(tilesPerIPU=4)
    m = poplar.IPUModel()
    with pytest.raises(TargetError, match="IPUModel: unknown parameter 'turbo'"):
        m.turbo = True
    with pytest.raises(TargetError, match=re.escape("Target.tiles_per_ipu = 0")):
        poplar.IPUModel(tiles_per_ipu=0)
    with pytest.raises(TargetError, match="unknown target preset 'ipu9'"):
        poplar.IPUModel("ipu9")


def test_device():
    d = poplar.IPUModel(tiles_per_ipu=4).create_device()
    assert d.attached and d.attach()
    d.detach()
    assert not d.attached
    assert "4 tiles" in repr(d)


# ---- bounds (issue 15) ----
@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"tiles_per_ipu": True}, r"tiles_per_ipu = True: expected a positive integer"),
        ({"num_ipus": False}, r"num_ipus = False: expected a positive integer"),
        ({"tiles_per_ipu": 10**9}, r"tiles_per_ipu = 1000000000: at most 65,536"),
        ({"tiles_per_ipu": target.MAX_TILES_PER_IPU + 1}, r"at most 65,536 \(a Mk2 IPU"),
        ({"num_ipus": 2048}, r"num_ipus = 2048: at most 1,024"),
        ({"num_ipus": 64, "tiles_per_ipu": 65536}, r"4,194,304 tiles; at most 1,048,576"),
    ],
)
def test_ipu_model_refuses_a_machine_too_big_or_not_a_count(params, match):
    with pytest.raises(TargetError, match=match):
        poplar.IPUModel(**params)


def test_the_largest_allowed_machine_is_accepted():
    t = poplar.IPUModel(tiles_per_ipu=target.MAX_TILES_PER_IPU).create_target()
    assert t.num_tiles == 65536
    assert poplar.IPUModel(num_ipus=16, tiles_per_ipu=65536).create_target().num_tiles == 2**20
