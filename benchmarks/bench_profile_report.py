"""HTML profile report benchmark (issue: profile reports a person can look at).

For the repository's examples at 1472 tiles (the digits MLP of ``tremula train``, the
PopSparse RigL MLP of ``examples/popsparse/rigl_digits.py`` and the char-GRU host-embedding
model of ``examples/host_embedding/char_gru.py``, 2 replicas of 1472 tiles; one training
step each), writes the profile and its ``report.html`` and measures, in the same run:

* the page's size against ``graph.json``'s (target: the page under 5 MB);
* the time to write the page against ``json.load`` of the profile it is built from;
* the page's load time in headless Chromium (navigation until its views are drawn, best of
  3; target: under 2 s) against a reference page that holds the raw ``graph.json`` and only
  parses it (the least a browser view of the profile must do).

Run: ``python benchmarks/bench_profile_report.py`` (needs scikit-learn, Playwright's Python
package and Debian's ``chromium``).
"""

from __future__ import annotations

import itertools
import json
import os
import runpy
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from tremula import digits
from tremula.profile.report import write_html

ROOT = Path(__file__).resolve().parents[1]
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
REFERENCE = """<!doctype html><html><body><script id="d" type="application/json">{data}</script>
<script>JSON.parse(document.getElementById("d").textContent);
document.body.dataset.ready = "1";</script></body></html>"""


def mlp(directory: Path) -> None:
    trainer = digits.build_training(32, 0.05)
    x, y, _, _ = digits.load_digits()
    with trainer.session as session:
        session.run({trainer.x: x[:32], trainer.labels: y[:32]})
    trainer.session.engine.write_report(str(directory))


def popsparse(directory: Path) -> None:
    rigl = runpy.run_path(str(ROOT / "examples" / "popsparse" / "rigl_digits.py"), run_name="x")
    rng = np.random.default_rng(0)
    layers = [rigl["Layer"](a, b, rigl["BATCH"]) for a, b in itertools.pairwise(rigl["SIZES"])]
    trainer = rigl["Trainer"](layers, [rigl["initial_pattern"](la, rng) for la in layers])
    x, y, _, _ = digits.load_digits()
    with trainer.session:
        trainer.step(x[:32], y[:32])
    trainer.session.engine.write_report(str(directory))


def char_gru(directory: Path) -> None:
    path = ROOT / "examples" / "host_embedding" / "char_gru.py"
    example = runpy.run_path(str(path), run_name="x")
    _, _, trainer = example["train"](example["Config"](steps=1, iterations=1), log=False)
    trainer.session.engine.write_report(str(directory))


def load_seconds(context, path: Path, rounds: int = 3) -> float:
    """Best wall time from navigation to ``body[data-ready]``."""
    best = float("inf")
    for _ in range(rounds):
        page = context.new_page()
        start = time.perf_counter()
        page.goto(path.resolve().as_uri())
        page.wait_for_selector("body[data-ready]", state="attached", timeout=60_000)
        best = min(best, time.perf_counter() - start)
        page.close()
    return best


def main() -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    work = Path(tempfile.mkdtemp())
    rows = []
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(work / "profile"), executable_path=chromium, args=FLAGS, headless=True
        )
        for name, build in (("MLP", mlp), ("PopSparse", popsparse), ("char-GRU", char_gru)):
            directory = work / name
            build(directory)
            start = time.perf_counter()
            graph = json.loads((directory / "graph.json").read_text())
            json.loads((directory / "execution.json").read_text())
            t_json = time.perf_counter() - start
            start = time.perf_counter()
            page = write_html(directory)
            t_write = time.perf_counter() - start
            reference = directory / "reference.html"
            reference.write_text(REFERENCE.format(data=(directory / "graph.json").read_text()))
            t_page = load_seconds(context, page.path)
            t_ref = load_seconds(context, reference)
            rows.append((name, graph["target"]["numTiles"], page.size,
                         (directory / "graph.json").stat().st_size, t_write, t_json,
                         t_page, t_ref))  # fmt: skip
        context.close()
    print(f"{'example':10} {'tiles':>5} {'page MB':>8} {'graph.json MB':>13} {'ratio':>6} "
          f"{'write s':>8} {'json.load s':>11} {'ratio':>6} {'load s':>7} {'raw JSON s':>10} "
          f"{'ratio':>6}")  # fmt: skip
    for name, tiles, size, raw, t_write, t_json, t_page, t_ref in rows:
        print(f"{name:10} {tiles:5d} {size / 1e6:8.3f} {raw / 1e6:13.2f} {size / raw:6.3f} "
              f"{t_write:8.3f} {t_json:11.3f} {t_write / t_json:6.2f} {t_page:7.3f} "
              f"{t_ref:10.3f} {t_page / t_ref:6.2f}")  # fmt: skip
    print(f"targets: page under 5 MB, load under 2 s; load average {os.getloadavg()[0]:.1f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
