"""A command line is refused before torch is imported (issue 42 item 6): every key/value refusal of
the typed config (:meth:`ablate.run.config.RunConfig.from_hydra`), not only a misspelt key, runs on
the composition and the targets' declared keys (:mod:`ablate.config.targets`), and so does the
typing of an accepted config. A fresh interpreter (not the tests' fork server, which has torch
loaded) reports what it imported."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers.runs import REPO, run_python

HEAVY = ("torch", "lightning", "pytorch_lightning", "torchmetrics", "transformers")

# (overrides, what the refusal says): one per kind of check the typed config makes
REFUSED = [
    (["trainer.max_step=10"], "did you mean trainer.max_steps?"),  # a misspelt key: the composition's refusal
    (["model.n_layers=0"], "model.n_layers=0 is invalid: a positive number of layers"),
    (["+model.foo=1"], "model.foo is not a key of model"),
    (["seed=-1"], "seed=-1 is invalid"),
    (["+trainer.max_time=garbage"], "trainer.max_time="),  # a key of Lightning's Trainer, declared
    (["trainer.precision=7"], "trainer.precision=7 is invalid: expected null or one of 64, 32, 16"),
    (["callbacks.divergence.max_ratio=-1"], "callbacks.divergence.max_ratio=-1 is invalid"),  # the class's rule
    (["data.splits=foo"], "data.splits='foo' is invalid: one of nanogpt, disjoint, blocks"),  # the class's choices
    (["optim.lr=-1e-3"], "optim.lr=-0.001 is invalid: a positive learning rate"),
    (["optim.momentum=0.9"], "optim.momentum=0.9 does not apply to optim.name=adamw"),
    (["optim.schedule=foo"], "optim.schedule='foo' is invalid: one of cosine, linear, inverse_sqrt, constant"),
    (["pos=sinusoidal", "pos.fraction=0.5"], "pos.fraction is not a key of pos"),
    (["model.d_model=true"], "model.d_model=true has the wrong type: expected an integer"),
    (["norm=deepnorm"], "use them as a pair: norm=deepnorm init=deepnet"),  # an option's own check of the spec
    (["pos=rope", "pos.fraction=0.3"], "which must be a positive even integer"),
    (["-m", "model.n_layers=2,0"], "the sweep's job 'model.n_layers=0' is invalid"),  # every job of a sweep
    (["task=classify", "data=majority", "model.tie_embeddings=true"], "task=classify has none"),  # the task's check
    (["task=translation", "data=multi30k", "model=translation_small", "decode.beam_size=x"], "decode.beam_size="),
]


def _python(tmp_path: Path, code: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``code`` in a fresh interpreter; the heavy modules it had imported when it ended."""
    probe = (
        "import sys, json\n"
        "try:\n" + "".join(f"    {line}\n" for line in code.splitlines()) + "finally:\n"
        f"    heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "    print(json.dumps(heavy), flush=True)\n"
    )
    proc = run_python(tmp_path, "-c", probe)
    return proc, json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_refused_without_torch(tmp_path: Path, script: str, arguments: list[str], message: str) -> None:
    """``python <script> <arguments>`` exits 2 saying ``message``, with no heavy module imported."""
    code = (
        "import runpy\n"
        f"sys.argv = [{str(REPO / script)!r}, *{arguments!r}]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    proc, heavy = _python(tmp_path, code)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert heavy == [], f"imported before the refusal: {heavy[:5]}"


@pytest.mark.integration
@pytest.mark.parametrize(("overrides", "message"), REFUSED, ids=[" ".join(o) for o, _ in REFUSED])
def test_a_refused_value_imports_no_torch(tmp_path: Path, overrides: list[str], message: str) -> None:
    _assert_refused_without_torch(tmp_path, "train.py", overrides, message)


@pytest.mark.integration
@pytest.mark.parametrize(
    "overrides",
    [[], ["task=translation", "data=multi30k", "model=translation_small"], ["task=classify", "data=majority"]],
    ids=["lm", "translation", "classify"],
)
def test_typing_an_accepted_config_imports_no_torch(tmp_path: Path, overrides: list[str]) -> None:
    """The whole typed config of each task, every target's keys and rules included, without torch."""
    code = (
        "from ablate.cli import _compose\n"
        "from ablate.run.config import RunConfig\n"
        f"config = RunConfig.from_hydra(_compose('train', {overrides!r}, runtime=True), {overrides!r})\n"
        "print(sorted(config.callbacks), flush=True)\n"
    )
    proc, heavy = _python(tmp_path, code)
    assert proc.returncode == 0 and "divergence" in proc.stdout, proc.stderr
    assert heavy == [], f"imported to type the config: {heavy[:5]}"


@pytest.mark.integration
@pytest.mark.parametrize("script", ["eval.py", "generate.py"])
@pytest.mark.parametrize(("path", "message"), [("no_such.ckpt", "no such checkpoint file"), (".", "is a directory")])
def test_a_checkpoint_script_refuses_a_wrong_path_without_torch(
    tmp_path: Path, script: str, path: str, message: str
) -> None:
    """eval.py and generate.py: a mistyped ``ckpt_path`` (or a folder) is refused before the stack loads."""
    _assert_refused_without_torch(tmp_path, script, [f"ckpt_path={path}"], message)
