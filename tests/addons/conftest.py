"""Tests that run Graphcore's popxl-addons (MIT, unmodified, read-only in
``../shared/clients/popxl-addons``) on Tremula, as its users import it."""

from __future__ import annotations

import sys
from pathlib import Path

ADDONS = Path(__file__).resolve().parents[2].parent / "shared" / "clients" / "popxl-addons"

if not (ADDONS / "popxl_addons" / "__init__.py").exists():
    raise RuntimeError(f"popxl-addons not found at {ADDONS} (expected beside the repository)")
if str(ADDONS) not in sys.path:
    sys.path.insert(0, str(ADDONS))
