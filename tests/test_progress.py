"""Progress bars: tqdm on a terminal, nothing otherwise or without tqdm, an option to turn
them off; compiling a PopXL Session and the training loop show them."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator

import pytest

import popxl
import popxl.ops as ops
from tremula import progress


class Terminal(io.StringIO):
    """A standard error that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch) -> Iterator[Callable[[], Terminal]]:
    """Puts a terminal on standard error when called. (Called in the test's body: pytest's
    capture sets ``sys.stderr`` again between a fixture and the test.)"""

    def install() -> Terminal:
        term = Terminal()
        monkeypatch.setattr(sys, "stderr", term)
        return term

    progress.set_progress_bars(None)
    yield install
    progress.set_progress_bars(None)


def test_no_bar_when_stderr_is_not_a_terminal(monkeypatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert isinstance(progress.bar(10, "work"), progress.NullBar)


def test_a_bar_on_a_terminal(terminal: Callable[[], Terminal]) -> None:
    term = terminal()
    assert list(progress.track(range(5), "counting")) == [0, 1, 2, 3, 4]
    text = term.getvalue()
    assert "counting:   0%" in text and "0/5" in text


def test_turned_off_for_the_process_or_the_call(terminal: Callable[[], Terminal]) -> None:
    term = terminal()
    assert isinstance(progress.bar(3, "x", enabled=False), progress.NullBar)
    progress.set_progress_bars(False)
    assert isinstance(progress.bar(3, "x"), progress.NullBar)
    assert list(progress.track([1, 2], "quiet")) == [1, 2]
    assert term.getvalue() == ""


def test_nothing_without_tqdm(terminal: Callable[[], Terminal], monkeypatch) -> None:
    term = terminal()
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm fails
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    bar = progress.bar(3, "x", enabled=True)
    assert isinstance(bar, progress.NullBar)
    bar.update(2)
    bar.set_description("y")
    assert bar.n == 2 and term.getvalue() == ""


def _ir() -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable([[1.0, 2.0]], name="x")
        ops.host_store(popxl.d2h_stream((1, 2), popxl.float32, name="y"), ops.relu(x) + 1.0)
    return ir


def test_session_compile_shows_progress(terminal: Callable[[], Terminal]) -> None:
    term = terminal()
    popxl.Session(_ir(), "ipu_model")
    text = term.getvalue()
    assert "compiling" in text and "memory layout" in text


def test_session_progress_off(terminal: Callable[[], Terminal]) -> None:
    term = terminal()
    popxl.Session(_ir(), "ipu_model", progress=False)
    assert term.getvalue() == ""


# ---- on-device loops: a bar advancing per iteration of an outermost Repeat ----


@pytest.fixture
def every_update(monkeypatch) -> None:
    """tqdm draws every update (by default at most ten a second)."""
    from functools import partial

    from tqdm.auto import tqdm

    monkeypatch.setattr(progress, "_tqdm", lambda: partial(tqdm, mininterval=0, miniters=1))


def _repeat_ir(outer: int, inner: int = 1) -> popxl.Ir:
    """``x + 1`` repeated ``inner`` times inside a loop of ``outer`` iterations."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable([0.0, 0.0], name="x")
        step = ir.create_graph(lambda t: t + 1.0, x)
        if inner > 1:
            step = ir.create_graph(lambda t: ops.repeat(step, inner, t)[0], x)
        (y,) = ops.repeat(step, outer, x)
        ops.host_store(popxl.d2h_stream((2,), popxl.float32, name="y"), y)
    return ir


def _shown(text: str, total: int) -> list[int]:
    """The iteration counts the bars of ``total`` iterations drew, in order."""
    import re

    return [int(k) for k in re.findall(rf"running: *\d*%\|[^|]*\| (\d+)/{total} ", text)]


@pytest.mark.parametrize("device", ["ipu_model", "cpu"])
def test_a_loop_advances_per_iteration(
    terminal: Callable[[], Terminal], every_update: None, device: str
) -> None:
    session = popxl.Session(_repeat_ir(7), device, progress=True)
    term = terminal()
    with session:
        first = session.run()  # the interpreter
        second = session.run()  # the replayed (flattened) program
    assert [v.tolist() for v in first.values()] == [[7.0, 7.0]]
    assert [v.tolist() for v in second.values()] == [[7.0, 7.0]]
    assert _shown(term.getvalue(), 7) == list(range(8)) * 2


def test_only_the_outermost_loop_shows(
    terminal: Callable[[], Terminal], every_update: None
) -> None:
    session = popxl.Session(_repeat_ir(3, inner=5), "ipu_model", progress=True)
    term = terminal()
    with session:
        out = session.run()
    assert [v.tolist() for v in out.values()] == [[15.0, 15.0]]
    text = term.getvalue()
    assert _shown(text, 3) == [0, 1, 2, 3] and "/5 " not in text


@pytest.mark.parametrize("setting", ["not a terminal", "session", "process"])
def test_loop_bars_off(
    terminal: Callable[[], Terminal], every_update: None, monkeypatch, setting: str
) -> None:
    choice = False if setting == "session" else None
    session = popxl.Session(_repeat_ir(4), "ipu_model", progress=choice)
    term = terminal()
    if setting == "not a terminal":
        monkeypatch.setattr(Terminal, "isatty", lambda self: False)
    if setting == "process":
        progress.set_progress_bars(False)
    with session:
        out = session.run()
    assert [v.tolist() for v in out.values()] == [[4.0, 4.0]]
    assert term.getvalue() == ""
    assert session._engine.runtime.loop_progress is None  # the loop ran unhooked
