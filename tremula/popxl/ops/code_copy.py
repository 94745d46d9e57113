"""``code_copy``: PopXL defines it in ``popxl/ops/code_copy.py`` but does not export it, and
it always raises ``NotImplementedError``; so does Tremula's. Use ``ops.remote_code_load``."""

from __future__ import annotations

from typing import Any


def code_copy(graph: Any, source: str, destination: str) -> None:
    """Not implemented (as in PopXL).

    Raises:
        NotImplementedError: always; naming the graph, the source and the destination.
    """
    name = getattr(graph, "name", repr(graph))
    raise NotImplementedError(
        f"code_copy: copying the code of graph {name!r} from {source!r} to {destination!r} "
        f"is not implemented (as in PopXL); use ops.remote_code_load(graph, 'executable')"
    )


__all__: list[str] = []
