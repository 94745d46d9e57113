"""Reading and writing profiles: directories and single files, byte-exact round trips."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tremula.errors import ProfileError
from tremula.profile import read_profile, write_profile


def _canonical(profile: dict) -> str:
    return json.dumps(profile, sort_keys=True, indent=2) + "\n"


def test_write_creates_the_directory_and_both_files(
    tmp_path: Path, graph: dict, execution: dict
) -> None:
    directory = tmp_path / "a" / "report"
    write_profile(directory, graph, execution)
    assert sorted(p.name for p in directory.iterdir()) == ["execution.json", "graph.json"]
    assert (directory / "graph.json").read_text() == _canonical(graph)
    assert (directory / "execution.json").read_text() == _canonical(execution)


def test_round_trip_is_byte_identical(tmp_path: Path, graph: dict, execution: dict) -> None:
    write_profile(tmp_path / "one", graph, execution)
    graph_back, execution_back = read_profile(tmp_path / "one")
    assert (graph_back, execution_back) == (graph, execution)
    write_profile(tmp_path / "two", graph_back, execution_back)
    for name in ("graph.json", "execution.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_graph_only(tmp_path: Path, graph: dict) -> None:
    write_profile(tmp_path, graph, None)
    assert not (tmp_path / "execution.json").exists()
    assert read_profile(tmp_path) == (graph, None)


def test_numpy_values_are_written_as_plain_json(tmp_path: Path, graph: dict) -> None:
    expected = _canonical(graph)
    graph["target"]["numTiles"] = np.int64(4)
    graph["memory"]["byTile"]["total"] = np.array([488, 488, 284, 284])
    write_profile(tmp_path, graph, None)
    assert (tmp_path / "graph.json").read_text() == expected


def test_unserialisable_profile(tmp_path: Path, graph: dict) -> None:
    graph["target"]["clockFrequency"] = float("nan")
    with pytest.raises(ProfileError, match="cannot be written as JSON"):
        write_profile(tmp_path, graph, None)


def test_combined_file(tmp_path: Path, graph: dict, execution: dict) -> None:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"graphProfile": graph, "executionProfile": execution}))
    assert read_profile(path) == (graph, execution)
    assert read_profile(tmp_path) == (graph, execution)  # a directory with only profile.json


def test_combined_file_without_execution(tmp_path: Path, graph: dict) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"graphProfile": graph}))
    assert read_profile(path) == (graph, None)


def test_bare_graph_file(tmp_path: Path, graph: dict) -> None:
    path = tmp_path / "graph_only.json"
    path.write_text(json.dumps(graph))
    assert read_profile(str(path)) == (graph, None)


def test_missing_path_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(ProfileError, match="nowhere: no such profile file or directory"):
        read_profile(missing)


def test_directory_without_graph_json(tmp_path: Path, execution: dict) -> None:
    (tmp_path / "execution.json").write_text(json.dumps(execution))
    with pytest.raises(ProfileError, match=r"graph\.json: no such profile file"):
        read_profile(tmp_path)


def test_invalid_json_is_named(tmp_path: Path, graph: dict) -> None:
    write_profile(tmp_path, graph, None)
    (tmp_path / "execution.json").write_text("{not json")
    with pytest.raises(ProfileError, match=r"execution\.json: not valid JSON"):
        read_profile(tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2]", "a profile is a JSON object, got list"),
        ('{"profilerMode": "NONE"}', "neither"),
        ('{"graphProfile": 3}', "a graphProfile is a JSON object, got int"),
    ],
)
def test_wrong_shapes_are_named(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(ProfileError, match=message) as caught:
        read_profile(path)
    assert str(path) in str(caught.value)


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ProfileError, match=r"binary\.json: cannot read the profile"):
        read_profile(path)


# ---- atomic writes (issue 15) ----

_KILLED_WRITER = """
import resource, signal, sys
from tremula.profile.io import write_profile
limit = int(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; the kernel's default kills
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
graph = {"target": {}, "filler": "x" * (4 * limit)}
write_profile(sys.argv[1], graph, None)
"""


def test_a_writer_killed_mid_write_leaves_the_old_report(tmp_path: Path, graph: dict) -> None:
    """A process killed while writing (SIGXFSZ: the file-size limit is hit halfway through
    the new graph.json) leaves the previous report whole: the new data went to a temporary
    file, never over the old one."""
    import os
    import signal
    import subprocess
    import sys

    write_profile(tmp_path, graph, None)
    before = (tmp_path / "graph.json").read_bytes()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(tmp_path), str(len(before) + 1000)],
        env=env,
        capture_output=True,
    )
    assert done.returncode == -signal.SIGXFSZ, done.stderr.decode()
    assert (tmp_path / "graph.json").read_bytes() == before
    assert read_profile(tmp_path) == (graph, None)


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, graph: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from tremula.profile import io

    write_profile(tmp_path, graph, None)
    before = (tmp_path / "graph.json").read_bytes()

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(ProfileError, match=r"graph\.json.*No space left"):
        io.write_atomic(tmp_path / "graph.json", "{}\n")
    assert (tmp_path / "graph.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.json"]


def test_atomic_files_get_the_mode_of_an_ordinary_new_file(tmp_path: Path) -> None:
    import os

    from tremula.profile.io import write_atomic

    (tmp_path / "ordinary").write_text("x")
    write_atomic(tmp_path / "atomic", "x")
    mode = os.stat(tmp_path / "ordinary").st_mode & 0o777
    assert os.stat(tmp_path / "atomic").st_mode & 0o777 == mode
    write_atomic(tmp_path / "atomic", b"\x00\x01")
    assert (tmp_path / "atomic").read_bytes() == b"\x00\x01"


# ---- a graph.json / execution.json pair from one program (issue 15) ----
def test_a_pair_from_two_programs_is_refused(tmp_path: Path, graph: dict, execution: dict) -> None:
    from tremula.profile.io import graph_id

    graph = dict(graph, graphId=graph_id(graph))
    write_profile(tmp_path, graph, dict(execution, graphId=graph["graphId"]))
    assert read_profile(tmp_path)[0]["graphId"] == graph_id(graph)  # the id ignores itself
    other = dict(execution, graphId="0123456789abcdef")
    for bad in (other, {k: v for k, v in execution.items() if k != "graphId"}):
        write_profile(tmp_path, None, bad)
        with pytest.raises(ProfileError, match=r"not of the program the graph profile describes"):
            read_profile(tmp_path)
    combined = tmp_path / "both.json"
    combined.write_text(json.dumps({"graphProfile": graph, "executionProfile": other}))
    with pytest.raises(ProfileError, match=r"both\.json.*graphId '0123456789abcdef'"):
        read_profile(combined)


def test_graph_ids_tell_programs_apart(graph: dict) -> None:
    from tremula.profile.io import graph_id

    changed = json.loads(json.dumps(graph))
    changed["graph"]["numVertices"] += 1
    assert graph_id(graph) == graph_id(json.loads(json.dumps(graph)))
    assert graph_id(changed) != graph_id(graph)
    assert len(graph_id(graph)) == 16


def test_the_validator_reports_a_pair_of_two_programs(graph: dict, execution: dict) -> None:
    from tremula.profile import check_execution_profile

    assert check_execution_profile(execution, graph) == []
    problems = check_execution_profile(dict(execution, graphId="b"), dict(graph, graphId="a"))
    assert problems == [
        "executionProfile.graphId: 'b' != graphProfile.graphId 'a': the profiles are of "
        "different programs"
    ]


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        {"b": {}, "a": [1, 2.5, "x\u00e9", None, True, False]},
        [[1, 2], [], [[]], {"k": [1]}],
        {"z": [{"y": 1, "x": [[1, 2], [3]]}], "mix": [1, [2, 3], {"q": 4}, "s"]},
        {"n": np.int64(5), "a": np.arange(4), "m": [np.float32(1.5), np.int32(2)], "t": (1, 2)},
        [[np.arange(3).reshape(1, 3)]],
        {"a": {1: [2], 3: "x"}},  # keys that are not strings: json.dumps lays them out
        [1e300, -0.0, 1e-7, 12345678901234567890],
    ],
)
def test_files_are_laid_out_as_json_dumps_does(value: object) -> None:
    """The fast writer's bytes are ``json.dumps(sort_keys=True, indent=2)``'s."""
    from tremula.profile.io import _plain, dumps

    expected = json.dumps(value, sort_keys=True, indent=2, allow_nan=False, default=_plain)
    assert dumps(value) == expected + "\n"


def test_profiles_are_laid_out_as_json_dumps_does(graph: dict, execution: dict, fx) -> None:
    from tremula.profile.io import dumps

    big_graph, big_execution = fx.scaled_profile(tile_copies=8, run_copies=3)
    for profile in (graph, execution, big_graph, big_execution):
        assert dumps(profile) == json.dumps(profile, sort_keys=True, indent=2) + "\n"


# ---- graphId and the file's text from one serialisation ----
_keys = st.sampled_from(["a", "graph", "graphI", "graphId0", "graphIe", "h", "z", "x\ny"])
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=12,
)


@given(st.dictionaries(_keys, _values, max_size=5), st.booleans())
def test_identify_gives_the_id_and_the_text_of_the_profile_with_it(
    graph: dict, stale_id: bool
) -> None:
    """``identify`` = (``graph_id``, the stdlib's JSON of the profile with that id), for
    keys before, after and around ``graphId`` at the top and deeper, and an old id."""
    from tremula.profile.io import graph_id, identify

    if stale_id:
        graph = dict(graph, graphId="0123456789abcdef")
    gid, text = identify(graph)
    assert gid == graph_id(graph)
    assert text == json.dumps({**graph, "graphId": gid}, sort_keys=True, indent=2) + "\n"


def test_identify_a_real_graph_profile(graph: dict) -> None:
    from tremula.profile.io import identify

    gid, text = identify(graph)
    assert json.loads(text) == {**graph, "graphId": gid}
    assert text == _canonical({**graph, "graphId": gid})
