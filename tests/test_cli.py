"""The ``tremula`` command: demo and profile subcommands."""

from __future__ import annotations

import json

import pytest

from tremula.cli import main


def test_demo_writes_a_valid_report(tmp_path, capsys) -> None:
    assert main(["demo", "--tiles", "4", "--report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "Tiles per IPU:" in out and "Total cycles" in out
    assert main(["profile", "validate", str(tmp_path)]) == 0
    assert main(["profile", "summary", str(tmp_path), "--steps"]) == 0
    assert "OnTileExecute" in capsys.readouterr().out


def test_a_second_demo_of_one_process_reports_into_a_subfolder(tmp_path, capsys) -> None:
    """The second engine writing into the folder gets ``engine_2`` (no overwrite), and the
    demo says so."""
    assert main(["demo", "--tiles", "4", "--report", str(tmp_path)]) == 0
    assert f"Profile written to {tmp_path}/graph.json" in capsys.readouterr().out
    first = (tmp_path / "execution.json").read_bytes()
    assert main(["demo", "--tiles", "4", "--report", str(tmp_path)]) == 0
    assert f"Profile written to {tmp_path / 'engine_2'}/graph.json" in capsys.readouterr().out
    assert (tmp_path / "execution.json").read_bytes() == first
    assert main(["profile", "validate", str(tmp_path / "engine_2")]) == 0


def test_validate_reports_a_broken_profile(tmp_path, capsys) -> None:
    assert main(["demo", "--tiles", "4", "--report", str(tmp_path)]) == 0
    graph = json.loads((tmp_path / "graph.json").read_text())
    graph["target"]["numTiles"] = 5
    (tmp_path / "graph.json").write_text(json.dumps(graph))
    capsys.readouterr()
    assert main(["profile", "validate", str(tmp_path)]) == 1
    assert "numTiles" in capsys.readouterr().out


# ---- bad arguments are argument errors, not tracebacks (issue 15) ----


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--tiles", "-1"], "argument --tiles: -1 tiles: expected 1 to 65,536"),
        (["demo", "--tiles", "0"], "argument --tiles: 0 tiles: expected 1 to 65,536"),
        (["demo", "--tiles", "1000000000"], "1000000000 tiles: expected 1 to 65,536"),
        (["demo", "--tiles", "many"], "argument --tiles: 'many' is not a whole number"),
        (["train", "--epochs", "0"], "argument --epochs: 0 epochs: expected at least 1"),
        (["train", "--epochs", "-3"], "argument --epochs: -3 epochs: expected at least 1"),
    ],
)
def test_bad_counts_are_refused_by_the_argument_parser(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_demo_refuses_more_tiles_than_tile_0_holds_up_front(capsys) -> None:
    # issue 30: 19,931 to 65,536 tiles were accepted and ended in an out-of-memory traceback
    from tremula import demo, poplar

    limit = demo.tile_limit()
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--tiles", str(limit + 1)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"{limit + 1:,} tiles: the demo fits on at most {limit:,} tiles" in err
    assert "Traceback" not in err and "out of memory" not in err
    # the limit is the model's: tile 0 (the fullest tile) fits at the limit, not past it
    memory = poplar.IPUModel().create_target().memory_bytes_per_tile
    assert demo._tile0_bytes(limit, 64, {}) <= memory < demo._tile0_bytes(limit + 1, 64, {})


@pytest.mark.parametrize("memory", [400_000])
def test_the_demo_tile_limit_follows_the_tile_memory(memory) -> None:
    from tremula import demo

    model = {"memory_bytes_per_tile": memory}
    limit = demo.tile_limit(**model)
    assert 1 < limit < 19_930
    assert demo._tile0_bytes(limit, 64, model) <= memory < demo._tile0_bytes(limit + 1, 64, model)


def test_an_unwritable_report_folder_is_refused_before_the_demo_runs(tmp_path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--tiles", "4", "--report", str(blocker / "report")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --report" in err and "cannot write a report there (Not a directory)" in err


def test_summary_refuses_a_graph_and_an_execution_profile_of_different_programs(
    tmp_path, capsys
) -> None:
    import shutil

    for tiles in (4, 8):
        assert main(["demo", "--tiles", str(tiles), "--report", str(tmp_path / str(tiles))]) == 0
    shutil.copy(tmp_path / "8" / "execution.json", tmp_path / "4" / "execution.json")
    capsys.readouterr()
    for command in ("summary", "validate"):
        assert main(["profile", command, str(tmp_path / "4")]) == 1
        err = capsys.readouterr().err
        assert "not of the program the graph profile describes" in err and "graphId" in err
