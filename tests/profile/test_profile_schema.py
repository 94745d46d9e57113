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
