"""Progress bars for long work (compiling a large graph, training loops), as users of PyTorch
and Keras expect: a ``tqdm`` bar on a terminal, nothing otherwise.

A bar is shown only when all of these hold: ``tqdm`` is installed (the ``progress`` extra;
NumPy stays the only required dependency), standard error is a terminal, and progress bars
are not turned off, by the call (``enabled=False``) or for the process
(:func:`set_progress_bars`). Otherwise :func:`bar` returns a bar that does nothing, so
callers never test for it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_DEFAULT: list[bool | None] = [None]  # None: on when standard error is a terminal


def set_progress_bars(enabled: bool | None) -> None:
    """Turn progress bars on or off for the process.

    Args:
        enabled: True or False to force them on (still only with ``tqdm``) or off; None
            for the default, on when standard error is a terminal.
    """
    _DEFAULT[0] = enabled


def progress_bars_enabled(enabled: bool | None = None) -> bool:
    """Whether a bar would be shown, for a call's ``enabled`` argument."""
    choice = _DEFAULT[0] if enabled is None else enabled
    if choice is None:
        isatty = getattr(sys.stderr, "isatty", None)
        choice = bool(isatty and isatty())
    return choice and _tqdm() is not None


class NullBar:
    """A bar that shows nothing, with the part of ``tqdm``'s interface Tremula uses."""

    n = 0

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units (nothing is shown)."""
        self.n += n

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        """Nothing to describe."""

    def close(self) -> None:
        """Nothing to close."""

    def __enter__(self) -> NullBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def bar(total: int | None, desc: str, unit: str = "it", enabled: bool | None = None) -> Any:
    """A progress bar of ``total`` units, or a :class:`NullBar`.

    Args:
        total: The number of units, or None if unknown.
        desc: What is in progress (``"compiling"``).
        unit: The unit's name.
        enabled: None for the process default, or True / False for this bar.

    Returns:
        A ``tqdm`` bar (closed when used as a context manager and left) or a NullBar.
    """
    if not progress_bars_enabled(enabled):
        return NullBar()
    return _tqdm()(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr)


def track(
    items: Iterable[T], desc: str, total: int | None = None, enabled: bool | None = None
) -> Iterator[T]:
    """Iterate over ``items`` with a progress bar (see :func:`bar`)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with bar(total, desc, enabled=enabled) as progress:
        for item in items:
            yield item
            progress.update(1)


def _tqdm() -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm
