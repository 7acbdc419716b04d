"""``debug=smoke`` (conf/debug/smoke.yaml), what the acceptance tier appends to the README's train.py
commands, changes only the amount of work: never the paths, output folders, loggers, checkpoints or
console of the command it is appended to (unit tier: composition only)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ablate.run.plan import check_config

CONF = Path(__file__).resolve().parents[2] / "conf"

# everything debug=smoke may change (with tune=lr: the grid and seeds; task=lm: the batch)
ALLOWED = {
    "trainer.max_steps",
    "trainer.max_time",
    "trainer.val_check_interval",
    "trainer.limit_val_batches",
    "trainer.limit_test_batches",
    "optim.warmup_steps",
    "callbacks.throughput.peak_flops",
    "data.batch_size",
    "data.micro_batch_size",
    "hydra.sweeper.num_lrs",
    "hydra.sweeper.seeds",
    "hydra.sweeper.params.optim.lr",
    "hydra.sweeper.params.seed",
    # the record of the command line and of the chosen options
    "hydra.overrides.task",
    "hydra.runtime.choices.debug",
    "hydra.runtime.choices.debug/task@_global_",
    "hydra.runtime.choices.debug/tune@_global_",
    # a sweep job's directory is named by its overrides, debug=smoke included: on purpose, so that a smoke
    # sweep and the real one never share a directory (a re-run would skip the real jobs as completed)
    "hydra.job.override_dirname",
}


def flat(node, prefix: str = "") -> dict[str, object]:
    if isinstance(node, dict):
        out: dict[str, object] = {}
        for key, value in node.items():
            out.update(flat(value, f"{prefix}{key}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: node}


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["task=translation"],
        ["experiment=nanogpt_shakespeare_char", "logger=csv"],
        ["experiment=shazeer2020_glu_ladder_cpu", "tune=lr"],
        ["experiment=depth_stability_cpu", "tune=lr", "model.n_layers=12", "hydra.sweep.dir=logs/multirun/depth12"],
    ],
)
def test_debug_smoke_changes_only_the_amount_of_work(command: list[str]) -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        plain = compose(config_name="train", overrides=command, return_hydra_config=True)
        smoke = compose(config_name="train", overrides=[*command, "debug=smoke"], return_hydra_config=True)
    a, b = (flat(OmegaConf.to_container(c, resolve=False)) for c in (plain, smoke))
    changed = {k for k in a.keys() | b.keys() if a.get(k, "<absent>") != b.get(k, "<absent>")}
    assert changed <= ALLOWED, sorted(changed - ALLOWED)
    assert b["trainer.max_steps"] == 4 and b["print_config"] == a["print_config"]
    if "tune=lr" in command:
        # a grid or seeds typed on the command line win over these at sweep time
        assert b["hydra.sweeper.num_lrs"] == 2 and b["hydra.sweeper.params.optim.lr"].count(",") == 1
        assert b["hydra.sweeper.seeds"] == [1, 2] and b["hydra.sweeper.params.seed"] == "1,2"
    else:
        check_config(smoke)
