"""PopART's logging: ``popart.getLogger(name="all").setLevel("DEBUG")``.

Tremula's PopART logs through Python's :mod:`logging` under the ``popart`` logger, with one
child per PopART module (``popart.session``, ``popart.builder``, ...). It is silent until a
level is set through ``getLogger`` (or PopART's ``POPART_LOG_LEVEL`` variable, read when
the module loads), as PopART is by default.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["LOG", "Logger", "getLogger"]

#: PopART's level names -> Python logging levels
LEVELS = {
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}
MODULES = (
    "popart",
    "session",
    "ir",
    "devicex",
    "transform",
    "pattern",
    "builder",
    "op",
    "opx",
    "ces",
    "python",
)

LOG = logging.getLogger("popart")
LOG.addHandler(logging.NullHandler())
LOG.setLevel(LEVELS["OFF"])
LOG.propagate = False


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (so capture works)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("[popart:%(name)s] [%(levelname)s] %(message)s"))

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


_HANDLER = _Stderr()


class Logger:
    """PopART's ``Logger``: ``setLevel`` and the logging calls, for one module or ``all``."""

    def __init__(self, name: str = "all") -> None:
        if name != "all" and name not in MODULES:
            raise ValueError(f"popart.getLogger: unknown module {name!r}; known: all, {MODULES}")
        self.name = name
        self._log = LOG if name in ("all", "popart") else LOG.getChild(name)

    def setLevel(self, level: str) -> None:
        """Set the level: TRACE, DEBUG, INFO, WARN, ERR, CRITICAL or OFF."""
        key = str(level).upper()
        if key not in LEVELS:
            raise ValueError(f"Logger.setLevel: unknown level {level!r}; known: {list(LEVELS)}")
        targets = (
            [LOG, *(LOG.getChild(m) for m in MODULES[1:])] if self.name == "all" else [self._log]
        )
        for t in targets:
            t.setLevel(LEVELS[key])
        if _HANDLER not in LOG.handlers:
            LOG.addHandler(_HANDLER)

    def debug(self, message: str) -> None:
        self._log.debug(message)

    def info(self, message: str) -> None:
        self._log.info(message)

    def warn(self, message: str) -> None:
        self._log.warning(message)

    def error(self, message: str) -> None:
        self._log.error(message)

    def critical(self, message: str) -> None:
        self._log.critical(message)


def getLogger(name: str = "all") -> Logger:
    """The logger of a PopART module (``"all"``: every module)."""
    return Logger(name)


logging.addLevelName(LEVELS["TRACE"], "TRACE")


def _level_from_environment() -> None:
    """PopART reads ``POPART_LOG_LEVEL`` (a level name) when it loads: so does Tremula,
    as Poplar's ``POPLAR_ENGINE_OPTIONS`` is read (the SDK's documented switch).

    Raises:
        ValueError: an unknown level name (naming the variable).
    """
    value = os.environ.get("POPART_LOG_LEVEL")
    if value:
        if value.upper() not in LEVELS:
            raise ValueError(f"POPART_LOG_LEVEL={value!r}: known levels are {list(LEVELS)}")
        Logger("all").setLevel(value)


_level_from_environment()
