"""The table sizes of a graph profile, read leniently for the validator's shape checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tremula.profile._checker import Dim, is_int

#: How the size of each indexed table is measured, for messages.
_SIZE_SOURCES: dict[str, tuple[str, str]] = {
    "computeSets": ("computeSets", "names"),
    "vertexTypes": ("vertexTypes", "names"),
    "exchanges": ("exchanges", "bytesReceivedByTile"),
    "externalExchanges": ("externalExchanges", "bytesReceivedByTile"),
    "hostExchanges": ("hostExchanges", "bytesReceivedByTile"),
}


@dataclass(frozen=True)
class Dims:
    """Sizes read from a graph profile; None where the profile does not give a usable one."""

    num_tiles: int | None = None
    tiles_per_ipu: int | None = None
    target_type: str | None = None
    sizes: dict[str, int | None] = field(default_factory=dict)
    programs: Sequence[Any] = ()

    def tiles(self) -> Dim:
        """The per-tile dimension."""
        return (self.num_tiles, "numTiles")

    def of(self, table: str) -> Dim:
        """The dimension of one entry per row of ``table`` (``computeSets``, ``programs``...)."""
        section, key = _SIZE_SOURCES.get(table, (table, ""))
        what = f"len({section}.{key})" if key else f"len({section})"
        return (self.sizes.get(table), what)


def _length(value: Any) -> int | None:
    return len(value) if isinstance(value, list | tuple) else None


def dims_of(graph: Any) -> Dims:
    """Read the table sizes of a graph profile, tolerating missing or malformed fields."""
    if not isinstance(graph, Mapping):
        return Dims()
    target = graph.get("target")
    target = target if isinstance(target, Mapping) else {}

    def positive(key: str) -> int | None:
        value = target.get(key)
        return int(value) if is_int(value) and value > 0 else None

    sizes: dict[str, int | None] = {}
    for table, (section, key) in _SIZE_SOURCES.items():
        part = graph.get(section)
        sizes[table] = _length(part.get(key)) if isinstance(part, Mapping) else None
    for table in ("programs", "functionPrograms"):
        sizes[table] = _length(graph.get(table))
    programs = graph.get("programs")
    return Dims(
        num_tiles=positive("numTiles"),
        tiles_per_ipu=positive("tilesPerIPU"),
        target_type=target.get("type") if isinstance(target.get("type"), str) else None,
        sizes=sizes,
        programs=programs if isinstance(programs, list | tuple) else (),
    )
