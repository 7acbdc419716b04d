"""``python train.py hydra.run.dir=<run dir> ckpt_path=last`` alone continues that run: its own
overrides are read in before composition (ablate.run.plan.with_stored_overrides), what is typed beside them wins
and is compared by the resume check, and that check never offers to change the model
(ablate.config.identity)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ablate.config.identity import ResumeMismatchError, check_same_run
from ablate.run.plan import with_stored_overrides


def run_with_overrides(tmp_path: Path, overrides: list[str], name: str = "run") -> Path:
    run_dir = tmp_path / name
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    return run_dir


def test_a_resume_reads_the_runs_own_overrides(tmp_path: Path, capsys) -> None:
    """It was refused for every override of the run not typed again (model.n_layers, seed, ...)."""
    run_dir = run_with_overrides(tmp_path, ["model.n_layers=2", "seed=2", "trainer.max_steps=200", "logger=csv"])
    argv = [f"hydra.run.dir={run_dir}", "ckpt_path=last"]
    got = with_stored_overrides(argv)
    assert got == ["model.n_layers=2", "seed=2", "trainer.max_steps=200", "logger=csv", *argv]
    assert f"resuming {run_dir} with its own overrides: model.n_layers=2 seed=2" in capsys.readouterr().out


def test_what_is_typed_beside_the_resume_wins_for_its_key(tmp_path: Path) -> None:
    stored = ["model.n_layers=2", "trainer.max_steps=200", "ckpt_path=last", "overwrite=true", "hydra.verbose=true"]
    run_dir = run_with_overrides(tmp_path, ["+callbacks.x._target_=a.B", *stored])
    typed = ["ckpt_path=last", f"hydra.run.dir={run_dir}", "trainer.max_steps=300", "+callbacks.x._target_=a.B"]
    typed.append("+resume_allow_changes=[trainer.max_steps]")
    assert with_stored_overrides(typed) == ["model.n_layers=2", *typed]  # run control is not carried over


@pytest.mark.parametrize(
    "argv",
    [
        ["hydra.run.dir={run}"],  # not a resume: a new run into that directory (refused: it holds a run)
        ["ckpt_path=last"],  # no directory: the latest unfinished run of these overrides (ablate.run.plan)
        ["-m", "hydra.run.dir={run}", "ckpt_path=last", "seed=1,2"],  # a sweep finds its jobs itself
        ["hydra.run.dir={run}/missing", "ckpt_path=last"],  # no record: refused later, naming the directory
    ],
)
def test_only_a_single_run_resume_of_a_recorded_run_is_completed(tmp_path: Path, argv: list[str]) -> None:
    run_dir = run_with_overrides(tmp_path, ["model.n_layers=2"])
    argv = [a.format(run=run_dir) for a in argv]
    assert with_stored_overrides(argv) == argv


def test_a_quoted_run_directory_is_found(tmp_path: Path) -> None:
    run_dir = run_with_overrides(tmp_path, ["seed=3"], name="a b")
    argv = [f'hydra.run.dir="{run_dir}"', "ckpt_path=last"]
    assert with_stored_overrides(argv) == ["seed=3", *argv]


def test_a_refused_resume_never_offers_to_change_the_model() -> None:
    """It offered '+resume_allow_changes=[model.n_layers,seed,trainer.max_steps]'."""
    saved = {"model.n_layers": 2, "seed": 1, "trainer.max_steps": 200, "act.name": "gelu"}
    now = {"model.n_layers": 4, "seed": 2, "trainer.max_steps": 3000, "act.name": "relu"}
    with pytest.raises(ResumeMismatchError) as refused:
        check_same_run(saved, now, [], "last.ckpt")
    message = str(refused.value)
    assert "'+resume_allow_changes=[seed,trainer.max_steps]'" in message
    assert "act.name, model.n_layers define the model, which a resume cannot change" in message
    only_model = {**saved, "model.n_layers": 4}
    with pytest.raises(ResumeMismatchError) as refused:
        check_same_run(saved, only_model, [], "last.ckpt")
    assert "resume_allow_changes" not in str(refused.value)


def test_a_typed_deletion_comes_after_what_it_deletes(tmp_path: Path) -> None:
    stored = ["+callbacks.kill._target_=a.Kill", "+callbacks.kill.step=7", "seed=2"]
    run_dir = run_with_overrides(tmp_path, stored)
    typed = [f"hydra.run.dir={run_dir}", "ckpt_path=last", "~callbacks.kill"]
    assert with_stored_overrides(typed) == [*stored, *typed]  # added, then deleted: Hydra applies them in order


@pytest.mark.integration
def test_the_run_directory_alone_resumes_an_interrupted_run(tmp_path: Path, data_dir: Path) -> None:
    """Ctrl-C at step 4 of a run with its own settings; ``hydra.run.dir=<run> ckpt_path=last`` and
    nothing else (the log folder aside, as every test run) continues it to its own 6 steps."""
    import os
    import subprocess
    import sys

    from helpers import forked_python
    from helpers.runs import HANG_TIMEOUT, REPO, TINY

    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "ABLATE_DATA_DIR": str(data_dir),
           "ABLATE_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    run_dir = tmp_path / "logs" / "my run"
    base = [sys.executable, str(REPO / "train.py"), f"paths.log_dir={tmp_path / 'logs'}", f'hydra.run.dir="{run_dir}"']
    ctrl_c = ["+callbacks.ctrl_c._target_=helpers.signal_at_step.SignalAtStep", "+callbacks.ctrl_c.step=4"]
    once = [f"+callbacks.ctrl_c.once_file={tmp_path / 'interrupted'}"]

    def train(*args: str) -> subprocess.CompletedProcess:
        return forked_python.run(
            [*base, *args], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=HANG_TIMEOUT,
        )  # fmt: skip

    first = train(*TINY, "logger=csv", "seed=5", *ctrl_c, *once)
    assert first.returncode == 130, first.stderr[-3000:]
    resumed = train("ckpt_path=last")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "completed" and status["steps"] == 6, status
    assert status["resumed_from"] == str(run_dir / "checkpoints" / "last.ckpt")
    assert "seed=5" in status["overrides"] and "model=tiny" in status["overrides"]
