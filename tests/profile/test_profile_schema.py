"""``schema.py`` restates FORMAT.md: its tables must agree with the document."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tremula.profile
from tremula.profile import schema

FORMAT = (Path(tremula.profile.__file__).parent / "FORMAT.md").read_text()


def _between(start: str, end: str) -> str:
    return FORMAT.split(start, 1)[1].split(end, 1)[0]


def _table(text: str) -> dict[str, tuple[str, ...]]:
    """Rows ``| `A`, `B` | `field`, ... |`` -> {A: fields, B: fields}; fields are lower-case."""
    rows: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) < 4 or "`" not in cells[1]:
            continue
        fields = tuple(f for f in re.findall(r"`(\w+)`", cells[2]) if f[0].islower())
        for name in re.findall(r"`(\w+)`", cells[1]):
            rows[name] = fields
    return rows


def test_program_types() -> None:
    table = _table(_between("Program types and their fields:", "Categories of"))
    assert table == schema.PROGRAM_FIELDS


def test_step_types() -> None:
    assert _table(_between("| step type |", "Invariants:")) == schema.STEP_FIELDS


def test_memory_categories() -> None:
    text = _between("(all always present):", "Memory invariants")
    assert tuple(name.strip(" .\n") for name in text.split(",")) == schema.MEMORY_CATEGORIES


@pytest.mark.parametrize(
    ("block", "keys"),
    [
        ('"byTile": {', schema.BY_TILE_KEYS),
        ('"byComputeSet": {', schema.VERTEX_MEMORY_KEYS),
        ('"tileCycles": {', schema.TILE_CYCLES_KEYS),
        ('"exchanges":         {', schema.EXCHANGE_KEYS),
        ('"externalExchanges": {', schema.EXTERNAL_EXCHANGE_KEYS),
    ],
)
def test_key_lists(block: str, keys: tuple[str, ...]) -> None:
    text = FORMAT.split(block, 1)[1].split("}", 1)[0]
    assert tuple(re.findall(r'"(\w+)"', text)) == keys


def test_profiler_modes() -> None:
    text = _between('"profilerMode":', "# mode-specific")
    assert tuple(re.findall(r'"(\w+)"', text)) == schema.PROFILER_MODES


def test_memory_by_instruction() -> None:
    text = _between("`memoryByInstruction` {", "}")
    assert tuple(k.strip() for k in text.split(",")) == schema.MEMORY_BY_INSTRUCTION_KEYS


# ---- StepRecord: the one place an execution-profile step is serialised ----

_EXAMPLE_FIELDS = {
    "OnTileExecute": {"compute_set": 3, "thread_balance": 0.5},
    "DoExchange": {"exchange": 1, "total_data": 64, "data_balance": 0.25},
    "GlobalExchange": {"external_exchange": 0, "total_data": 8, "data_balance": 1.0},
    "StreamCopy": {"host_exchange": 2, "total_data": 16, "data_balance": 0.5},
    "CopySharedStructure": {"total_data": 4, "data_balance": 1.0},
    "Sync": {"sync_type": "Internal"},
}


@pytest.mark.parametrize("stype", schema.STEP_TYPES)
def test_a_step_record_writes_exactly_the_fields_of_its_type_in_order(stype: str) -> None:
    static = {} if stype == "Sync" else {"tile_balance": 0.5, "active_tiles": 2}
    if stype != "Sync":
        static["active_tile_balance"] = 0.75
    record = schema.StepRecord(stype, 4, "cs", **static, **_EXAMPLE_FIELDS[stype])
    got = record.to_json(10, 25, 3, 0.9, 16)
    want = ("type", "program", "name", "cycles", "cyclesFrom", "cyclesTo")
    if stype == "Sync":
        want += ("syncType", "tileBalance", "activeTiles", "activeTileBalance")
    else:
        want += ("tileBalance", "activeTiles", "activeTileBalance", *schema.STEP_FIELDS[stype])
    assert tuple(got) == want
    assert (got["cycles"], got["cyclesFrom"], got["cyclesTo"]) == (15, 10, 25)
    if "cyclesOverlapped" in got:
        assert got["cyclesOverlapped"] == 3
    if stype == "Sync":
        assert got["activeTiles"] == 16 and got["tileBalance"] == 0.9


def test_a_step_record_refuses_a_field_its_type_does_not_have() -> None:
    with pytest.raises(ValueError, match="a Sync step has no field 'computeSet'"):
        schema.StepRecord("Sync", 0, compute_set=1)
    with pytest.raises(ValueError, match="step type 'Compute' is not one of"):
        schema.StepRecord("Compute", 0)
