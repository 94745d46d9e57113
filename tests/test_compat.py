"""``tremula._compat``: the names of newer Pythons behave as the standard library's do."""

from __future__ import annotations

import enum

from tremula._compat import StrEnum


class Colour(StrEnum):
    RED = "red"
    DARK_BLUE = enum.auto()


def test_strenum_members_are_their_values_as_strings() -> None:
    assert isinstance(Colour.RED, str)
    assert Colour.RED == "red"
    assert str(Colour.RED) == "red"
    assert f"{Colour.RED}|{Colour.RED:>5}" == "red|  red"
    assert Colour("red") is Colour.RED
    assert Colour.DARK_BLUE.value == "dark_blue"  # auto() lower-cases the member's name
    assert [m.value for m in Colour] == ["red", "dark_blue"]
