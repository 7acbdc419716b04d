"""The composed config is typed once (ablate.run.config.RunConfig): each number is refused by the
rule declared beside its key, naming the key and the valid range, before anything runs (issue 41
item 4: each value here reached the code unchecked: a TypeError, numpy's ValueError, Lightning's
MisconfigurationException, a run "diverged at step 1", a default silently used instead)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from ablate.errors import ConfigError
from ablate.run.config import ModelConfig, RunConfig
from helpers.runs import REPO

BAD_VALUES = [
    (["model.n_layers=0"], "model.n_layers=0 is invalid: a positive number of layers"),
    (["seed=-1"], "seed=-1 is invalid: an integer in [0, 4294967295]"),
    (["seed=99999999999999999999"], "seed=99999999999999999999 is invalid: an integer in [0, 4294967295]"),
    (["+trainer.max_time=garbage"], "trainer.max_time='garbage' is invalid: null, a duration DD:HH:MM:SS"),
    (["callbacks.divergence.max_ratio=-1"], "callbacks.divergence.max_ratio=-1 is invalid: null or 0"),
    (["model.max_len=0"], "model.max_len=0 is invalid: null (the longest data length) or a positive number"),
    (["model.d_ff=0"], "model.d_ff=0 is invalid: null (4 x model.d_model) or a positive width"),
    # accepted as a string by Lightning's hint, then int('abc') crashed the job with a traceback
    (["trainer.devices=abc"], "trainer.devices='abc' is invalid: a positive number of devices, -1 or \"auto\""),
    (["trainer.devices=0"], "trainer.devices=0 is invalid: a positive number of devices"),
    (["trainer.devices=[]"], "trainer.devices=[] is invalid: a positive number of devices"),
]


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


@pytest.mark.parametrize(("overrides", "message"), BAD_VALUES, ids=[" ".join(o) for o, _ in BAD_VALUES])
def test_a_bad_number_is_refused_by_the_rule_beside_its_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        RunConfig.from_hydra(composed(*overrides), overrides)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["+trainer.max_time=00:12:00:00"],
        ["+trainer.max_time={hours:2}"],
        ["callbacks.divergence.max_ratio=null"],
        ["callbacks.divergence.max_ratio=0"],
        ["seed=0"],
        ["seed=4294967295"],
        ["trainer.devices=1"],
        ["trainer.devices=auto"],
        ["trainer.devices=-1"],
        ["trainer.devices='0'"],
    ],
)
def test_the_valid_values_next_to_them_are_accepted(overrides: list[str]) -> None:
    RunConfig.from_hydra(composed(*overrides), overrides)


def test_a_section_is_valid_however_it_is_made() -> None:
    """The rules are the dataclass's own (__post_init__): not only the config's conversion applies them."""
    assert ModelConfig(n_layers=2, d_ff=None).d_ff is None
    with pytest.raises(ConfigError, match="model.d_ff=0 is invalid"):
        ModelConfig(n_layers=2, d_ff=0)


def test_the_typed_config_is_what_the_run_reads() -> None:
    cfg = RunConfig.from_hydra(composed("model=tiny", "optim.lr=0.01", "trainer.max_steps=100"))
    assert (cfg.model.n_layers, cfg.optim.lr, cfg.trainer["max_steps"]) == (2, 0.01, 100)
    assert cfg.trainer["val_check_interval"] == 100 and cfg.derived.warnings  # fitted to the run's length, and said
    assert cfg.derived.record["trainer"]["val_check_interval"] == 100  # what the run records is what it uses
    spec = cfg.model_spec(vocab_size=65, max_len=cfg.eval_max_len)
    assert (spec.n_layers, spec.d_ff, spec.max_len) == (2, 128, 128)


def test_a_table_of_an_experiment_is_kept_and_an_appended_top_level_key_refused() -> None:
    """An experiment's own top-level table (depth_stability's init_by_norm, read by its
    interpolations) is not a key the command line appended: kept; ``+foo=1`` is refused by name."""
    RunConfig.from_hydra(composed("experiment=depth_stability_cpu"), ["experiment=depth_stability_cpu"])
    with pytest.raises(ConfigError, match="foo is not a key of the top level"):
        RunConfig.from_hydra(composed("+foo=1"), ["+foo=1"])


@pytest.mark.integration
@pytest.mark.parametrize(
    "args",
    [
        ["model.n_layers=0"],
        ["seed=-1"],
        ["+trainer.max_time=garbage"],
        ["-m", "seed=1,-1"],  # a sweep: the bad job refuses the whole sweep, before any job
        ["-m", "callbacks.divergence.max_ratio=10,-1"],
    ],
    ids=lambda a: " ".join(a),
)
def test_train_py_refuses_them_with_exit_2_and_no_run_folder(run_train, tmp_path, args: list[str]) -> None:
    proc = run_train(*args, "logger=csv", "debug=fdr", check=False)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "is invalid" in proc.stderr and "Traceback" not in proc.stderr
    assert not list((tmp_path / "logs").rglob("status.json"))  # nothing ran


def test_a_checkpoint_from_before_an_architecture_key_or_axis_is_the_same_run() -> None:
    """Every norm option carries every layer's keys (null unless set), and a new axis a selector:
    a checkpoint written before either resumes at those defaults, and at no other value."""
    from ablate.config.identity import identity_differences, run_identity

    current = run_identity(composed())
    assert current["norm.alpha_init"] is None and current["pos.name"] == "learned"
    before = {k: v for k, v in current.items() if k not in ("norm.alpha_init", "pos.name")}
    assert identity_differences(before, current) == {}
    assert identity_differences(before, run_identity(composed("pos=rope"))) == {
        "pos.base": ("<unset>", 10000.0),
        "pos.fraction": ("<unset>", 1.0),
        "pos.name": ("<unset>", "rope"),
    }
    assert identity_differences(before, run_identity(composed("norm.layer=dyt", "norm.alpha_init=0.3")))
