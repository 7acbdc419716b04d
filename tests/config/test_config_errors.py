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
    status = next((tmp_path / "logs" / "runs").glob("*/status.json")).read_text()
    assert '"crashed"' in status and "not divisible" in status


@pytest.mark.integration
def test_deepnorm_requires_deepnet(run_train):
    proc = run_train("norm=deepnorm", check=False)
    assert proc.returncode != 0 and "norm=deepnorm init=deepnet" in proc.stderr
