"""Bad input fails early with a message that names the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import MissingConfigException

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("group", ["pos", "norm", "act", "init", "attn"])
def test_unknown_option_lists_valid_ones(group):
    with (
        initialize_config_dir(config_dir=str(CONF), version_base="1.3"),
        pytest.raises(MissingConfigException) as err,
    ):
        compose(config_name="train", overrides=[f"{group}=nonsense"])
    message = str(err.value)
    for option in (p.stem for p in (CONF / group).glob("*.yaml")):
        assert option in message


def test_unknown_key_names_the_keys_there_and_the_options_that_have_it():
    """Hydra names only the refused key; the hint adds the node's keys and the group's options with it."""
    from hydra.errors import ConfigCompositionException

    from ablate.cli.unknown_key import unknown_key_hint

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        with pytest.raises(ConfigCompositionException) as corpus_key:
            compose(config_name="train", overrides=["data=multi30k", "data.splits=disjoint"])
        with pytest.raises(ConfigCompositionException) as typo:
            compose(config_name="train", overrides=["model.n_layer=2"])
    hint = unknown_key_hint(corpus_key.value, CONF)
    assert hint is not None and "src_lang" in hint and "'data.splits' is a key of data=tinyshakespeare only" in hint
    hint = unknown_key_hint(typo.value, CONF)
    assert hint is not None and "n_layers" in hint and "is a key of" not in hint  # no option of model has it
    assert unknown_key_hint(ValueError("not a key error"), CONF) is None


@pytest.mark.integration
def test_unknown_norm_layer_lists_valid_ones(run_train, tmp_path):
    proc = run_train("norm.layer=batchnorm", check=False)
    assert proc.returncode != 0
    assert "norm.layer='batchnorm'" in proc.stderr and "layernorm, rmsnorm, scalenorm" in proc.stderr


@pytest.mark.slow
def test_invalid_architecture_fails_before_data_or_model(run_train, tmp_path):
    proc = run_train("model.d_model=30", "model.n_heads=4", check=False)
    assert proc.returncode != 0
    assert "model.d_model=30 is not divisible by model.n_heads=4" in proc.stderr
    output = proc.stdout + proc.stderr
    assert "parameters:" not in output  # no model was built ...
    assert "tinyshakespeare" not in output  # ... and no data was read or tokenised
    assert proc.returncode == 2 and "Traceback" not in proc.stderr  # a refusal: its message, no stack
    assert not list((tmp_path / "logs").rglob("status.json"))  # a refused command records no run


@pytest.mark.integration
def test_deepnorm_requires_deepnet(run_train):
    proc = run_train("norm=deepnorm", check=False)
    assert proc.returncode != 0 and "norm=deepnorm init=deepnet" in proc.stderr


@pytest.mark.integration
@pytest.mark.parametrize("sweep", [False, True])
def test_a_mandatory_value_left_unset_is_refused_naming_it(run_train, tmp_path, sweep):
    """``data=text`` needs both of its files: without ``data.val_path`` the command is refused (its
    key, the option that needs it), in a single run and in a sweep, before any job runs."""
    (tmp_path / "train.txt").write_text("to be or not to be\n" * 50)
    train = str(tmp_path / "train.txt")
    args = ["-m", f"data.train_path={train},{train}"] if sweep else [f"data.train_path={train}"]
    proc = run_train("data=text", *args, "model=tiny", check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "no value given for data.val_path (data=text needs it)" in proc.stderr
    assert "Traceback" not in proc.stderr and "MissingMandatoryValue" not in proc.stdout + proc.stderr
    assert not list((tmp_path / "logs").rglob("status.json"))  # no job ran, none recorded
