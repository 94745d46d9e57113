"""Writing a report page from report directories."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tremula.errors import ProfileError
from tremula.profile.io import write_atomic
from tremula.profile.report.data import MAX_STEPS, build_model
from tremula.profile.report.load import LoadedReport, load_report
from tremula.profile.report.page import render_page

#: The page's file name next to the JSON profiles (``autoReport.outputHtml``).
HTML_FILE = "report.html"


@dataclass(frozen=True)
class HtmlReport:
    """A page written.

    Attributes:
        path: Where it was written.
        size: Its size in bytes.
        warnings: The warnings it shows (bad or missing input), for the caller to print.
    """

    path: Path
    size: int
    warnings: list[str]


def write_html(
    source: str | Path | LoadedReport,
    output: str | Path | None = None,
    compare: str | Path | LoadedReport | None = None,
    max_steps: int = MAX_STEPS,
) -> HtmlReport:
    """Write the HTML report of a profile.

    Args:
        source: A report directory or profile file, or profiles already loaded.
        output: The page's path; default ``report.html`` in the report directory (next to
            the profile file when ``source`` is a file).
        compare: A second report for the Compare view (``B`` against ``source``'s ``A``).
        max_steps: The most execution steps the trace keeps.

    Returns:
        Where the page went, its size and its warnings.

    Raises:
        ProfileError: If nothing of ``source`` (or of ``compare``) can be read, or the page
            cannot be written.
    """
    loaded = source if isinstance(source, LoadedReport) else load_report(source)
    model = build_model(loaded, max_steps)
    other: dict[str, Any] | None = None
    if compare is not None:
        other_loaded = compare if isinstance(compare, LoadedReport) else load_report(compare)
        other = build_model(other_loaded, max_steps)
    path = Path(output) if output is not None else _default_output(Path(loaded.source))
    text = render_page(model, other)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProfileError(f"cannot write the report page to {path}: {exc}") from exc
    write_atomic(path, text)
    warnings = model["warnings"] + [f"compare: {w}" for w in (other or {}).get("warnings", [])]
    return HtmlReport(path, len(text.encode("utf-8")), warnings)


def _default_output(source: Path) -> Path:
    return (source if source.is_dir() else source.parent) / HTML_FILE


def write_profiles_html(
    directory: str | Path,
    graph: dict[str, Any] | None,
    execution: dict[str, Any] | None,
) -> HtmlReport:
    """Write ``report.html`` into ``directory`` from profiles in memory (the engine's
    ``autoReport.outputHtml``), without reading the JSON files back.

    Raises:
        ProfileError: If the page cannot be written.
    """
    loaded = LoadedReport(str(directory), graph, execution)
    if execution is None:
        loaded.warnings.append("no execution profile yet (the program has not run)")
    return write_html(loaded, Path(directory) / HTML_FILE)
