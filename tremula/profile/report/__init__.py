"""The HTML profile report: one self-contained page with PopVision Graph Analyser's views.

``write_html(source, output, compare=None)`` reads a report directory (``graph.json`` and
``execution.json``, or one profile file), builds the page's data (:mod:`.data`) and writes
the page (:mod:`.page`); the page's style and scripts are in ``assets/``.
``write_profiles_html(directory, graph, execution)`` writes ``report.html`` from profiles in
memory (the engine's ``autoReport.outputHtml``). Bad input is
reported as warnings on the page, and :class:`~tremula.errors.ProfileError` only when
nothing can be read.
"""

from __future__ import annotations

from tremula.profile.report.write import HTML_FILE, HtmlReport, write_html, write_profiles_html

__all__ = ["HTML_FILE", "HtmlReport", "write_html", "write_profiles_html"]
