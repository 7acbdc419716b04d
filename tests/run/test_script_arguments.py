"""The checkpoint scripts' arguments are typed and range-checked before any work (issue 32 item 10):
exit 2 naming the key, not an IndexError in sampling, a prompt printed back as output, a traceback
after decoding, or a MissingMandatoryValue traceback (ablate.config.arguments)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.config.arguments import SCRIPT_ARGUMENTS, check_arguments
from ablate.errors import ConfigError
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    from helpers.checkpoints import lm_checkpoint, translation_checkpoint

    folder = tmp_path_factory.mktemp("args")
    return {"lm": lm_checkpoint(folder / "lm.ckpt"), "translation": translation_checkpoint(folder / "tr.ckpt")}


def _env() -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return env


CASES = [
    ("generate.py", "lm", ["num_samples=0"], "num_samples=0 is invalid: a number of samples (>= 1)"),
    ("generate.py", "lm", ["top_k=0"], "top_k=0 is invalid: null (the whole vocabulary) or a number of tokens"),
    ("generate.py", "lm", ["max_new_tokens=-5"], "max_new_tokens=-5 is invalid: a number of tokens to generate"),
    ("generate.py", "lm", ["temperature=hot"], "temperature='hot' has the wrong type: expected a number"),
    ("translate.py", "translation", ["beam_size=0"], "beam_size=0 is invalid: a beam of at least one hypothesis"),
    ("eval.py", "translation", ["src_file=empty.de"], "src_file='empty.de' is invalid: the file is empty (0 bytes)"),
    (
        "eval.py",
        "translation",
        ["src_file=one.de", "ref_file=empty.en"],
        "ref_file='empty.en' is invalid: the file is empty (0 bytes)",
    ),
    ("eval.py", None, [], "eval.py needs ckpt_path: e.g. python eval.py ckpt_path="),
    ("generate.py", None, [], "generate.py needs ckpt_path"),
]


@pytest.mark.integration
@pytest.mark.parametrize(("script", "task", "args", "message"), CASES, ids=[f"{c[0]} {' '.join(c[2])}" for c in CASES])
def test_a_bad_argument_exits_2_naming_the_key(checkpoints, tmp_path, script, task, args, message):
    (tmp_path / "empty.de").write_text("")
    (tmp_path / "empty.en").write_text("")
    (tmp_path / "one.de").write_text("ein hund\n")
    given = [f"ckpt_path={checkpoints[task]}"] if task else []
    proc = forked_python.run(
        [sys.executable, str(REPO / script), *given, *args],
        cwd=tmp_path,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("*.hyp"))  # nothing was translated first


@pytest.mark.integration
def test_translate_refuses_binary_stdin_naming_the_line(checkpoints, tmp_path):
    proc = subprocess.run(  # a real interpreter: the tests' fork server gives its children /dev/null as stdin
        [sys.executable, str(REPO / "translate.py"), f"ckpt_path={checkpoints['translation']}"],
        cwd=tmp_path,
        env=_env(),
        input=b"ein hund\n\xff\xfe\x00\x81binary\n",
        capture_output=True,
        timeout=HANG_TIMEOUT,
    )
    stderr = proc.stderr.decode()
    assert proc.returncode == 2, stderr[-3000:]
    assert "stdin line 2 is not UTF-8 text" in stderr and "Traceback" not in stderr


def test_every_argument_of_the_scripts_configs_is_declared():
    """conf/<script>.yaml and its declared arguments hold the same keys: a new key is typed too."""
    for name, arguments in SCRIPT_ARGUMENTS.items():
        keys = {str(k) for k in OmegaConf.load(REPO / "conf" / f"{name}.yaml") if k not in ("defaults", "hydra")}
        assert keys == set(arguments), name


def test_arguments_are_checked_by_type_then_range():
    ok = {"ckpt_path": "a.ckpt", "prompt": "x", "max_new_tokens": 5, "top_k": None}
    check_arguments(OmegaConf.create(ok), SCRIPT_ARGUMENTS["generate"], "generate.py")
    for bad, message in [
        ({"max_new_tokens": True}, "max_new_tokens=true has the wrong type: expected an integer"),
        ({"top_k": 2.5}, "top_k=2.5 has the wrong type: expected null or an integer"),
        ({"ckpt_path": "???"}, "generate.py needs ckpt_path"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            check_arguments(OmegaConf.create({**ok, **bad}), SCRIPT_ARGUMENTS["generate"], "generate.py")
