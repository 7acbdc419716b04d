"""Every config group refuses a key no code reads, naming it and the valid keys (ablate.run.config)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ablate.config.types import target_keys
from ablate.errors import ConfigError
from ablate.run.config import RunConfig
from ablate.run.plan import check_config

REPO = Path(__file__).resolve().parents[2]


def composed(*overrides: str):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["+model.foo=1"], "model.foo is not a key of model"),
        (["+optim.foo=1"], "optim.foo is not a key of optim"),
        (["+eval.foo=1"], "eval.foo is not a key of eval"),
        (["+task.foo=1"], "task.foo is not a key of task; valid keys: name"),
        (
            ["task=translation", "+decode.beam_sizee=3"],
            "decode.beam_sizee is not a key of decode (did you mean decode.beam_size?)",
        ),
        (["+logger.wandb.projet=x"], "did you mean logger.wandb.project?"),
        (["+data.bogus=1"], "data.bogus is not a key of data; valid keys: batch_size"),
        (["+trainer.max_step=3"], "did you mean trainer.max_steps?"),
        (["+callbacks.divergence.max_ration=3"], "did you mean callbacks.divergence.max_ratio?"),
        (["+runtime.flush_denormals=false"], "did you mean runtime.flush_denormal?"),
    ],
)
def test_an_unknown_key_in_any_group_is_refused_by_name(overrides, message):
    with pytest.raises(ConfigError) as err:
        check_config(composed(*overrides))  # before any data is read: train.py's first check
    assert message in str(err.value)


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["task=translation"],
        ["+trainer.limit_test_batches=2"],
        ["data=text", "data.train_path=a", "data.val_path=b"],
        ["logger=[wandb,tensorboard,mlflow]"],
        ["task=translation", "task.val_bleu_samples=10"],
    ],
)
def test_the_keys_the_code_reads_are_accepted(overrides):
    RunConfig.from_hydra(composed(*overrides))


def test_target_keys_follow_kwargs_to_the_base_class():
    keys = target_keys("ablate.data.lm_data.TextFiles")  # TextFiles(train_path, ..., **kwargs) -> LMDataModule
    assert keys is not None and {"train_path", "val_path", "seq_len", "batch_size"} <= keys


@pytest.mark.parametrize("override", ["debug=smok", "tune=lrr", "scale=xxl", "hparams_search=optuna"])
def test_a_misspelt_preset_is_refused_not_ignored(override):
    """scale/tune/hparams_search/debug default to none; as `optional` groups a misspelt option was
    silently skipped (debug=smok ran the whole experiment)."""
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match="Could not find"):
        composed(override)
