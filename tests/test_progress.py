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
