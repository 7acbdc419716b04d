"""Sweep and job directory names hold what varies, and one sweep directory holds one study
(issue 35 item 8, issue 32 item 3): ``ablate.sweepers.job_dirs``, ``ablate.config.resolvers.sweep_dirname``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ablate.config.resolvers import sweep_dirname
from ablate.errors import ConfigError
from ablate.sweepers.job_dirs import SweepCommand, full_name, job_directory, record_command, short_name, told_apart
from helpers.runs import TINY

EXCLUDED = frozenset({"paths.log_dir", "logger", "sweep_name", "tags"})


def command(typed: list[str], swept: set[str], constants: set[str]) -> SweepCommand:
    return SweepCommand(tuple(typed), frozenset(swept), frozenset(constants))


def hold(job_dir: Path, overrides: list[str]) -> None:
    """A job directory as a finished job leaves it (its status.json names its overrides)."""
    job_dir.mkdir(parents=True)
    (job_dir / "status.json").write_text(json.dumps({"status": "completed", "overrides": overrides}))


def test_sweep_directory_shows_the_constants_and_job_names_drop_them():
    name = sweep_dirname(None, ["norm=pre,post", "model.n_layers=2", "trainer.max_steps=100", "tags=[x]"])
    assert name.startswith("norm-n_layers-2.max_steps-100-"), name  # tags: run control, not shown
    assert sweep_dirname(None, ["norm=pre,post", "model.n_layers=4"]) != sweep_dirname(
        None, ["norm=pre,post", "model.n_layers=2"]
    )
    cmd = command(["norm=pre,post", "model.n_layers=2", "seed=1"], {"norm"}, {"model.n_layers=2", "seed=1"})
    assert short_name(["norm=pre", "model.n_layers=2", "seed=1"], cmd, EXCLUDED) == "norm-pre.seed-1"  # seed stays
    assert full_name(["norm=pre", "model.n_layers=2", "seed=1"], EXCLUDED) == "norm-pre.model.n_layers-2.seed-1"


def test_a_sweep_named_before_keeps_its_directory(tmp_path):
    """A directory named without the constants (before they were shown) is found again."""
    overrides = ["norm=pre,post", "model.n_layers=2"]
    old = sweep_dirname(None, overrides).replace("-n_layers=2", "")
    (tmp_path / "multirun" / old).mkdir(parents=True)
    assert sweep_dirname(None, overrides, (), str(tmp_path)) == old


def test_job_directory_of_another_command_is_not_reused(tmp_path):
    """Two commands with other constants in one sweep directory (a size ladder, one size per
    command): the second command's job gets the full name instead of the first one's directory."""
    xs = command(["scale=xs", "act=relu,gelu"], {"act"}, {"scale=xs"})
    m = command(["scale=m", "act=relu,gelu"], {"act"}, {"scale=m"})
    hold(tmp_path / "act-relu", ["scale=xs", "act=relu"])
    assert job_directory(tmp_path, ["scale=xs", "act=relu"], xs, EXCLUDED) == "act-relu"  # its own
    assert job_directory(tmp_path, ["scale=m", "act=relu"], m, EXCLUDED) == "act-relu.scale-m"
    # a run-control key does not make a job another one
    assert job_directory(tmp_path, ["scale=xs", "act=relu", "logger=csv"], xs, EXCLUDED) == "act-relu"


def test_a_job_named_before_resumes_where_it_is(tmp_path):
    cmd = command(["norm=pre,post", "model.n_layers=2"], {"norm"}, {"model.n_layers=2"})
    hold(tmp_path / "model.n_layers=2,norm=pre", ["norm=pre", "model.n_layers=2"])
    assert job_directory(tmp_path, ["norm=pre", "model.n_layers=2"], cmd, EXCLUDED) == "model.n_layers=2,norm=pre"
    assert job_directory(tmp_path, ["norm=post", "model.n_layers=2"], cmd, EXCLUDED) == "norm-post"


def test_a_job_folder_named_with_equals_and_commas_resumes_where_it_is(tmp_path):
    """Folders were named ``norm=pre,seed=1``: a sweep of them resumes and skips in place."""
    cmd = command(["norm=pre,post", "seed=1,2"], {"norm", "seed"}, set())
    hold(tmp_path / "norm=pre,seed=1", ["norm=pre", "seed=1"])
    assert job_directory(tmp_path, ["norm=pre", "seed=1"], cmd, EXCLUDED) == "norm=pre,seed=1"
    assert job_directory(tmp_path, ["norm=pre", "seed=2"], cmd, EXCLUDED) == "norm-pre.seed-2"
    hold(tmp_path / "norm=post,seed=1", ["norm=post", "seed=1", "act=relu"])  # another job's: not taken
    assert job_directory(tmp_path, ["norm=post", "seed=1"], cmd, EXCLUDED) == "norm-post.seed-1"


def test_a_sweep_folder_named_with_equals_and_commas_is_found_again(tmp_path):
    overrides = ["norm=pre,post", "model.n_layers=2"]
    new = sweep_dirname(None, overrides)
    old = "norm-n_layers=2-" + new.rsplit("-", 1)[1]  # as named before: `=` and `,`
    assert new == old.replace("n_layers=2", "n_layers-2")
    (tmp_path / "multirun" / old).mkdir(parents=True)
    assert sweep_dirname(None, overrides, (), str(tmp_path)) == old
    two = ["norm=pre,post", "pos=rope,learned"]
    old_two = sweep_dirname(None, two).replace("norm+pos", "norm,pos")
    (tmp_path / "multirun" / old_two).mkdir(parents=True)
    assert sweep_dirname(None, two, (), str(tmp_path)) == old_two


def test_jobs_whose_names_meet_are_told_apart():
    names = told_apart(["a-x", "a-x", "b"], [frozenset({"a=x y"}), frozenset({"a=x_y"}), frozenset({"b"})])
    assert names[0] != names[1] and names[0].startswith("a-x-") and names[2] == "b"


def test_unrelated_sweeps_may_not_share_a_directory(tmp_path):
    record_command(tmp_path, command(["norm=pre,post"], {"norm"}, set()))
    record_command(tmp_path, command(["norm=pre,post", "seed=1,2"], {"norm", "seed"}, set()))  # more seeds
    record_command(tmp_path, command(["norm=post", "seed=3,4"], {"seed"}, {"norm=post"}))  # one variant's
    before = (tmp_path / "sweep.json").read_bytes()
    with pytest.raises(ConfigError, match=r"holds another sweep \(over norm.*this command sweeps act"):
        record_command(tmp_path, command(["act=relu,gelu"], {"act"}, set()))
    assert (tmp_path / "sweep.json").read_bytes() == before
    assert len(json.loads(before)["commands"]) == 3


def md5s(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.integration
def test_sweep_with_constants_and_a_second_study_through_train_py(run_train, tmp_path):
    """The user's commands: job directories name the swept key only; a second sweep of other axes
    under the same sweep_name is refused before any job, and changes no file of the first."""
    tiny = [o for o in TINY if not o.startswith("trainer.max_steps")] + ["trainer.max_steps=3"]
    run_train("-m", "norm=pre,post", "model.n_layers=1", "sweep_name=shared", "logger=csv", *tiny)
    sweep = tmp_path / "logs" / "multirun" / "shared"
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["norm-post", "norm-pre"]
    before = md5s(sweep)
    proc = run_train("-m", "act=relu,gelu", "sweep_name=shared", "logger=csv", *tiny, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "holds another sweep (over norm" in proc.stderr and "Give it its own sweep_name" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert md5s(sweep) == before  # multirun.yaml included: refused before the sweeper writes anything


def test_a_jobs_run_name_orders_its_axes_like_its_folder():
    """The W&B run name (``=`` and ``,``, read back by the W&B analysis) and the job folder list the
    axes in one order: they differed (``pos=rope,norm=pre,seed=1`` in W&B, ``norm=pre,pos=rope,seed=1`` on disk)."""
    from ablate.tracking.naming import run_name_from_overrides

    job = ["seed=1", "norm=pre", "optim.lr=1e-3", "pos=rope"]
    cmd = command(
        ["norm=pre,post", "pos=rope,learned", "optim.lr=1e-3,2e-3", "seed=1"], {"norm", "pos", "optim.lr"}, {"seed=1"}
    )
    folder = short_name(job, cmd, EXCLUDED)
    run = run_name_from_overrides(job, {"norm", "pos", "optim.lr"})
    assert folder == "pos-rope.norm-pre.optim.lr-1e-3.seed-1"
    assert run == "pos=rope,norm=pre,optim.lr=1e-3,seed=1"
