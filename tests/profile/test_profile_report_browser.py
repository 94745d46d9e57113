"""The report page in headless Chromium: every view renders without a JavaScript error, the
numbers shown are the profile's, a tile's bytes after clicking it, the timeline zooms, and
the repository's examples (MLP, PopSparse at 1472 tiles) render in full."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tremula.profile import write_profile
from tremula.profile.report import write_html

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parents[1]
VIEWS = ("summary", "memory", "liveness", "programs", "trace", "operations", "compare")


def _module(name: str, path: Path) -> ModuleType:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


browser = _module("tremula_tests_profile_browser", _HERE / "browser.py")


@pytest.fixture(scope="module")
def context() -> Iterator[Any]:
    with browser.browser_context() as ctx:
        yield ctx


@pytest.fixture
def golden_dir(tmp_path: Path, graph: dict, execution: dict) -> Path:
    write_profile(tmp_path / "golden", graph, execution)
    return tmp_path / "golden"


def _open(context: Any, page_path: Path) -> Any:
    return browser.Page(context, page_path)


def _render_all(page: Any, views: tuple[str, ...] = VIEWS) -> None:
    for view in views:
        if page.page.is_disabled(f"#tab-{view}"):
            continue
        page.show(view)
    assert page.errors == []
    assert page.page.get_attribute("body", "data-errors") is None


def test_golden_page_numbers(context: Any, golden_dir: Path, tmp_path: Path) -> None:
    page = _open(context, write_html(golden_dir, tmp_path / "g.html").path)
    assert page.number("#summary-cycles") == 400
    assert page.number("#summary-memory") == 1840
    assert page.number("#summary-peak-nal") == 96
    assert page.number("#summary-always-live") == 1448
    assert page.page.is_hidden("#warnings")
    assert page.page.is_disabled("#tab-compare")  # no --compare
    _render_all(page)
    page.close()


def test_clicking_a_tile_shows_its_bytes(context: Any, golden_dir: Path, tmp_path: Path) -> None:
    page = _open(context, write_html(golden_dir, tmp_path / "g.html").path)
    page.show("memory")
    bar_x = page.page.evaluate("window.tremulaReport.memoryBars.xOf(2)")
    page.click_canvas("#memory-bars", bar_x, 200)  # the bar chart, tile 2
    assert page.page.get_attribute("#tile-breakdown", "data-tile") == "2"
    x, y = page.page.evaluate("window.tremulaReport.memoryMap.center(1)")
    page.click_canvas("#tile-map", x, y)  # the tile map, tile 1
    assert page.page.get_attribute("#tile-breakdown", "data-tile") == "1"
    assert page.number("#tile-total-gaps") == 576
    assert page.number("#tile-total") == 488
    breakdown = page.text("#tile-breakdown")
    assert "Vertex Code" in breakdown and "Adder" in breakdown  # categories, vertex types
    page.page.fill("#tile-input", "3")
    page.page.click("#tile-show")
    assert page.number("#tile-total-gaps") == 352
    assert "Adder" not in page.text("#tile-breakdown")  # Adder has no vertex on tile 3
    assert page.errors == []
    page.close()


def test_two_ipus(context: Any, graph: dict, execution: dict, tmp_path: Path) -> None:
    graph["target"].update(numIPUs=2, tilesPerIPU=2)  # tiles 0, 1 on IPU 0; 2, 3 on IPU 1
    graph["target"]["relativeSyncDelayByTile"] = graph["target"]["relativeSyncDelayByTile"][:2]
    graph["target"]["bytesPerIPU"] = graph["target"]["bytesPerTile"] * 2
    write_profile(tmp_path / "two", graph, execution)
    written = write_html(tmp_path / "two", tmp_path / "two.html")
    assert written.warnings == []
    page = _open(context, written.path)
    page.show("memory")
    x, y = page.page.evaluate("window.tremulaReport.memoryMap.center(3)")
    assert x > page.page.evaluate("window.tremulaReport.memoryMap.center(1)")[0]  # IPU 1
    page.click_canvas("#tile-map", x, y)
    assert page.number("#tile-total-gaps") == 352
    page.show("trace")
    # "add" (compute set 1, tiles 0 and 1) is drawn on IPU 0 only: IPU 1's lane is empty there
    x = page.page.evaluate("window.tremulaReport.trace.xOf(300)")
    y1 = page.page.evaluate("window.tremulaReport.trace.rowOf(1, 'Compute')") + 9
    page.click_canvas("#trace-canvas", x, y1)
    assert "Click a step" in page.text("#step-detail")
    y0 = page.page.evaluate("window.tremulaReport.trace.rowOf(0, 'Compute')") + 9
    page.click_canvas("#trace-canvas", x, y0)
    assert "add" in page.text("#step-detail h2")
    assert page.errors == []
    page.close()


def test_timeline_zooms_and_shows_a_step(context: Any, golden_dir: Path, tmp_path: Path) -> None:
    page = _open(context, write_html(golden_dir, tmp_path / "g.html").path)
    page.show("trace")

    def span() -> float:
        r = page.page.locator("#trace-range")
        return float(r.get_attribute("data-end")) - float(r.get_attribute("data-start"))

    assert span() == 400
    page.page.click("#trace-zoom-in")
    assert span() == 200
    box = page.page.locator("#trace-canvas").bounding_box()
    page.page.mouse.move(box["x"] + 300, box["y"] + 30)
    page.page.mouse.wheel(0, -100)
    page.page.wait_for_function(
        "(r => Number(r.dataset.end) - Number(r.dataset.start))"
        "(document.querySelector('#trace-range')) < 200"
    )
    page.page.click("#trace-reset")
    assert span() == 400
    # step 4 ("add", cycles 240-360) in the Compute lane of IPU 0
    x = page.page.evaluate("window.tremulaReport.trace.xOf(300)")
    y = page.page.evaluate("window.tremulaReport.trace.rowOf(0, 'Compute')") + 9
    page.click_canvas("#trace-canvas", x, y)
    assert "add" in page.text("#step-detail h2")
    assert page.number("#step-cycles") == 120
    assert page.page.is_visible("#step-tile-cycles")
    # compute set 1 runs 120 cycles on tiles 0 and 1 of 4: half the tile time
    assert "Compute 50.0%" in page.text("#step-detail")
    assert page.errors == []
    page.close()


def test_tree_liveness_and_operations(context: Any, golden_dir: Path, tmp_path: Path) -> None:
    page = _open(context, write_html(golden_dir, tmp_path / "g.html").path)
    page.show("programs")
    assert page.page.locator("#program-tree li[data-program='2']").count() == 1  # root open
    page.page.click("#tree-expand")
    assert "exchangeX" in page.text("#program-tree")
    page.show("liveness")
    assert "peak 96 B at step 2 of 4" in page.text("#live-peak")
    page.page.fill("#live-step-a", "1")
    page.page.dispatch_event("#live-step-a", "change")
    assert page.number("#live-bytes-a") == 64
    page.show("operations")
    first = page.page.locator("#ops-table tbody tr").first.inner_text()
    assert first.startswith("add")
    page.page.click("#ops-table th[data-key='name']")
    assert page.page.locator("#ops-table tbody tr").first.inner_text().startswith("add")
    page.page.select_option("#ops-depth", "1")
    assert page.errors == []
    page.close()


def test_operations_show_flops_where_known(
    context: Any, graph: dict, execution: dict, tmp_path: Path
) -> None:
    graph["computeSets"]["flops"] = [6, None]  # "double": 6 FLOPs a run; "add": unknown
    write_profile(tmp_path / "flops", graph, execution)
    page = _open(context, write_html(tmp_path / "flops", tmp_path / "f.html").path)
    page.show("operations")
    runs = sum(1 for s in execution["simulation"]["steps"] if s.get("computeSet") == 0)
    headers = page.page.locator("#ops-table th").all_inner_texts()
    column = headers.index("FLOPs")
    cells = {}
    for row in page.page.locator("#ops-table tbody tr").all():
        texts = row.locator("td").all_inner_texts()
        cells[texts[0]] = texts[column]
    assert runs >= 1 and cells["double"] == f"{6 * runs:,}"
    assert cells["add"] == "\u2013"  # an en dash: unknown
    page.page.click("#ops-table th[data-key='flops']")  # sortable, unknown below known
    assert page.page.locator("#ops-table tbody tr").first.inner_text().startswith("double")
    assert page.errors == []
    page.close()


def test_bad_input_shows_a_warning(context: Any, golden_dir: Path, tmp_path: Path) -> None:
    text = (golden_dir / "execution.json").read_text()
    (golden_dir / "execution.json").write_text(text[:100])
    page = _open(context, write_html(golden_dir, tmp_path / "g.html").path)
    assert page.page.is_visible("#warnings")
    assert "execution.json: truncated JSON" in page.text("#warnings")
    assert page.page.is_disabled("#tab-trace")
    assert page.number("#summary-memory") == 1840
    _render_all(page)
    page.close()


# ---- the repository's examples at 1472 tiles ----


def _mlp_profile(directory: Path) -> None:
    from tremula import digits

    trainer = digits.build_training(32, 0.05)
    x, y, _, _ = digits.load_digits()
    with trainer.session as session:
        session.run({trainer.x: x[:32], trainer.labels: y[:32]})
    trainer.session.engine.write_report(str(directory))


def _popsparse_profile(directory: Path) -> None:
    rigl = _module("tremula_tests_rigl_digits", ROOT / "examples" / "popsparse" / "rigl_digits.py")
    from tremula import digits

    rng = np.random.default_rng(0)
    layers = [rigl.Layer(a, b, rigl.BATCH) for a, b in itertools.pairwise(rigl.SIZES)]
    trainer = rigl.Trainer(layers, [rigl.initial_pattern(layer, rng) for layer in layers])
    x, y, _, _ = digits.load_digits()
    with trainer.session:
        trainer.step(x[:32], y[:32])
    trainer.session.engine.write_report(str(directory))


@pytest.fixture(scope="module")
def example_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("examples")
    out = {"mlp": root / "mlp", "popsparse": root / "popsparse"}
    _mlp_profile(out["mlp"])
    _popsparse_profile(out["popsparse"])
    return out


def _check_example_page(page: Any, directory: Path) -> None:
    """The page of an example's profile: the summary's numbers are the profile's, every
    view renders, and a tile clicked on the map shows its bytes."""
    graph = json.loads((directory / "graph.json").read_text())
    execution = json.loads((directory / "execution.json").read_text())
    if "simulation" in execution:
        assert page.number("#summary-cycles") == execution["simulation"]["cycles"]
    live = graph["memory"]["liveness"]
    assert page.number("#summary-peak-nal") == live["notAlwaysLive"]["maxBytes"]
    assert page.number("#summary-always-live") == live["alwaysLive"]["bytes"]
    _render_all(page)
    page.show("memory")
    tile = graph["target"]["numTiles"] // 2
    x, y = page.page.evaluate(f"window.tremulaReport.memoryMap.center({tile})")
    page.click_canvas("#tile-map", x, y)
    assert page.page.get_attribute("#tile-breakdown", "data-tile") == str(tile)
    assert page.number("#tile-total-gaps") == graph["memory"]["byTile"]["totalIncludingGaps"][tile]


@pytest.mark.parametrize("name", ["mlp", "popsparse"])
def test_example_reports_render(
    context: Any, example_dirs: dict[str, Path], name: str, tmp_path: Path
) -> None:
    directory = example_dirs[name]
    other = example_dirs["popsparse" if name == "mlp" else "mlp"]
    written = write_html(directory, tmp_path / f"{name}.html", compare=other)
    assert written.warnings == []
    graph = json.loads((directory / "graph.json").read_text())
    page = _open(context, written.path)
    assert graph["target"]["numTiles"] == 1472
    _check_example_page(page, directory)
    link = page.page.locator("#tile-breakdown a[data-variable]").first
    index = int(link.get_attribute("data-variable"))
    link.click()  # the variable across the tiles
    assert page.number("#variable-bytes") == graph["variables"]["bytes"][index]
    page.show("trace")
    page.page.click("#trace-zoom-in")
    page.page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
    assert (tmp_path / f"{name}.png").stat().st_size > 10_000
    assert page.errors == []
    page.close()


# ---- every other example: the profile its run wrote (autoReport, tests/conftest.py) ----

EXAMPLES = ROOT / "examples"
#: examples whose engines write the profiles rendered here (the last engine each closes)
REPORTED = sorted(
    p
    for p in EXAMPLES.rglob("*.py")
    # the documentation's multi-instance examples need `tremula poprun` (tests/popdist);
    # data_parallel.py also runs in one process (its 4 replicas here)
    if (p.parent.name != "distributed" or p.name == "data_parallel.py")
    and p.name != "rigl_digits.py"  # its training engine's profile: above (NO_REPORT)
    and p.name != "listing_6_1_replica_grouping.py"  # groupings only, no engine
)


@pytest.mark.parametrize("path", REPORTED, ids=lambda p: p.name)
def test_every_example_renders(context: Any, run_example: Any, path: Path, tmp_path: Path) -> None:
    directory = run_example(path).profile
    assert directory is not None, f"{path.name} wrote no profile"
    written = write_html(directory, tmp_path / "report.html")
    assert written.warnings == []
    page = _open(context, written.path)
    _check_example_page(page, directory)
    assert page.errors == []
    page.close()
