"""PopXL across the instances of a PopRun job, launched through the real mpirun: results
bit-identical to the same program with all replicas in one process, the PopXL distributed
documentation examples, and collective calls made on only some instances.

Launches are few and grouped: one per layout.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest
from tremula_tests_popdist_launch import PROGRAMS, ROOT, poprun, program

import popxl
from tremula import profile
from tremula.errors import DistributedConfigError


def _cases():
    spec = importlib.util.spec_from_file_location(
        "tremula_tests_popdist_cases", PROGRAMS / "cases.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def single_process() -> dict[str, np.ndarray]:
    """The cases with all 4 replicas in this process (the reference)."""
    return _cases().run_all("ipu_model")


@pytest.mark.parametrize(
    ("instances", "device"), [(2, "ipu_model"), (4, "cpu")], ids=["2x2-ipu_model", "4x1-cpu"]
)
def test_instances_match_one_process_bit_for_bit(
    tmp_path, single_process, instances, device
) -> None:
    """Outputs of every replica and get_tensor_data on every instance equal the one-process
    run bit for bit; each instance's profile (2 IPU-Link domains in the 2x2 job) is valid
    and shows its replicas and its cross-instance copies, and autoReport writes each
    instance's engines into folders of their own."""
    auto = tmp_path / "auto"
    options = {"autoReport.all": "true", "autoReport.directory": str(auto)}
    job = poprun(
        "--num-instances",
        str(instances),
        "--num-replicas",
        "4",
        "--num-ilds",
        "2",
        "python",
        program("cases.py"),
        str(tmp_path),
        device,
        env={"POPLAR_ENGINE_OPTIONS": json.dumps(options)} if device == "ipu_model" else None,
    )
    assert job.rc == 0, job.stderr[-3000:]
    for i in range(instances):
        got = np.load(tmp_path / f"instance{i}.npz")
        assert set(got) == set(single_process)
        for key, want in single_process.items():
            assert got[key].dtype == want.dtype and got[key].shape == want.shape, key
            assert np.array_equal(got[key], want), f"instance {i}: {key} differs"
        if device == "ipu_model":
            _check_profile(tmp_path / f"profile{i}", i, instances)
            _check_auto_report(auto / f"instance_{i}", tmp_path / f"profile{i}", i)
    if device == "ipu_model":
        assert sorted(p.name for p in auto.iterdir()) == [f"instance_{i}" for i in range(2)]


def _check_auto_report(folder, written, index: int) -> None:
    """An instance's autoReport folder: its first engine's pair (byte-identical to the one
    ``write_report`` wrote), its three later engines' in ``engine_2`` to ``engine_4``."""
    for name in ("graph.json", "execution.json"):
        assert (folder / name).read_bytes() == (written / name).read_bytes(), name
    later_engines = ["engine_2", "engine_3", "engine_4"]
    assert sorted(p.name for p in folder.glob("engine_*")) == later_engines
    for later in later_engines:
        graph, execution = profile.read_profile(folder / later)
        profile.validate(graph, execution)
        assert graph["instances"]["index"] == index


def _check_profile(folder, index: int, count: int) -> None:
    graph, execution = profile.read_profile(folder)
    profile.validate(graph, execution)
    inst = graph["instances"]
    L = 4 // count
    assert (inst["count"], inst["index"], inst["replicationFactor"]) == (count, index, 4)
    assert inst["replicas"] == list(range(index * L, index * L + L))
    copies = inst["crossInstanceCopies"]
    assert copies and all(c["bytesSent"] > 0 or c["bytesReceived"] > 0 for c in copies)
    assert all(c["cycles"] > 0 for c in copies)
    # replicas 0, 1 and 2, 3 are two IPU-Link domains: copies between them use GW-Links
    assert {c["link"] for c in copies} == {"GW-Link"}
    steps = execution["simulation"]["steps"]
    glob = {s["program"]: s for s in steps if s["type"] == "GlobalExchange"}
    for c in copies:
        assert glob[c["program"]]["cycles"] >= c["cycles"]
    text = profile.summarise(graph)
    assert f"{index} of {count}" in text and "Cross-instance copies" in text


def test_data_parallel_example_matches_one_process() -> None:
    """examples/distributed/data_parallel.py: 2 instances x 2 replicas, each instance
    reading its shard; the example asserts its weights equal the one-process run."""
    job = poprun(
        "--num-instances",
        "2",
        "--num-replicas",
        "4",
        "python",
        str(ROOT / "examples" / "distributed" / "data_parallel.py"),
        "--steps",
        "2",
        "--batch",
        "4",
    )
    assert job.rc == 0, job.stderr[-3000:]
    for i in range(2):
        (line,) = job.lines(i)
        assert line.startswith(f"instance {i} of 2: trained replicas {2 * i}..{2 * i + 1} of 4")
        assert line.endswith("weights equal the 4-replica single-process run")


