"""Names of newer Pythons, for the oldest Python Tremula supports (3.10).

Import them from here, never from the standard library directly, so that the package runs
unchanged on 3.10: ``from tremula._compat import StrEnum``.
"""

from __future__ import annotations

import enum
import sys

__all__ = ["StrEnum"]

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, enum.Enum):
        """Python 3.11's ``enum.StrEnum``: members are strings, and ``str()`` and
        ``format()`` give the value (not ``ClassName.MEMBER``)."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, format_spec: str) -> str:
            return str.__format__(str(self.value), format_spec)

        @staticmethod
        def _generate_next_value_(
            name: str, start: int, count: int, last_values: list[object]
        ) -> str:
            return name.lower()
