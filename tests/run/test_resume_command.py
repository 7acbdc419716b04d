"""``python train.py hydra.run.dir=<run dir> ckpt_path=last`` alone continues that run: its own
overrides are read in before composition (ablate.run.resume_command), what is typed beside them wins
and is compared by the resume check, and that check never offers to change the model
(ablate.config.identity)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ablate.config.identity import ResumeMismatchError, check_same_run
from ablate.run.resume_command import with_stored_overrides


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
        ["ckpt_path=last"],  # no directory: the latest unfinished run of these overrides (ablate.run.job)
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
