"""Issue 41 items 1, 2, 3, 6 and 7 on real runs (the fourth hostile round): a resume checks the data
it trains on (each split's content and the tokenizer, recorded in the checkpoint) and eval.py the
corpus it evaluates; overwrite=true writes through no link out of the run; a checkpoint whose
training state was replaced is refused by name; eval.py writes beside its checkpoint; odd
places (a run name too long, a FIFO or a directory as the text) are named, exit code 2."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.checkpoints import rewrite
from helpers.hostile_runs import TINY_RUN, command, refused, text

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """A finished tiny run on two text files, and where it lives."""
    where = tmp_path_factory.mktemp("trained")
    (where / "T.txt").write_text(text(400, 0))
    (where / "V.txt").write_text(text(60, 1))
    data = [f"data.train_path={where / 'T.txt'}", f"data.val_path={where / 'V.txt'}"]
    proc = command("train.py", [*TINY_RUN, *data, f"hydra.run.dir={where / 'run'}"], where)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"where": where, "run": where / "run", "data": data}  # type: ignore[dict-item]


@pytest.fixture
def edited(trained):
    """The corpus files as the test leaves them, restored afterwards (the run stays the run)."""
    files = [trained["where"] / name for name in ("T.txt", "V.txt")]
    before = [f.read_bytes() for f in files]
    yield files
    for f, content in zip(files, before):
        f.write_bytes(content)


def resume(trained, *extra: str) -> subprocess.CompletedProcess:
    """Train the run 3 steps longer (the same command, allowed to train longer), on whatever the files hold now."""
    args = [*TINY_RUN, *trained["data"], f"hydra.run.dir={trained['run']}", "ckpt_path=last", "trainer.max_steps=9"]
    allow = ",".join(["trainer.max_steps", *extra])
    return command("train.py", [*args, f"+resume_allow_changes=[{allow}]"], trained["where"])


def test_a_resume_on_replaced_text_is_refused_with_both_fingerprints(trained, edited):
    train, _ = edited
    train.write_text(text(400, 7))  # other text, the same characters
    last = trained["run"] / "checkpoints" / "last.ckpt"
    before = last.read_bytes()
    refused(
        resume(trained),
        "refusing to resume",
        "data.content.train: checkpoint ",
        ", now ",
        "'+resume_allow_changes=[data.content]'",
    )
    assert last.read_bytes() == before  # nothing was trained


def test_a_resume_with_another_char_map_is_refused_and_allowed_by_name(trained, edited, tmp_path):
    for f in edited:  # `e` replaced by `#`: the same vocabulary size, another char-to-id map
        f.write_text(f.read_text().replace("e", "#"))
    refused(resume(trained), "data.vocabulary: checkpoint char tokenizer of ", "[data.content,data.vocabulary]")
    run = tmp_path / "copy"
    shutil.copytree(trained["run"], run)  # the allowed resume trains: on a copy of the run
    trained_copy = {**trained, "run": run}
    proc = resume(trained_copy, "data.content", "data.vocabulary")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on changed data, as allowed: " in proc.stdout + proc.stderr


def test_eval_refuses_a_corpus_that_changed_since_the_checkpoint(trained, edited):
    ckpt = trained["run"] / "checkpoints" / "last.ckpt"
    proc = command("eval.py", [f"ckpt_path={ckpt}", "split=val"], trained["where"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    edited[1].write_text(text(60, 9))  # the validation text replaced
    refused(
        command("eval.py", [f"ckpt_path={ckpt}", "split=val"], trained["where"]),
        "the val split of text is not the text this checkpoint recorded",
        "text_file=",
    )


def test_eval_writes_beside_its_checkpoint(trained):
    folder = trained["run"] / "checkpoints"
    for name in ("best", "last"):
        proc = command("eval.py", [f"ckpt_path={folder / name}.ckpt"], trained["where"])
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (folder / f"{name}.test_units@test.npz").is_file()
    assert not (trained["run"] / "eval").exists()


def test_overwrite_through_a_linked_checkpoint_folder_is_refused(trained, tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside"
    shutil.copytree(trained["run"], run)
    shutil.move(run / "checkpoints", outside)
    (run / "checkpoints").symlink_to(outside)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    proc = command("train.py", [*TINY_RUN, *trained["data"], f"hydra.run.dir={run}", "overwrite=true"], tmp_path)
    refused(proc, f"{run / 'checkpoints'} is a symbolic link to {outside}, outside {run}: refused")
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before  # best.ckpt and last.ckpt untouched


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("replaced", "has no best_model_score; not resumed"),
        ("removed", "holds no ResumeState"),
        ("lightning", "says Lightning 0.5.0 wrote it"),
    ],
)
def test_a_checkpoint_whose_training_state_was_altered_is_not_resumed(trained, tmp_path, damage, message):
    def change(c: dict) -> None:
        if damage == "lightning":
            c["pytorch-lightning_version"] = "0.5.0"
            return
        key = next(k for k in c["callbacks"] if k.startswith("ModelCheckpoint" if damage == "replaced" else "Resume"))
        if damage == "replaced":
            c["callbacks"][key] = {"x": 1}
        else:
            del c["callbacks"][key]

    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    rewrite(run / "checkpoints" / "last.ckpt", run / "checkpoints" / "last.ckpt", change)
    args = [*TINY_RUN, *trained["data"], f"hydra.run.dir={run}", "ckpt_path=last", "trainer.max_steps=9"]
    proc = command("train.py", [*args, "+resume_allow_changes=[trainer.max_steps]"], tmp_path)
    refused(proc, message)
    assert "KeyError" not in proc.stderr and "predates the resume check" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_a_directory_as_the_text_is_named_and_never_waited_on(trained, tmp_path, kind):
    odd = tmp_path / "odd"
    if kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.mkdir()
    data = [f"data.train_path={odd}", f"data.val_path={trained['where'] / 'V.txt'}"]
    proc = command("train.py", [*TINY_RUN, *data, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    refused(proc, f"data.train_path: {odd} is {'a named pipe (FIFO)' if kind == 'fifo' else 'a directory'}")


def test_a_run_directory_name_too_long_is_refused_before_hydra(trained, tmp_path):
    proc = command("train.py", [*TINY_RUN, *trained["data"], f"hydra.run.dir={tmp_path / ('x' * 300)}"], tmp_path)
    refused(proc, "is 300 bytes long, more than the 255 a file name may have")
