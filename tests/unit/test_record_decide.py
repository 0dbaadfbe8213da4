"""Which process records under `perfscope record`, launcher helpers and option round trips."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from perfscope.recorder.inject import decide
from perfscope.errors import UsageError
from perfscope.launch import child_env, default_output, guess_world_size
from perfscope.options import RecordOptions

PY = "/usr/bin/python3"
BASE = {"PERFSCOPE_RUN_DIR": "/runs/x"}


@pytest.mark.parametrize("env, argv, expected", [
    ({}, [PY, "train.py"], (False, 0)),
    (BASE, [PY, "train.py"], (True, 0)),
    (BASE, [PY, "/usr/local/bin/torchrun", "--nproc-per-node", "2", "train.py"], (False, 0)),
    (BASE, [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"], (False, 0)),
    (BASE, [PY, "/usr/bin/accelerate", "launch", "train.py"], (False, 0)),
    ({**BASE, "RANK": "3", "LOCAL_RANK": "1"}, [PY, "-u", "train.py"], (True, 3)),
    # a helper started by rank 3 (compile worker) inherits RANK=3 and the owner mark
    ({**BASE, "RANK": "3", "PERFSCOPE_OWNER": "3:100"}, [PY, "-m", "torch._inductor.compile_worker"], (False, 3)),
    # an elastic restart of rank 3 gets a fresh environment from the agent (no owner)
    ({**BASE, "RANK": "3"}, [PY, "train.py"], (True, 3)),
    # a child of the single recording process (no RANK anywhere)
    ({**BASE, "PERFSCOPE_OWNER": "-:100"}, [PY, "helper.py"], (False, 0)),
    # a rank started by a launcher that (wrongly) recorded as implicit rank 0 still records
    ({**BASE, "RANK": "0", "PERFSCOPE_OWNER": "-:100"}, [PY, "train.py"], (True, 0)),
    # `perfscope record -- srun -n 4 python train.py`: each task records as its Slurm rank
    ({**BASE, "SLURM_PROCID": "2"}, [PY, "train.py"], (True, 2)),
    ({**BASE, "SLURM_PROCID": "0", "RANK": "5"}, [PY, "train.py"], (True, 5)),
    (BASE, [PY, "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)", "--multiprocessing-fork"], (False, 0)),
    (BASE, [PY, "-c", "from multiprocessing.resource_tracker import main;main(4)"], (False, 0)),
    # clustered short options: still the launcher agent, never an implicit rank 0
    (BASE, [PY, "-um", "torch.distributed.run", "--nproc-per-node", "2", "train.py"], (False, 0)),
    (BASE, [PY, "-Bu", "/usr/local/bin/torchrun", "--nproc-per-node", "2", "train.py"], (False, 0)),
    (BASE, [PY, "-X", "dev", "-Wd", "-Xfaulthandler", "-m", "torch.distributed.run", "train.py"], (False, 0)),
    (BASE, [PY, "-uc", "from multiprocessing.forkserver import main; main(3)"], (False, 0)),
    (BASE, [PY, "-Xdev", "-W", "error", "train.py"], (True, 0)),
])
def test_decide(env: dict[str, str], argv: list[str], expected: tuple[bool, int]) -> None:
    ok, rank, why = decide(env, argv, 123)
    assert (ok, rank) == expected, why
    assert why


@pytest.mark.parametrize("command, world", [
    (["python", "train.py"], 1),
    (["python3.11", "-u", "train.py", "--nproc-per-node", "9"], 1),
    (["torchrun", "--nproc-per-node", "8", "train.py"], 8),
    (["torchrun", "--nproc_per_node=4", "--nnodes=2", "train.py"], 8),
    (["torchrun", "--nproc-per-node", "gpu", "train.py"], None),
    (["torchrun", "--nnodes", "1:4", "--nproc-per-node", "8", "train.py"], None),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "t.py"], 2),
    (["python", "-m", "mypkg.train"], None),
    (["bash", "run.sh"], None),
])
def test_guess_world_size(command: list[str], world: int | None) -> None:
    assert guess_world_size(command) == world


def test_default_output_names_the_script() -> None:
    assert default_output(["torchrun", "--nproc-per-node", "2", "train.py"]).name.startswith("train-")
    assert default_output(["bash", "x y.sh"]).name.startswith("bash-")
    assert str(default_output(["python", "t.py"])).endswith(".perfscope")


def test_options_round_trip_through_the_environment() -> None:
    opts = RecordOptions(cupti=False, nccl=True, nvml=False, host_hooks=True, flush_interval_s=0.25)
    assert RecordOptions.from_env(opts.to_env()) == opts
    assert RecordOptions.from_env({}) == RecordOptions()
    assert RecordOptions.from_env({"PERFSCOPE_FLUSH_INTERVAL_S": "junk"}).flush_interval_s == 2.0
    with pytest.raises(UsageError):
        RecordOptions(flush_interval_s=0)


def test_child_env_prepends_the_site_dir_and_drops_owner(tmp_path: "pytest.TempPathFactory") -> None:
    from pathlib import Path

    from perfscope.recorder.inject import site_dir

    env = child_env(Path("/runs/r"), "abc", RecordOptions(), base={"PYTHONPATH": "/mine", "PERFSCOPE_OWNER": "0:1"})
    assert env["PYTHONPATH"] == site_dir() + ":/mine"
    assert "PERFSCOPE_OWNER" not in env
    assert env["PERFSCOPE_RUN_DIR"] == "/runs/r" and env["PERFSCOPE_RUN_ID"] == "abc"
    assert (Path(site_dir()) / "sitecustomize.py").is_file()


def test_record_cli_needs_a_command_and_parses_options_before_dashdash() -> None:
    from perfscope.cli.main import main

    assert main(["record"]) == 2  # click: missing COMMAND
    runner = CliRunner()
    from perfscope.cli.record import record

    res = runner.invoke(record, ["--help"])
    assert res.exit_code == 0 and "--flush-interval" in res.output and "--no-cupti" in res.output


def test_record_cli_unknown_program_is_a_clear_error(tmp_path: "pytest.TempPathFactory") -> None:
    from perfscope.cli.main import main

    assert main(["record", "-o", str(tmp_path) + "/r", "--", "no-such-program-xyz"]) == 2


def test_record_cli_passes_the_command_through_with_and_without_dashdash(tmp_path: "pytest.TempPathFactory") -> None:
    import sys

    from perfscope.cli.main import main

    quiet = ["--no-cupti", "--no-nccl", "--no-nvml"]
    # without `--`: the first non-option starts the command
    assert main(["record", "-o", f"{tmp_path}/a", *quiet, sys.executable, "-c", "import sys; sys.exit(4)"]) == 4
    # after `--`, options belong to the command (here -o is the child's argv, not record's)
    code = "import sys; sys.exit(10 + len(sys.argv))"
    assert main(["record", "-o", f"{tmp_path}/b", *quiet, "--", sys.executable, "-c", code, "-o", "x"]) == 13


def test_exit_handler_swallows_a_failed_final_write(monkeypatch: pytest.MonkeyPatch) -> None:
    # A failed final write at interpreter exit must not print a traceback into the job's stderr.
    import atexit
    import os
    import signal

    from perfscope.recorder import inject
    from perfscope.errors import CollectorError

    registered: list = []
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(os, "_exit", os._exit)  # restored after the test

    def no_signals(*_a: object) -> None:
        raise ValueError("not the main thread")

    monkeypatch.setattr(signal, "signal", no_signals)

    class Failing:
        running = True

        def stop(self, **_kw: object) -> None:
            raise CollectorError("disk full")

    inject._install_exit_handlers(Failing())
    assert len(registered) == 1
    registered[0]()  # must not raise


def test_the_start_up_decision_module_reads_the_same_variables_as_options() -> None:
    # _perfscope_decide runs before perfscope can be imported, so it repeats these names.
    from perfscope import options
    from perfscope.recorder.inject import _perfscope_decide as d

    assert (d.ENV_RUN_DIR, d.ENV_OWNER, d.ENV_DEBUG) == (options.ENV_RUN_DIR, options.ENV_OWNER, options.ENV_DEBUG)
    assert d.RANK_VARS == options.RANK_VARS
    env = {options.ENV_RUN_DIR: "/r", options.ENV_DEBUG: "1"}
    assert d.recording_requested(env) and d.debugging(env) and options.env_debug(env)
    assert not d.recording_requested({}) and not d.debugging({}) and options.env_run_dir({}) is None
