"""``json.dumps(value, sort_keys=True, indent=2, allow_nan=False)``, byte for byte, at the
speed of the standard library's C encoder.

With ``indent`` set, :mod:`json` falls back to its pure-Python encoder, which writes a
1472-tile graph profile (tens of millions of numbers, one per line) several times slower
than the C encoder writes the same values compactly. Here the structure (dicts, and lists
holding containers) is walked in Python, and each list of scalars, the bulk of a profile,
is written in one call of the C encoder whose item separator is the newline and indent the
list's elements need. Anything this writer does not lay out itself (a dict with a key that
is not a string) is left to ``json.dumps``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

_CONTAINERS = (dict, list, tuple, np.ndarray)


class _Fallback(Exception):
    """The value holds something only ``json.dumps`` lays out as it does."""


def dumps_indented(value: Any, default: Callable[[Any], Any]) -> str:
    """``json.dumps(value, sort_keys=True, indent=2, allow_nan=False, default=default)``.

    Raises:
        TypeError, ValueError: As ``json.dumps`` does (a value JSON cannot represent).
    """
    scalar = json.JSONEncoder(allow_nan=False, default=default).encode
    leaves: dict[int, Callable[[Any], str]] = {}
    out: list[str] = []
    try:
        _write(value, 0, out, scalar, leaves, default)
    except _Fallback:
        return json.dumps(value, sort_keys=True, indent=2, allow_nan=False, default=default)
    return "".join(out)


def _write(
    value: Any,
    level: int,
    out: list[str],
    scalar: Callable[[Any], str],
    leaves: dict[int, Callable[[Any], str]],
    default: Callable[[Any], Any],
) -> None:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, dict):
        _write_dict(value, level, out, scalar, leaves, default)
    elif isinstance(value, list | tuple):
        _write_list(value, level, out, scalar, leaves, default)
    else:
        out.append(scalar(value))


def _write_dict(value: dict, level: int, out: list[str], *args: Any) -> None:
    if not value:
        out.append("{}")
        return
    if not all(isinstance(k, str) for k in value):
        raise _Fallback
    inner = "\n" + "  " * (level + 1)
    first = True
    for key in sorted(value):
        out.append(("{" if first else ",") + inner + json.encoder.encode_basestring_ascii(key))
        out.append(": ")
        _write(value[key], level + 1, out, *args)
        first = False
    out.append("\n" + "  " * level + "}")


def _write_list(
    value: list | tuple,
    level: int,
    out: list[str],
    scalar: Callable[[Any], str],
    leaves: dict[int, Callable[[Any], str]],
    default: Callable[[Any], Any],
) -> None:
    if not value:
        out.append("[]")
        return
    inner = "\n" + "  " * (level + 1)
    if not any(issubclass(t, _CONTAINERS) for t in set(map(type, value))):
        leaf = leaves.get(level)
        if leaf is None:  # the C encoder, its item separator ",\n" and the elements' indent
            separators = ("," + inner, ": ")
            encoder = json.JSONEncoder(allow_nan=False, default=default, separators=separators)
            leaf = leaves[level] = encoder.encode
        text = leaf(list(value))
        out.append("[" + inner + text[1:-1] + "\n" + "  " * level + "]")
        return
    for i, item in enumerate(value):
        out.append(("[" if i == 0 else ",") + inner)
        _write(item, level + 1, out, scalar, leaves, default)
    out.append("\n" + "  " * level + "]")
