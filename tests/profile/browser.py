"""Headless Chromium for the report tests: Debian's ``chromium`` driven by Playwright (no
browser download). Missing pieces fail the tests with what to install; they never skip."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

#: Flags that let Chromium run headless as root in a container, offline and quiet.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail("the report tests need Debian's chromium: apt-get install chromium")
    return path


@contextmanager
def browser_context() -> Iterator[Any]:
    """A persistent Chromium context in a fresh profile directory."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=chromium_path(),
            args=FLAGS,
            headless=True,
            viewport={"width": 1400, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


class Page:
    """A report page opened in Chromium, with every JavaScript error collected."""

    def __init__(self, context: Any, path: Path) -> None:
        self.page = context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on(
            "console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None
        )
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_selector("body[data-ready]")

    def text(self, selector: str) -> str:
        return self.page.inner_text(selector)

    def number(self, selector: str) -> int:
        """The integer a cell shows (``"1,840 B"`` -> 1840)."""
        digits = re.sub(r"[^0-9-]", "", self.text(selector).split("(")[0])
        return int(digits)

    def show(self, view: str) -> None:
        self.page.click(f"#tab-{view}")
        self.page.wait_for_selector(f"#view-{view}.active")

    def click_canvas(self, selector: str, x: float, y: float) -> None:
        box = self.page.locator(selector).bounding_box()
        self.page.mouse.click(box["x"] + x, box["y"] + y)

    def close(self) -> None:
        self.page.close()
