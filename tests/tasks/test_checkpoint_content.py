"""A tampered checkpoint is refused before loading, naming the file and the first mismatch with the
model its stored config builds (ablate.tasks.checkpoints), never a raw torch error (issue 32 item 9);
a file that is not an ablate checkpoint is not averaged (item 13)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.checkpoints.files import CheckpointError
from ablate.tasks.checkpoints import inspect_checked, load_task_checkpoint
from helpers import forked_python
from helpers.checkpoints import lm_checkpoint, rewrite, translation_checkpoint
from helpers.runs import HANG_TIMEOUT, REPO

pytestmark = pytest.mark.usefixtures("one_thread")

QKV = "model.blocks.0.attn.sublayer.qkv.weight"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tampered")
    good = lm_checkpoint(folder / "good.ckpt")

    def nan(c: dict) -> None:
        c["state_dict"]["model.tok_emb.weight"][3, 1] = float("nan")

    def task_changed(c: dict) -> None:
        c["task"] = "translation"

    return {
        "good": good,
        "translation": translation_checkpoint(folder / "translation.ckpt"),
        "shape": rewrite(good, folder / "shape.ckpt", lambda c: c["state_dict"].__setitem__(QKV, torch.zeros(3, 32))),
        "removed": rewrite(good, folder / "removed.ckpt", lambda c: c["state_dict"].pop(QKV)),
        "extra": rewrite(good, folder / "extra.ckpt", lambda c: c["state_dict"].__setitem__("model.x", torch.ones(1))),
        "nan": rewrite(good, folder / "nan.ckpt", nan),
        "task": rewrite(good, folder / "task.ckpt", task_changed),
        "spec": rewrite(good, folder / "spec.ckpt", lambda c: c["hyper_parameters"]["spec"].__setitem__("n_heads", 5)),
    }


TAMPERED = {
    "shape": rf"{QKV} has shape \(3, 32\), but the model its spec describes has \(96, 32\)",
    "removed": rf"the weight {QKV} \(96, 32\) is missing",
    "extra": r"model\.x is not a weight of the model its spec describes",
    "nan": r"model\.tok_emb\.weight holds 1 NaN/inf value\(s\) of \d+",
    "task": r"does not build a task=translation model \(ValueError: an encoder-decoder needs model\.encoder_layers > 0\)",
    "spec": r"does not build a task=lm model .*not divisible by model\.n_heads=5",
}


@pytest.mark.parametrize("kind", TAMPERED)
def test_a_tampered_checkpoint_is_refused_naming_the_file_and_the_mismatch(checkpoints, kind):
    path = checkpoints[kind]
    with pytest.raises(CheckpointError, match=TAMPERED[kind]) as err:
        inspect_checked(path)
    assert str(err.value).startswith(str(path))
    with pytest.raises(SystemExit, match=TAMPERED[kind]):  # what every script loads through
        load_task_checkpoint(path)


def test_intact_checkpoints_of_both_tasks_load(checkpoints):
    for name in ("good", "translation"):
        inspect_checked(checkpoints[name])
    assert load_task_checkpoint(checkpoints["good"]).spec.n_layers == 2


def test_a_file_that_is_not_an_ablate_checkpoint_is_not_averaged(tmp_path):
    from ablate.callbacks.averaging import AveragingError, average_checkpoints

    paths = []
    for name in ("a.pt", "b.pt"):  # a state_dict of someone else's model
        torch.save({"state_dict": {"w": torch.ones(2)}}, tmp_path / name)
        paths.append(tmp_path / name)
    with pytest.raises(AveragingError, match=r"a\.pt is not an ablate checkpoint \(no hyper_parameters\.spec"):
        average_checkpoints(paths)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("script", "kind", "args"),
    [
        ("generate.py", "nan", ["max_new_tokens=5"]),
        ("generate.py", "shape", ["max_new_tokens=5"]),
        ("eval.py", "task", []),
        ("eval.py", "removed", ["text_file=text.txt"]),
        ("scripts/export_hf.py", "shape", ["out=hf"]),
    ],
)
def test_the_scripts_refuse_a_tampered_checkpoint_with_exit_2(checkpoints, tmp_path, script, kind, args):
    (tmp_path / "text.txt").write_text("ROMEO: But soft, what light through yonder window breaks?\n" * 4)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    proc = forked_python.run(
        [sys.executable, str(REPO / script), f"ckpt_path={checkpoints[kind]}", *args],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert str(checkpoints[kind]) in proc.stderr and "Traceback" not in proc.stderr
    assert TAMPERED[kind].split(" ")[0].replace("\\", "") in proc.stderr


def test_a_checkpoint_of_the_other_task_names_the_scripts_that_take_it(checkpoints):
    """Issue 32 item 13: an LM checkpoint given to translate.py points at eval.py too (it evaluates both tasks)."""
    from ablate.tasks.checkpoints import require_checkpoint_task

    with pytest.raises(
        SystemExit, match=r"translate\.py takes task=translation checkpoints\. Use eval\.py or generate\.py"
    ):
        require_checkpoint_task(checkpoints["good"], "translation", "translate.py")
    with pytest.raises(SystemExit, match=r"generate\.py takes task=lm checkpoints\. Use eval\.py or translate\.py"):
        require_checkpoint_task(checkpoints["translation"], "lm", "generate.py")
