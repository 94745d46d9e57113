"""Runs the PopXL distributed documentation examples named on the command line, one after
the other in this instance (one launch for several examples of the same layout); each
example's printed tensor is preceded by a line ``== name``."""

import runpy
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "distributed"

for name in sys.argv[1:]:
    print(f"== {name}", flush=True)
    runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name="__main__")
    sys.stdout.flush()