def _printed(job, instance: int) -> dict[str, str]:
    """``== name`` sections of an instance's output."""
    out: dict[str, list[str]] = {}
    name = None
    for line in job.lines(instance):
        if line.startswith("== "):
            name = line[3:]
            out[name] = []
        elif name is not None:
            out[name].append(line.strip())
    return {k: " ".join(v) for k, v in out.items()}


def test_documentation_examples_with_two_instances() -> None:
    """EX-S, EX-R and EX-M: 2 instances, 2 replicas; every instance prints the full global
    tensor (spec/distributed-instances.md section 5)."""
    job = poprun(
        "--num-replicas",
        "2",
        "--num-instances",
        "2",
        "--vipu-partition",
        "popxl_test",
        "--update-partition",
        "yes",
        "python",
        program("doc_examples.py"),
        "distributed_simple_example",
        "distributed_rts_simple_example",
        "distributed_rts_simple_example_manual_remote_buffer",
    )
    assert job.rc == 0, job.stderr[-3000:]
    for i in range(2):
        printed = _printed(job, i)
        assert printed["distributed_simple_example"] == "[[1 2 3 4] [5 6 7 8]]"
        assert printed["distributed_rts_simple_example"] == "[3. 3.]"
        assert printed["distributed_rts_simple_example_manual_remote_buffer"] == "[3 3]"


def test_documentation_complex_example_with_eight_instances() -> None:
    """EX-C: 8 instances, 16 replicas, groups of 4 replicas 4 apart sharded over 2, gathered
    in pairs that span instances; every instance prints ``arange(1, 129).reshape(4, 32)``."""
    job = poprun(
        "--num-replicas",
        "16",
        "--num-instances",
        "8",
        "python",
        program("doc_examples.py"),
        "distributed_rts_complex_example",
    )
    assert job.rc == 0, job.stderr[-3000:]
    want = np.arange(1, 129, dtype=np.float32).reshape(4, 32)
    for i in range(8):
        text = _printed(job, i)["distributed_rts_complex_example"]
        got = np.array(text.replace("[", " ").replace("]", " ").split(), dtype=np.float32)
        assert np.array_equal(got.reshape(4, 32), want), f"instance {i}"


@pytest.mark.parametrize(
    ("how", "message"),
    [
        (
            "finish",
            "instance 0 waited in Session.run (collective call #2) for the other instances, "
            "but instance 1 finished the program (exit status 0) without making that call",
        ),
        ("other", "instance 1: called weights_to_host (#2)"),
        ("stuck", "waited 3 s for the other instances in Session.run"),
    ],
)
def test_a_device_call_on_only_some_instances_ends_the_job(how, message) -> None:
    # only "stuck" waits for the time-out; the others are told at once, and a long time-out
    # keeps a busy machine (instance 1 slow to reach its call) from turning them into it
    job = poprun(
        "--num-instances",
        "2",
        "--collective-timeout",
        "3" if how == "stuck" else "45",
        "python",
        program("faults.py"),
        how,
        timeout=120,
    )
    assert job.rc != 0
    assert message in job.stderr
    assert "not reached" not in job.stdout
    assert job.seconds < 60  # instance 1 of "stuck" sleeps 120 s: the job did not wait for it


def test_inconsistent_popdist_environment_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("POPDIST_NUM_TOTAL_REPLICAS", "4")
    monkeypatch.setenv("POPDIST_NUM_LOCAL_REPLICAS", "3")
    monkeypatch.setenv("POPDIST_REPLICA_INDEX_OFFSET", "0")
    with pytest.raises(
        DistributedConfigError, match="POPDIST_NUM_LOCAL_REPLICAS=3 does not divide"
    ):
        popxl.Ir(replication="popdist")
    monkeypatch.delenv("POPDIST_REPLICA_INDEX_OFFSET")
    with pytest.raises(ValueError, match="inconsistent environment"):
        popxl.Ir(replication="popdist")


def test_popdist_replication_without_a_launcher_is_one_replica(monkeypatch) -> None:
    for name in (
        "POPDIST_NUM_TOTAL_REPLICAS",
        "POPDIST_NUM_LOCAL_REPLICAS",
        "POPDIST_REPLICA_INDEX_OFFSET",
    ):
        monkeypatch.delenv(name, raising=False)
    ir = popxl.Ir(replication="popdist")
    assert (ir.replication_factor, ir.instance_replication_factor) == (1, 1)
    with pytest.raises(ValueError, match="positive integer or 'popdist'"):
        popxl.Ir(replication="popart")


def test_single_instance_job_has_global_layout(monkeypatch) -> None:
    """One instance of 4 replicas: local = global, no MPI needed."""
    monkeypatch.setenv("POPDIST_NUM_TOTAL_REPLICAS", "4")
    monkeypatch.setenv("POPDIST_NUM_LOCAL_REPLICAS", "4")
    monkeypatch.setenv("POPDIST_REPLICA_INDEX_OFFSET", "0")
    ir = popxl.Ir(replication="popdist")
    assert (ir.replication_factor, ir.instance_replication_factor) == (4, 4)
