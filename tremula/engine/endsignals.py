"""autoReport's last write when a signal ends the process: SIGTERM and SIGHUP.

autoReport writes ``execution.json`` once, at the end (``tremula/engine/profiles.py``): an
engine that closes, is collected, or lives until the interpreter exits. SIGINT reaches that
end (Python raises ``KeyboardInterrupt``); SIGTERM (what ``timeout``, job schedulers and
container stops send) and SIGHUP (a closed terminal) end the process at once by default, and
the profile of the run was lost. While an engine has a profile to write, this module handles
both signals: it writes every such engine's pending execution profile, then hands the signal
to the handler the program had, so the program behaves as before: its own handler runs, or,
with the default action, the process ends by the same signal (and its usual exit status).
A signal the program ignores stays ignored, and a handler the program installs later
replaces this one (the program then decides how it ends).

A signal that arrives while a program runs is handled when that run ends (the timeline is
consistent only between runs): the written profile then holds that run too.

Handlers can only be set from the main thread: an engine made in another thread installs
them when one is next made in the main thread.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import weakref
from types import FrameType
from typing import Any, Protocol


class _Flushable(Protocol):
    def flush(self) -> None: ...


#: the signals whose default action ends the process without Python's exit
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))

_pending: weakref.WeakSet[Any] = weakref.WeakSet()
#: the handler each signal had before this module's, by signal
_previous: dict[int, Any] = {}


class _Runs:
    """Runs in progress (nested in this process) and a signal that waits for them."""

    depth = 0
    deferred: int | None = None


_RUNS = _Runs()


def run_started() -> None:
    """A program run begins (``Profiles.run``): a signal now waits for its end."""
    _RUNS.depth += 1


def run_ended() -> None:
    """A program run ended: handle the signal that arrived during it, if any."""
    _RUNS.depth -= 1
    if _RUNS.depth == 0 and _RUNS.deferred is not None:
        sig, _RUNS.deferred = _RUNS.deferred, None
        _deliver(sig, None)


def flush_reporting(profiles: _Flushable) -> None:
    """autoReport's last write, reported (not raised) on failure: at exit, collection or a
    signal there is no caller to raise to."""
    try:
        profiles.flush()
    except Exception as exc:
        print(f"Tremula: autoReport could not write the execution profile: {exc}", file=sys.stderr)


def watch(profiles: _Flushable) -> None:
    """Write ``profiles``' pending execution profile (``flush``) if SIGTERM or SIGHUP ends
    the process (kept weakly: a collected engine has written already)."""
    _pending.add(profiles)
    _install()


def _install() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        current = signal.getsignal(sig)
        if current is _on_signal or current in (signal.SIG_IGN, None):
            continue  # installed already; ignored by the program; set outside Python
        _previous[sig] = current
        signal.signal(sig, _on_signal)


def _on_signal(sig: int, frame: FrameType | None) -> None:
    if _RUNS.depth and threading.current_thread() is threading.main_thread():
        if _RUNS.deferred is None:
            _RUNS.deferred = sig
        return
    _deliver(sig, frame)


def _deliver(sig: int, frame: FrameType | None) -> None:
    for profiles in list(_pending):
        flush_reporting(profiles)
    previous = _previous.get(sig, signal.SIG_DFL)
    if callable(previous):
        previous(sig, frame)
        return
    # the default action: end the process by this signal, as it would have ended
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
