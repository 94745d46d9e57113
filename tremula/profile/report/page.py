"""Assembling the report page: the template, its style and scripts inlined, and the data.

The page needs no network and no server. The data is the JSON of
:func:`~tremula.profile.report.data.build_model`, compressed with zlib and base64-encoded
(the page inflates it with the browser's ``DecompressionStream``): per-tile arrays of a
1472-tile profile compress about 30-fold.
"""

from __future__ import annotations

import base64
import html
import json
import zlib
from importlib import resources
from typing import Any

#: The page's scripts, in the order they are inlined (core first: the others use it).
SCRIPTS: tuple[str, ...] = (
    "core.js",
    "charts.js",
    "summary.js",
    "memory.js",
    "liveness.js",
    "programs.js",
    "trace.js",
    "operations.js",
    "compare.js",
)


def _asset(name: str) -> str:
    assets = resources.files("tremula.profile.report").joinpath("assets")
    return assets.joinpath(name).read_text("utf-8")


def encode_data(payload: dict[str, Any]) -> str:
    """The payload as the page embeds it: compact JSON, zlib-compressed, base64, in lines."""
    text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    packed = base64.b64encode(zlib.compress(text.encode("utf-8"), 6)).decode("ascii")
    return "\n".join(packed[i : i + 120] for i in range(0, len(packed), 120))


def decode_data(page: str) -> dict[str, Any]:
    """The payload of a page written by :func:`render_page` (for tests and tools)."""
    start = page.index('data-encoding="deflate-base64">') + len('data-encoding="deflate-base64">')
    packed = page[start : page.index("</script>", start)]
    return json.loads(zlib.decompress(base64.b64decode("".join(packed.split()))))


def render_page(report: dict[str, Any], compare: dict[str, Any] | None = None) -> str:
    """The whole HTML page for a report model (and the one it is compared with).

    Args:
        report: The model of the report (``build_model``).
        compare: The model of a second report for the Compare view, or None.

    Returns:
        One self-contained HTML document.
    """
    title = f"Tremula profile: {report['source']}"
    if compare is not None:
        title += f" vs {compare['source']}"
    script = "\n".join(_asset(name) for name in SCRIPTS)
    parts = {
        "{{TITLE}}": html.escape(title),
        "{{CSS}}": _asset("report.css"),
        "{{DATA}}": encode_data({"report": report, "compare": compare}),
        "{{SCRIPT}}": script.replace("</script", "<\\/script"),
    }
    page = _asset("report.html")
    for key, value in parts.items():
        page = page.replace(key, value)
    return page
