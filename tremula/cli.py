"""The ``tremula`` command, thin over the Python API.

tremula demo [--tiles N] [--report DIR] [--steps]
tremula profile summary DIR [--steps]
tremula profile validate DIR
tremula profile report DIR [-o FILE.html] [--compare DIR2]
tremula profile trace DIR -o trace.json
tremula poprun [options] program [args]
"""

from __future__ import annotations

import argparse
import sys


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _tiles(text: str) -> int:
    """``--tiles``: 1 to MAX_TILES_PER_IPU, and no more than the demo fits on (refused here,
    before anything is built: past it, tile 0 runs out of memory)."""
    from tremula.target import MAX_TILES_PER_IPU  # NumPy: not for `tremula poprun`

    n = _whole(text)
    if not 1 <= n <= MAX_TILES_PER_IPU:
        raise argparse.ArgumentTypeError(
            f"{n} tiles: expected 1 to {MAX_TILES_PER_IPU:,} (a Mk2 IPU has 1,472)"
        )
    from tremula import demo, poplar

    limit = demo.tile_limit()
    if n > limit:
        memory = poplar.IPUModel().create_target().memory_bytes_per_tile
        raise argparse.ArgumentTypeError(
            f"{n:,} tiles: the demo fits on at most {limit:,} tiles of the Mk2 IPU Model "
            f"(tile 0 gathers a partial sum from every worker of every tile, and its "
            f"{memory:,} bytes run out past that)"
        )
    return n


def _epochs(text: str) -> int:
    """``--epochs``: at least 1."""
    n = _whole(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} epochs: expected at least 1")
    return n


def _report_dir(text: str) -> str:
    """``--report``: a folder that can be created and written (tried now, so that a bad
    path is an argument error rather than a failure after the program ran)."""
    import tempfile  # here: `tremula poprun` starts without it
    from pathlib import Path

    try:
        Path(text).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=text):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r}: cannot write a report there ({exc.strerror or exc})"
        ) from None
    return text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "profile":
        from tremula.profile.cli import main as profile_main

        return profile_main(argv[1:])
    if argv and argv[0] == "poprun":
        from tremula.popdist.poprun import main as poprun_main

        return poprun_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="tremula",
        description=(
            "Tremula: the IPU programming stack in Python. Commands: train, demo, profile, poprun."
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train an MLP on the digits with PopXL")
    train.add_argument("--epochs", type=_epochs, default=8, help="passes over the data (>= 1)")
    train.add_argument("--device", default="ipu_model", choices=["ipu_model", "cpu"])
    train.add_argument("--no-summary", action="store_true", help="skip the profile summary")
    train.add_argument(
        "--no-progress", action="store_true", help="no progress bars (shown on a terminal)"
    )
    demo = commands.add_parser("demo", help="run an example program on the Mk2 IPU Model")
    demo.add_argument(
        "--tiles",
        type=_tiles,
        default=1472,
        help="tiles per IPU (default 1472; at most what tile 0's memory allows)",
    )
    demo.add_argument(
        "--report", type=_report_dir, metavar="DIR", help="write graph.json / execution.json here"
    )
    demo.add_argument("--steps", action="store_true", help="list every execution step")
    commands.add_parser(
        "profile", help="summarise, validate, view or export a profile (tremula profile --help)"
    )
    commands.add_parser(
        "poprun", help="run a program as several instances (see: tremula poprun --help)"
    )
    args = parser.parse_args(argv)
    if args.command == "train":
        from tremula.digits import main as train_main
        from tremula.progress import set_progress_bars

        if args.no_progress:
            set_progress_bars(False)
        return train_main(args.epochs, args.device, not args.no_summary)
    if args.command == "demo":
        from tremula.demo import main as demo_main

        return demo_main(args.tiles, args.report, args.steps)
    return 2


def run() -> int:
    """Entry point of the ``tremula`` script: ``main`` that exits quietly when the reader of
    its output goes away (``tremula demo | head``)."""
    try:
        return main()
    except BrokenPipeError:
        sys.stdout = None  # type: ignore[assignment]  # nothing more can be written
        return 0


if __name__ == "__main__":
    raise SystemExit(run())
