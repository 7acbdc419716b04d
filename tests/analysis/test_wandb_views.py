"""W&B sweeps that open ready to compare: run names, flat axis keys, tags and job type of a real
(tiny, offline) sweep, and the saved-workspace spec that scripts/wandb_workspace.py builds for it.

One sweep is trained for the whole module: ``experiment=shazeer2020_glu_cpu`` (whose own sweep,
``act`` x 8 and ``seed`` x 2, the command line narrows to ``act=gelu,swiglu seed=1``), tiny, with
``logger=wandb`` offline, in a private HOME without W&B credentials.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ablate.analysis.wandb_views import SweepFacts, facts_from_runs, layer_parts, workspace_spec
from ablate.analysis.wandb_workspace import to_workspace
from ablate.tracking import wandb_reader
from ablate.tracking.wandb_reader import find_run_dirs, read_offline_run
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO, TINY

pytestmark = pytest.mark.slow

EXPERIMENT = "shazeer2020_glu_cpu"


def clean_env(home: Path, data_dir: Path, cache: Path) -> dict[str, str]:
    """The environment of a user without W&B credentials or settings, offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "ABLATE_WANDB_", "MLFLOW_"))}
    return {
        **env,
        "HOME": str(home),
        "NETRC": str(home / ".netrc"),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CONFIG_DIR": str(home / "wandb-config"),
        "HF_HUB_OFFLINE": "1",
        "ABLATE_DATA_DIR": str(data_dir),
        "ABLATE_CACHE_DIR": str(cache),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
    }


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sweep")
    (root / "home").mkdir()
    env = clean_env(root / "home", data_dir, root / "cache")
    sweep_dir = root / "logs" / "multirun" / "glu"
    cmd = [
        sys.executable,
        str(REPO / "train.py"),
        "-m",
        f"experiment={EXPERIMENT}",
        *TINY,
        "act=gelu,swiglu",
        "seed=1",
        "logger=wandb",
        "tags=[smoke]",
        f"paths.log_dir={root / 'logs'}",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    proc = forked_python.run(
        cmd,
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    run_dirs = find_run_dirs(sweep_dir)
    return {
        "root": root,
        "env": env,
        "dir": sweep_dir,
        "run_dirs": run_dirs,
        "runs": {(run := read_offline_run(d))["name"]: run for d in run_dirs},
    }


def run_record(run_dir: Path) -> dict[str, Any]:
    """The ``run`` record of a W&B run file: display name, group, job type, tags."""
    records = wandb_reader._read_records(wandb_reader._run_file(run_dir))
    return next(r["run"] for r in records if r.get("type") == "run")


# ------------------------------------------------------------------ the sweep's runs


def test_runs_are_named_by_the_swept_axis_and_the_seed(sweep: dict[str, Any]) -> None:
    assert sorted(sweep["runs"]) == ["act=gelu,seed=1", "act=swiglu,seed=1"]
    # the same key list as the job directories, without what is not swept
    for run_dir in sweep["run_dirs"]:
        job_dir = run_dir.parents[1]
        name = read_offline_run(run_dir)["name"]
        # the folder writes each `key=value` of the name as `key-value`, joined by dots
        assert all(item.replace("=", "-") in job_dir.name.split(".") for item in name.split(","))


def test_runs_have_flat_axis_keys_tags_and_job_type(sweep: dict[str, Any]) -> None:
    groups = set()
    for name, run in sweep["runs"].items():
        act = name.split(",")[0].split("=")[1]
        config = run["config"]
        assert config["axis_act"] == act  # the swept axis, flat and top-level
        assert (config["axis_pos"], config["axis_norm"], config["axis_init"]) == ("learned", "pre", "gpt2")
        assert config["act"]["name"] == act  # the nested resolved config is still there
        assert config["tags"] == ["smoke"]
        assert "spec" not in config  # Lightning's copy of the model config is not logged again
        assert {"smoke", f"experiment:{EXPERIMENT}", f"act:{act}", "pos:learned", "norm:pre"} <= set(run["tags"])
        groups.add(run["group"])
    assert len(groups) == 1 and None not in groups
    assert {run_record(d)["job_type"] for d in sweep["run_dirs"]} == {"sweep"}


def test_tokens_and_time_are_logged_in_training_and_validation_rows(sweep: dict[str, Any]) -> None:
    run = sweep["runs"]["act=gelu,seed=1"]
    train_rows = [r for r in run["history"] if "train/loss" in r]
    assert [r["train/tokens_seen"] for r in train_rows] == [
        64 * (i + 1) for i in range(len(train_rows))
    ]  # 4 x 16 a step
    times = [r["train/time_s"] for r in train_rows]
    assert times == sorted(times) and times[0] > 0
    val_rows = [r for r in run["history"] if "val/loss" in r]
    assert val_rows and all("train/tokens_seen" in r and "train/time_s" in r for r in val_rows)
    tokens_at = {r["trainer/global_step"]: r["train/tokens_seen"] for r in train_rows}
    assert [r["train/tokens_seen"] for r in val_rows] == [tokens_at[r["trainer/global_step"]] for r in val_rows]
    assert run["summary"]["train/tokens_seen"] == 6 * 64


# -------------------------------------------------------------- the workspace script


@pytest.fixture(scope="module")
def workspace(sweep: dict[str, Any]) -> dict[str, Any]:
    """scripts/wandb_workspace.py run offline on the sweep, with a summary table and one figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep_dir = sweep["dir"]
    (sweep_dir / "summary.csv").write_text("act,seeds,val/loss\ngelu,1,4.05\nswiglu,1,4.06\n")
    (sweep_dir / "figures").mkdir()
    plt.figure(figsize=(2, 2))
    plt.plot([1, 2, 3])
    plt.savefig(sweep_dir / "figures" / "val_curves.png")
    plt.close()
    proc = forked_python.run(
        [sys.executable, str(REPO / "scripts" / "wandb_workspace.py"), str(sweep_dir)],
        cwd=sweep["root"],
        env=sweep["env"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    spec = json.loads((sweep_dir / "wandb_workspace.json").read_text())
    return {"spec": spec, "stdout": proc.stdout, "sections": {s["name"]: s for s in spec["sections"]}}


def test_spec_has_the_expected_sections(workspace: dict[str, Any], sweep: dict[str, Any]) -> None:
    spec = workspace["spec"]
    assert list(workspace["sections"]) == [
        "Compare by act",
        "LR and warmup",
        "Gradient norms per layer",
        "Residual stream RMS",
        "Throughput",
        "Analysis",
    ]
    assert spec["group"] == next(iter(sweep["runs"].values()))["group"]  # the runs' group, read from them
    assert spec["axes"] == {"act": "axis_act"}
    assert spec["x_axis"] == "trainer/global_step"
    assert "config:axis_act" in spec["pinned_columns"]


def test_comparison_panels_are_grouped_by_the_axis(workspace: dict[str, Any]) -> None:
    panels = workspace["sections"]["Compare by act"]["panels"]
    assert {p["title"] for p in panels} >= {"val/loss by act", "val/ppl by act", "train/loss by act"}
    assert all(p["groupby"] == "axis_act" and p["group_agg"] == "mean" for p in panels)
    assert any(p["x"] == "train/tokens_seen" for p in panels)
    warmup = {p["title"]: p for p in workspace["sections"]["LR and warmup"]["panels"]}
    assert warmup["train/lr"]["y"] == ["train/lr"]
    assert warmup["train/loss during warmup"]["range_x"] == [0, 3 * 2]  # 3 x optim.warmup_steps (TINY's)


def test_layer_panels_match_every_logged_layer_metric(workspace: dict[str, Any], sweep: dict[str, Any]) -> None:
    history = sweep["runs"]["act=gelu,seed=1"]["history"]
    logged = {k for row in history for k in row}
    grad_layers = {k for k in logged if re.match(r"^grad_norm/layer_\d+/", k)}
    assert len(grad_layers) == 4 * 4  # 4 layers (the experiment's model) x attn, attn_norm, ffn, ffn_norm
    regexes = [
        p["metric_regex"]
        for p in workspace["sections"]["Gradient norms per layer"]["panels"]
        if "metric_regex" in p and "layer_" in p["metric_regex"]
    ]
    assert r"^grad_norm/layer_\d+/attn$" in regexes
    for metric in grad_layers:  # one panel per layer group: every per-layer metric in exactly one
        assert sum(bool(re.match(rx, metric)) for rx in regexes) == 1, metric
    [resid] = [p for p in workspace["sections"]["Residual stream RMS"]["panels"]]
    assert resid["metric_regex"] == "^resid_rms/.*$"
    assert all(re.match(resid["metric_regex"], k) for k in logged if k.startswith("resid_rms/"))
    throughput = {p["title"] for p in workspace["sections"]["Throughput"]["panels"]}
    assert {"train/tokens_per_sec", "train/mfu", "train/tokens_seen", "train/time_s"} <= throughput
    assert all(metric in logged for metric in throughput if "/" in metric and " " not in metric)


def test_summary_and_figures_go_to_an_analysis_run_in_the_group(
    workspace: dict[str, Any], sweep: dict[str, Any]
) -> None:
    panels = workspace["sections"]["Analysis"]["panels"]
    assert {"type": "table", "title": "summary.csv", "table": "summary"} in panels
    assert {"type": "media", "title": "figures", "keys": ["figures/val_curves"]} in panels
    [run_dir] = find_run_dirs(sweep["dir"] / "analysis")
    record, run = run_record(run_dir), read_offline_run(run_dir)
    assert record["job_type"] == "analysis"
    assert run["group"] == workspace["spec"]["group"]
    [row] = run["history"]
    assert row["summary._type"] == "table-file" and row["summary.nrows"] == 2
    assert row["figures/val_curves._type"] == "image-file"
    out = workspace["stdout"]
    assert "W&B is offline" in out and f"--push {sweep['dir'] / 'wandb_workspace.json'}" in out
    assert f"wandb sync {run_dir}" in out


def test_push_refuses_offline(workspace: dict[str, Any], sweep: dict[str, Any]) -> None:
    spec_file = sweep["dir"] / "wandb_workspace.json"
    proc = forked_python.run(
        [sys.executable, str(REPO / "scripts" / "wandb_workspace.py"), "--push", str(spec_file)],
        env=sweep["env"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 1 and "W&B is offline" in proc.stderr and "--push" in proc.stderr


def test_spec_converts_to_a_wandb_workspace(workspace: dict[str, Any]) -> None:
    pytest.importorskip("wandb_workspaces")
    model = to_workspace(workspace["spec"], "someone")._to_model().model_dump(by_alias=True, exclude_none=True)
    sections = model["spec"]["section"]["panelBankConfig"]["sections"]
    assert [s["name"] for s in sections] == list(workspace["sections"])
    compare = sections[0]["panels"][0]["config"]
    assert compare["groupBy"] == "axis_act.value" and compare["xAxis"] == "trainer/global_step"
    regex_panels = [p["config"] for p in sections[2]["panels"] if p["config"].get("useMetricRegex")]
    assert any(c["metricRegex"] == r"^grad_norm/layer_\d+/attn$" for c in regex_panels)
    [runset] = model["spec"]["section"]["runSets"]
    assert runset["filters"]["filters"][0]["value"] == workspace["spec"]["group"]


# -------------------------------------------------------------------- spec units


def test_translation_spec_has_bleu_and_per_stack_panels() -> None:
    metrics = {
        "grad_norm/enc_layer_00/attn",
        "grad_norm/dec_layer_00/cross_attn",
        "grad_norm/dec_layer_01/ffn",
        "resid_rms/enc_layer_00",
        "resid_rms/dec_layer_00",
        "val/bleu",
    }
    facts = SweepFacts(group="g", axes={"norm": "axis_norm"}, task="translation", metrics=metrics, n_runs=30)
    spec = workspace_spec(facts)
    compare = [p["title"] for p in spec["sections"][0]["panels"]]
    assert "val/bleu by norm" in compare and "val/ppl by norm" not in compare
    assert layer_parts(metrics) == [("enc_", "attn"), ("dec_", "cross_attn"), ("dec_", "ffn")]
    resid = [p["metric_regex"] for p in spec["sections"][3]["panels"]]
    assert resid == ["^resid_rms/.*$", r"^resid_rms/dec_layer_\d+$", r"^resid_rms/enc_layer_\d+$"]
    assert spec["max_runs"] == 30 and "Analysis" not in [s["name"] for s in spec["sections"]]
    assert layer_parts(set(), "translation")[-1] == ("dec_", "cross_attn")  # nothing logged yet: the standard parts


def test_axes_from_the_runs_of_a_group() -> None:
    runs = [
        ({"axis_act": "gelu", "axis_pos": "rope", "axis_lr": 0.001, "optim": {"warmup_steps": 5}}, {"val/loss"}),
        ({"axis_act": "relu", "axis_pos": "rope", "axis_lr": 0.002}, {"val/loss", "grad_norm/layer_00/ffn"}),
    ]
    facts = facts_from_runs("g", "ablate", None, runs)
    assert facts.axes == {"act": "axis_act", "lr": "axis_lr"}  # pos is the same in every run: no axis
    assert facts.warmup_steps == 5 and facts.task == "lm" and facts.n_runs == 2
