"""``Module``: subclass and override ``build``; ``ir.create_graph(module, ...)`` traces it."""

from __future__ import annotations

from typing import Any


class Module:
    """A reusable graph builder. Store graph inputs made in ``build`` on ``self`` (for
    ``inputs_dict``); building again overwrites them."""

    def build(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.build is not implemented")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.build(*args, **kwargs)
