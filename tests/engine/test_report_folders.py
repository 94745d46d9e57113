"""autoReport's folders: no engine of a process, and no instance of a PopRun job, overwrites
another's profiles (``profiles.claim_directory``; the real-mpirun check is in
``tests/popdist/test_popxl_instances.py``)."""

from __future__ import annotations

import json

import pytest
from tremula_tests_engine_codelets import increment, make_engine, new_graph, var

from tremula import poplar
from tremula.engine.profiles import claim_directory
from tremula.errors import DistributedConfigError
from tremula.profile import read_profile, validate


def _engine(folder, increments: int) -> poplar.Engine:
    """x += 1 ``increments`` times a run (a program of that many steps), autoReport on,
    loaded and run once."""
    g, dev = new_graph()
    x = var(g, 4, tile=None, dtype=poplar.INT, read="x")
    program = poplar.Sequence([increment(g, x) for _ in range(increments)])
    e = make_engine(
        g, program, {"autoReport.all": "true", "autoReport.directory": str(folder)}, dev
    )
    e.run()
    return e


def _check_own_files(folder, want: dict) -> None:
    graph, execution = read_profile(folder)
    assert graph == want["graphProfile"] and execution == want["executionProfile"]
    validate(graph, execution)


def test_engines_of_one_process_write_into_their_own_folders(tmp_path) -> None:
    """The first engine writes into the folder, the n-th into ``engine_<n>`` in it (the first
    not yet claimed, here by an engine that named ``engine_2`` itself); none overwrites
    another, each folder holds its own engine's pair."""
    folder = tmp_path / "report"
    first = _engine(folder, 1)
    explicit = _engine(folder / "engine_2", 2)
    third = _engine(folder, 3)
    assert [e.report_directory for e in (first, explicit, third)] == [
        str(folder),
        str(folder / "engine_2"),
        str(folder / "engine_3"),
    ]
    want = [json.loads(json.dumps(e.get_profile())) for e in (first, explicit, third)]
    first.close()
    before = {p.name: p.read_bytes() for p in folder.glob("*.json")}
    explicit.close()
    third.close()
    assert {p.name: p.read_bytes() for p in folder.glob("*.json")} == before
    for e, profiles in zip((first, explicit, third), want, strict=True):
        _check_own_files(e.report_directory, profiles)
    steps = [
        len(read_profile(e.report_directory)[1]["simulation"]["steps"])
        for e in (first, explicit, third)
    ]
    assert steps[0] < steps[1] < steps[2]  # three different programs, three different pairs


def test_two_spellings_of_one_folder_are_one_folder(tmp_path, monkeypatch) -> None:
    """A relative and an absolute name of one folder are one claim; the folder is absolute,
    so an engine writes where it was claimed after the working directory changed."""
    monkeypatch.chdir(tmp_path)
    a = _engine("rep", 1)
    b = _engine(tmp_path / "rep", 2)
    assert (a.report_directory, b.report_directory) == (
        str(tmp_path / "rep"),
        str(tmp_path / "rep" / "engine_2"),
    )
    monkeypatch.chdir(tmp_path / "rep")
    a.close()
    assert (tmp_path / "rep" / "execution.json").exists()
    assert not (tmp_path / "rep" / "rep").exists()


def test_an_engine_without_auto_report_claims_nothing(tmp_path) -> None:
    g, _ = new_graph()
    plain = make_engine(g, poplar.Sequence(), {"autoReport.directory": str(tmp_path)})
    assert plain.report_directory is None
    assert _engine(tmp_path, 1).report_directory == str(tmp_path)


def _popdist(total: int, local: int, offset: int) -> dict[str, str]:
    return {
        "POPDIST_NUM_TOTAL_REPLICAS": str(total),
        "POPDIST_NUM_LOCAL_REPLICAS": str(local),
        "POPDIST_REPLICA_INDEX_OFFSET": str(offset),
    }


def test_each_instance_of_a_poprun_job_writes_into_its_own_folder(tmp_path, monkeypatch) -> None:
    """Instance i of several: ``instance_<i>`` (then ``engine_<n>`` within it); a one-instance
    job writes where a plain program does. Relative names become absolute."""
    monkeypatch.chdir(tmp_path)
    assert claim_directory("rel", _popdist(2, 1, 1)) == str(tmp_path / "rel" / "instance_1")
    d = str(tmp_path)
    assert claim_directory(d, _popdist(4, 2, 2)) == str(tmp_path / "instance_1")
    assert claim_directory(d, _popdist(4, 2, 0)) == str(tmp_path / "instance_0")
    assert claim_directory(d, _popdist(4, 2, 2)) == str(tmp_path / "instance_1" / "engine_2")
    assert claim_directory(d, _popdist(4, 4, 0)) == d
    assert claim_directory(d, {}) == str(tmp_path / "engine_2")


def test_an_inconsistent_popdist_environment_is_named(tmp_path) -> None:
    with pytest.raises(DistributedConfigError, match="POPDIST_NUM_LOCAL_REPLICAS=3"):
        claim_directory(str(tmp_path), _popdist(4, 3, 0))
