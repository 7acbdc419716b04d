"""Loggers: W&B mode decision, run naming, offline runs read back, multirun safety.

Every test runs with a private HOME/NETRC/W&B config dir and no W&B env vars,
so the developer's real credentials and settings are never read or written.
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf

from ablate.tracking import loggers as tracking_loggers
from ablate.tracking import naming, wandb_mode, wandb_reader
from ablate.tracking import options as logger_options
from ablate.tracking.loggers import build_loggers
from ablate.tracking.naming import multirun_group, run_name_from_overrides
from ablate.tracking.wandb_mode import decide_wandb_mode
from ablate.tracking.wandb_reader import find_run_dirs, read_offline_run
from ablate.tracking.wandb_run import AblateWandbLogger, finish_wandb
from helpers.runs import HANG_TIMEOUT

REPO = Path(__file__).resolve().parents[2]
LOGGER_CONF = REPO / "conf" / "logger"
FAKE_KEY = "0123456789abcdef0123456789abcdef01234567"  # 40 chars, the shape wandb expects


# ----------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def isolated_wandb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No W&B env, no proxies, a fresh HOME, no probe answer kept from another test; any run left
    open is finished."""
    wandb_mode._reachable_once.cache_clear()
    for name in list(os.environ):
        if name.startswith("WANDB_") or name.lower() in {
            "https_proxy",
            "http_proxy",
            "all_proxy",
            "no_proxy",
        }:
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NETRC", str(home / ".netrc"))
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(home / var.lower()))
    yield home
    finish_wandb()
    if "wandb" in sys.modules:
        # wandb caches env and HOME in a process-wide singleton at its first
        # run; dropping it lets the next test's environment take effect.
        sys.modules["wandb"].teardown()


def closed_port() -> int:
    """A localhost port with nothing listening on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A localhost port that accepts TCP connections."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def typed(cfg: Any) -> tuple[dict[str, Any], list[str]]:
    """What the typed run config hands build_loggers: each logger's options and the tags."""
    return logger_options.configured(cfg.get("logger")), logger_options.as_tags(cfg.get("tags"))


def logger_cfg(name: str, **wandb_overrides: object):
    """A config with ``logger`` loaded from ``conf/logger/<name>.yaml``."""
    cfg = OmegaConf.create({"logger": OmegaConf.load(LOGGER_CONF / f"{name}.yaml")})
    for key, value in wandb_overrides.items():
        cfg.logger.wandb[key] = value
    return cfg


def log_rows(loggers: list, rows: list[tuple[int, dict[str, float]]]) -> None:
    """Log ``(step, metrics)`` rows through every Lightning logger, then flush."""
    for step, metrics in rows:
        for logger in loggers:
            logger.log_metrics(metrics, step=step)
    for logger in loggers:
        logger.save()


# ------------------------------------------------------------------ mode decision


def test_no_credentials_means_offline() -> None:
    mode, reason = decide_wandb_mode()
    assert mode == "offline"
    assert "credentials" in reason


def test_explicit_mode_beats_env_and_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    assert decide_wandb_mode("disabled")[0] == "disabled"
    assert decide_wandb_mode("offline") == ("offline", "logger.wandb.mode=offline")


def test_env_mode_beats_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert decide_wandb_mode() == ("disabled", "WANDB_MODE=disabled")
    monkeypatch.setenv("WANDB_MODE", "dryrun")  # wandb's old spelling of offline
    assert decide_wandb_mode()[0] == "offline"


def test_unknown_mode_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="logger.wandb.mode"):
        decide_wandb_mode("sometimes")
    monkeypatch.setenv("WANDB_MODE", "bogus")
    with pytest.raises(ValueError, match="WANDB_MODE"):
        decide_wandb_mode()


def test_key_but_unreachable_host_is_offline_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    start = time.monotonic()
    mode, reason = decide_wandb_mode()
    assert mode == "offline"
    assert "not reachable" in reason
    assert time.monotonic() - start < 5


def test_online_mode_asked_for_still_probes_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """WANDB_MODE=online with a key and no network used to cost ~80 s of wandb's retries per job:
    the probe runs in this mode too, once per process, which keeps its answer to itself (nothing
    is written to the environment a later process or job would inherit)."""
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    probes: list[tuple[str, int]] = []
    real_probe = wandb_mode._tcp_reachable

    def counting_probe(host: str, port: int, timeout_s: float) -> bool:
        probes.append((host, port))
        return real_probe(host, port, timeout_s)

    monkeypatch.setattr(wandb_mode, "_tcp_reachable", counting_probe)
    environment = dict(os.environ)
    for _ in range(3):  # three jobs of one sweep
        mode, reason = decide_wandb_mode()
        assert mode == "offline" and "WANDB_MODE=online" in reason and "not reachable" in reason
    assert len(probes) == 1
    assert decide_wandb_mode("online")[0] == "offline"  # logger.wandb.mode=online alike, still no new probe
    assert len(probes) == 1
    assert dict(os.environ) == environment


def test_silent_host_is_given_up_after_about_3_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    # 192.0.2.1 (TEST-NET-1) is never routed: a connect either fails at once
    # or hangs until our deadline, never longer.
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setenv("WANDB_BASE_URL", "https://192.0.2.1")
    start = time.monotonic()
    assert decide_wandb_mode()[0] == "offline"
    assert time.monotonic() - start < 5


def test_key_and_reachable_host_is_online(monkeypatch: pytest.MonkeyPatch, listening_port: int) -> None:
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{listening_port}")
    assert decide_wandb_mode()[0] == "online"


def test_netrc_entry_for_the_wandb_host_counts_as_credentials(
    monkeypatch: pytest.MonkeyPatch, isolated_wandb: Path, listening_port: int
) -> None:
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{listening_port}")
    netrc_file = isolated_wandb / "elsewhere.netrc"
    netrc_file.write_text(f"machine other.host\n  login user\n  password {FAKE_KEY}\n")
    monkeypatch.setenv("NETRC", str(netrc_file))
    assert decide_wandb_mode()[0] == "offline"  # entry for another host only
    netrc_file.write_text(f"machine 127.0.0.1\n  login user\n  password {FAKE_KEY}\n")
    assert decide_wandb_mode()[0] == "online"


def test_default_netrc_is_in_home(monkeypatch: pytest.MonkeyPatch, isolated_wandb: Path, listening_port: int) -> None:
    monkeypatch.delenv("NETRC")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{listening_port}")
    (isolated_wandb / ".netrc").write_text(f"machine 127.0.0.1\n  login user\n  password {FAKE_KEY}\n")
    assert decide_wandb_mode()[0] == "online"


def test_old_api_wandb_ai_login_counts_for_the_default_server(
    monkeypatch: pytest.MonkeyPatch, isolated_wandb: Path
) -> None:
    # wandb 0.31 defaults to api.forge.coreweave.com, which accepts the netrc
    # entry of api.wandb.ai behind it. The probe is stubbed: no real network.
    probed: list[tuple[str, int]] = []
    monkeypatch.setattr(wandb_mode, "_tcp_reachable", lambda h, p, t: probed.append((h, p)) or False)
    (isolated_wandb / ".netrc").write_text(f"machine api.wandb.ai\n  login user\n  password {FAKE_KEY}\n")
    mode, reason = decide_wandb_mode()
    assert (mode, probed) == ("offline", [("api.forge.coreweave.com", 443)])
    assert "not reachable" in reason


def test_https_proxy_is_probed_instead_of_the_host(monkeypatch: pytest.MonkeyPatch, listening_port: int) -> None:
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setenv("WANDB_BASE_URL", "https://192.0.2.1")
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{listening_port}")
    assert decide_wandb_mode()[0] == "online"


# ------------------------------------------------------------------------ naming


def test_single_run_name_is_short_architecture_first() -> None:
    name = run_name_from_overrides(["trainer.max_steps=5", "pos=rope", "norm=pre"])
    assert name == "pos=rope,norm=pre,max_steps=5"  # keys shortened to their last part


def test_single_run_name_starts_with_the_experiment_and_keeps_ambiguous_keys_whole() -> None:
    overrides = ["experiment=shazeer2020_glu_cpu", "seed=3", "model.dropout=0.1", "attn.dropout=0.2", "act=swiglu"]
    assert (
        run_name_from_overrides(overrides) == "shazeer2020_glu_cpu,act=swiglu,attn.dropout=0.2,model.dropout=0.1,seed=3"
    )
    assert (
        run_name_from_overrides(["experiment=shazeer2020_glu_cpu", "tags=[a]", "logger=csv"]) == "shazeer2020_glu_cpu"
    )


def test_run_name_is_at_most_120_characters() -> None:
    name = run_name_from_overrides([f"model.key{i}={'x' * 20}" for i in range(10)])
    assert len(name) <= 120 and ".." in name  # ends with a hash of the whole (ablate.config.resolvers.job_dirname)


def test_run_name_drops_non_variant_keys() -> None:
    overrides = [
        "hydra.sweep.dir=/tmp/x",
        "paths.data=/data",
        "logger=csv",
        "logger.wandb.project=p",
        "+loggers_extra=1",  # only the exact group "logger" is dropped
        "norm=post",
        "~hydra.job",
        "tags=[a,b]",
        "ckpt_path=last",
        "print_config=false",
        "callbacks.progress_bar=null",
        "skip_completed=false",
    ]
    assert run_name_from_overrides(overrides) == "norm=post,loggers_extra=1"


def test_run_name_default_when_nothing_identifies_the_variant() -> None:
    assert run_name_from_overrides([]) == "default"
    assert run_name_from_overrides(["logger=wandb", "hydra.verbose=true"]) == "default"


@pytest.fixture
def fake_hydra() -> Iterator[Callable[[str, str, str], None]]:
    """Install a minimal HydraConfig for the duration of a test."""
    from hydra.conf import HydraConf
    from hydra.core.hydra_config import HydraConfig

    def install(mode: str, sweep_dir: str, cwd: str) -> None:
        hydra = OmegaConf.structured(HydraConf)
        hydra.mode = mode
        hydra.sweep.dir = sweep_dir
        hydra.runtime.cwd = cwd
        HydraConfig.instance().set_config(OmegaConf.create({"hydra": hydra}))

    yield install
    HydraConfig.instance().cfg = None


def test_group_outside_hydra_is_none_unless_configured() -> None:
    assert multirun_group() is None
    assert multirun_group("my-group") == "my-group"


def test_group_of_a_multirun_comes_from_the_sweep_dir(fake_hydra: Callable[..., None], tmp_path: Path) -> None:
    fake_hydra("MULTIRUN", str(tmp_path / "logs" / "multirun" / "norm-pos"), str(tmp_path / "elsewhere"))
    assert multirun_group() == "norm-pos"  # the sweep's name, not its path
    assert multirun_group("chosen") == "chosen"


def test_group_is_wandb_safe_and_at_most_128_chars(fake_hydra: Callable[..., None]) -> None:
    fake_hydra("MULTIRUN", "/" + "deep dir/" * 30 + "sweep:01", "/elsewhere")
    group = multirun_group()
    assert group is not None and len(group) <= 128
    assert group.endswith("sweep-01")
    assert all(c.isalnum() or c in "._-" for c in group)


def test_single_run_has_no_group(fake_hydra: Callable[..., None], tmp_path: Path) -> None:
    fake_hydra("RUN", str(tmp_path / "multirun"), str(tmp_path))
    assert multirun_group() is None


# ------------------------------------------------------------ loggers end to end


ROWS = [
    (10, {"train/loss": 4.0, "val/loss": 3.0, "val/ppl": 20.0, "val/bleu": 1.0}),
    (20, {"train/loss": 3.0, "val/loss": 2.0, "val/ppl": 7.5, "val/bleu": 9.0}),
    (30, {"train/loss": 2.5, "val/loss": 2.2, "val/ppl": 9.0, "val/bleu": 4.0}),
]


@pytest.mark.integration
def test_offline_run_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "job"
    extra = {"model": {"d_model": 64, "norm": "pre"}, "axes": {"norm": "pre"}}
    loggers = build_loggers(*typed(logger_cfg("wandb", tags=["t1"])), out, "norm=pre", "sweep-1", extra)
    assert [type(lg) for lg in loggers] == [CSVLogger, AblateWandbLogger]

    log_rows(loggers, ROWS)
    finish_wandb(summary={"diverged": False})

    printed = [line for line in capsys.readouterr().out.splitlines() if "W&B" in line]
    assert len(printed) == 1
    assert printed[0].startswith("W&B offline (no W&B credentials")
    assert f"wandb sync {out}/wandb/offline-run-" in printed[0]

    run = read_offline_run(out)
    assert run["name"] == "norm=pre"
    assert run["group"] == "sweep-1"
    assert run["project"] == "ablate"
    assert run["tags"] == ["t1", "norm:pre"]  # logger.wandb.tags, then one tag per axis
    assert run["config"] == {**extra, "axis_norm": "pre"}  # + the axes as flat keys
    assert run["exit_code"] == 0
    assert [(r["trainer/global_step"], r["val/ppl"]) for r in run["history"]] == [(10, 20), (20, 7.5), (30, 9)]
    assert run["summary"]["val/ppl"] == min(m["val/ppl"] for _, m in ROWS)
    assert run["summary"]["val/loss"] == min(m["val/loss"] for _, m in ROWS)
    assert run["summary"]["val/bleu"] == max(m["val/bleu"] for _, m in ROWS)
    assert run["summary"]["train/loss"] == 2.5  # no goal defined: last value
    assert run["summary"]["diverged"] is False

    csv_text = (out / "csv" / "metrics.csv").read_text().splitlines()
    assert csv_text[0].split(",")[0] == "step" and len(csv_text) == 1 + len(ROWS)


@pytest.mark.integration
def test_reader_falls_back_to_the_wandb_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "job"
    log_rows(build_loggers(*typed(logger_cfg("wandb")), out, "r", None, {"a": 1}), ROWS)
    finish_wandb()
    fast = read_offline_run(out)
    monkeypatch.setattr(wandb_reader, "_inspect_with_core", lambda run_file: None)
    slow = read_offline_run(find_run_dirs(out)[0])
    assert slow == fast
    assert slow["group"] is None


@pytest.mark.integration
def test_non_finite_metrics_read_back_as_floats(tmp_path: Path) -> None:
    out = tmp_path / "job"
    loggers = build_loggers(*typed(logger_cfg("wandb")), out, "r", None, {})
    log_rows(loggers, [(1, {"val/loss": float("nan"), "train/loss": float("inf")})])
    finish_wandb(exit_code=1)
    run = read_offline_run(out)
    assert run["history"][0]["val/loss"] != run["history"][0]["val/loss"]  # NaN
    assert run["history"][0]["train/loss"] == float("inf")
    assert run["exit_code"] == 1


def test_csv_profile_has_no_wandb(tmp_path: Path) -> None:
    out = tmp_path / "job"
    loggers = build_loggers(*typed(logger_cfg("csv")), out, "r", None, {})
    assert [type(lg) for lg in loggers] == [CSVLogger]
    log_rows(loggers, ROWS[:1])
    finish_wandb(summary={"diverged": True})  # no-op: nothing started
    assert (out / "csv" / "metrics.csv").is_file()
    assert not (out / "wandb").exists()


def test_disabled_mode_gives_csv_only(tmp_path: Path) -> None:
    loggers = build_loggers(*typed(logger_cfg("wandb", mode="disabled")), tmp_path / "job", "r", None, {})
    assert [type(lg) for lg in loggers] == [CSVLogger]


@pytest.mark.integration
def test_configured_group_wins_over_the_sweep_group(tmp_path: Path) -> None:
    out = tmp_path / "job"
    build_loggers(*typed(logger_cfg("wandb", group="mine")), out, "r", "sweep-group", {})
    finish_wandb()
    assert read_offline_run(out)["group"] == "mine"


@pytest.mark.integration
def test_two_jobs_in_one_process_get_two_runs(tmp_path: Path) -> None:
    runs = []
    for job, name in enumerate(["norm=pre", "norm=post"]):
        out = tmp_path / str(job)
        try:
            log_rows(
                build_loggers(*typed(logger_cfg("wandb")), out, name, "g", {"job": job}), [(1, {"val/ppl": 10.0 + job})]
            )
        finally:
            finish_wandb()
        runs.append(out)
    dirs = [find_run_dirs(out) for out in runs]
    assert [len(d) for d in dirs] == [1, 1]
    first, second = (read_offline_run(d[0]) for d in dirs)
    assert first["run_id"] != second["run_id"]
    assert (first["name"], second["name"]) == ("norm=pre", "norm=post")
    assert [r["val/ppl"] for r in first["history"]] == [10]
    assert [r["val/ppl"] for r in second["history"]] == [11]


@pytest.mark.integration
def test_a_forgotten_finish_does_not_merge_jobs(tmp_path: Path) -> None:
    build_loggers(*typed(logger_cfg("wandb")), tmp_path / "a", "a", None, {})
    with pytest.warns(RuntimeWarning, match="still active"):
        build_loggers(*typed(logger_cfg("wandb")), tmp_path / "b", "b", None, {})
    finish_wandb()
    assert read_offline_run(tmp_path / "a")["name"] == "a"
    assert read_offline_run(tmp_path / "b")["name"] == "b"


class _RejectingWandbServer(http.server.BaseHTTPRequestHandler):
    """Answers every request with 401, like W&B for a wrong API key."""

    def do_POST(self) -> None:
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"errors": [{"message": "invalid api key"}]}')

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.integration
def test_failed_online_start_falls_back_to_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RejectingWandbServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.server_port}")
        out = tmp_path / "job"
        loggers = build_loggers(*typed(logger_cfg("wandb")), out, "r", None, {})
        log_rows(loggers, ROWS[:1])
        finish_wandb()
    finally:
        server.shutdown()
    assert "W&B offline (online start failed" in capsys.readouterr().out
    [run_dir] = find_run_dirs(out)  # the failed online attempt left nothing behind
    assert run_dir.name.startswith("offline-run-")
    assert read_offline_run(run_dir)["history"][0]["val/ppl"] == 20


# ---------------------------------------------------- a real multirun, no stdin

HYDRA_APP = """
import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf
from pathlib import Path

from ablate.tracking.loggers import build_loggers
from ablate.tracking.naming import multirun_group, run_name_from_overrides
from ablate.tracking.options import as_tags, configured
from ablate.tracking.wandb_run import finish_wandb


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def main(cfg):
    hc = HydraConfig.get()
    loggers = build_loggers(configured(cfg.logger), as_tags(cfg.get("tags")),
        Path(hc.runtime.output_dir),
        run_name_from_overrides(list(hc.overrides.task)),
        multirun_group(cfg.logger.wandb.group),
        OmegaConf.to_container(cfg, resolve=True),
    )
    try:
        for step in (1, 2):
            for logger in loggers:
                logger.log_metrics({"val/ppl": 100.0 / step, "lr": cfg.lr}, step=step)
    finally:
        finish_wandb()


main()
"""

HYDRA_CONFIG = """
defaults:
  - logger: wandb
  - _self_
lr: 0.1
norm: pre
hydra:
  sweep:
    dir: sweeps/s1
"""


@pytest.mark.integration
def test_hydra_multirun_with_stdin_closed(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(HYDRA_APP))
    (tmp_path / "config.yaml").write_text(HYDRA_CONFIG)
    shutil.copytree(LOGGER_CONF, tmp_path / "logger")  # the real logger configs, nothing else
    result = subprocess.run(
        [sys.executable, "app.py", "-m", "norm=pre,post", "lr=0.5"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("W&B offline (no W&B credentials") == 2

    runs = [read_offline_run(d) for d in find_run_dirs(tmp_path / "sweeps" / "s1")]
    assert sorted(r["name"] for r in runs) == ["norm=post", "norm=pre"]  # the swept key only: lr is not swept
    assert {r["group"] for r in runs} == {"s1"}  # the sweep directory's name (naming.sweep_group), not its path
    assert len({r["run_id"] for r in runs}) == 2
    for run in runs:
        assert [row["val/ppl"] for row in run["history"]] == [100, 50]
        assert run["summary"]["val/ppl"] == 50
        assert run["config"]["lr"] == 0.5
        assert run["config"]["norm"] == run["name"].split("norm=")[1]


# ------------------------------------------- sweeps: names, flat axes, tags, job type


def install_multirun(
    tmp_path: Path,
    command_line: list[str],
    sweeper_params: dict[str, str] | None = None,
    job_overrides: list[str] | None = None,
    exclude_keys: list[str] | None = None,
) -> None:
    """A HydraConfig of one job of a multirun whose sweep command line was ``command_line``
    (kept in ``<sweep dir>/multirun.yaml``, as Hydra's BasicSweeper does)."""
    from hydra.conf import HydraConf
    from hydra.core.hydra_config import HydraConfig

    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir(exist_ok=True)
    (sweep_dir / "multirun.yaml").write_text(OmegaConf.to_yaml({"hydra": {"overrides": {"task": command_line}}}))
    hydra = OmegaConf.structured(HydraConf)
    hydra.mode = "MULTIRUN"
    hydra.sweep.dir = str(sweep_dir)
    hydra.runtime.cwd = str(tmp_path)
    hydra.sweeper = OmegaConf.create({"_target_": "basic", "params": sweeper_params or {}})
    hydra.overrides.task = job_overrides or []
    hydra.job.config.override_dirname.exclude_keys = exclude_keys or []
    HydraConfig.instance().set_config(OmegaConf.create({"hydra": hydra}))


@pytest.fixture
def multirun(tmp_path: Path) -> Iterator[Callable[..., None]]:
    from hydra.core.hydra_config import HydraConfig

    yield lambda *args, **kwargs: install_multirun(tmp_path, *args, **kwargs)
    HydraConfig.instance().cfg = None


def test_multirun_name_is_the_swept_keys_and_the_seed(multirun: Callable[..., None]) -> None:
    # an experiment sweeps act (8 values) and seed; the command line narrows both: act is still swept, seed is not
    multirun(
        ["experiment=glu", "act=gelu,swiglu", "seed=1", "trainer.max_steps=6", "optim.lr=1e-3,2e-3"],
        sweeper_params={"act": "relu,gelu,silu", "seed": "1,2"},
    )
    assert naming.swept_keys() == {"act", "optim.lr"}
    job = ["experiment=glu", "act=swiglu", "seed=1", "trainer.max_steps=6", "optim.lr=2e-3"]
    assert run_name_from_overrides(job) == "act=swiglu,optim.lr=2e-3,seed=1"  # full keys, as in job directory names
    labels = naming.RunLabels.current(job)
    assert labels == naming.RunLabels(
        name="act=swiglu,optim.lr=2e-3,seed=1",
        job_type="sweep",
        experiment="glu",
        swept=(("act", "swiglu"), ("optim.lr", "2e-3")),
    )


def test_multirun_sweeping_only_the_experiment_params(multirun: Callable[..., None]) -> None:
    multirun(["experiment=glu", "trainer.max_steps=6"], sweeper_params={"act": "relu,gelu", "seed": "1,2"})
    assert naming.swept_keys() == {"act", "seed"}
    assert run_name_from_overrides(["experiment=glu", "trainer.max_steps=6", "act=relu", "seed=2"]) == "act=relu,seed=2"


def test_multirun_without_swept_keys_names_like_a_single_run(multirun: Callable[..., None]) -> None:
    multirun(["norm=post", "trainer.max_steps=6"], exclude_keys=["trainer.max_steps"])
    assert naming.swept_keys() == frozenset()
    assert run_name_from_overrides(["norm=post", "trainer.max_steps=6"]) == "norm=post"  # exclude_keys left out too
    assert naming.RunLabels.current(["norm=post"]).job_type == "sweep"


def test_single_run_labels_outside_hydra() -> None:
    labels = naming.RunLabels.current(["experiment=glu", "act=swiglu"])
    assert labels == naming.RunLabels(name="glu,act=swiglu", job_type="train", experiment="glu", swept=())


def test_flat_axes_and_tags() -> None:
    config = {
        "axes": {"pos": "rope", "act": "gelu"},
        "optim": {"lr": 0.001},
        "model": {"n_layers": 2, "dropout": 0.1},
        "norm": {"placement": "post"},
    }
    axes = naming.flat_axes(config, [("optim.lr", "1e-3"), ("model", "tiny"), ("norm", "post")])
    assert axes == {"axis_pos": "rope", "axis_act": "gelu", "axis_lr": 0.001, "axis_model": "tiny", "axis_norm": "post"}
    assert naming.run_tags(["baseline"], "glu", axes) == [
        "baseline",
        "experiment:glu",
        "pos:rope",
        "act:gelu",
        "lr:0.001",
        "model:tiny",
        "norm:post",
    ]
    assert all(len(t) <= 64 for t in naming.run_tags(["x" * 100], None, {}))


def raw_run_record(out: Path) -> dict:
    """The ``run`` record of the one W&B run under ``out`` (name, group, job_type, tags, ...)."""
    records = wandb_reader._read_records(wandb_reader._run_file(find_run_dirs(out)[0]))
    return next(r["run"] for r in records if r.get("type") == "run")


@pytest.mark.integration
def test_wandb_run_gets_flat_axes_tags_job_type_and_no_spec_block(tmp_path: Path) -> None:
    out = tmp_path / "job"
    cfg = logger_cfg("wandb", tags=["wb"])
    cfg.tags = ["baseline"]
    labels = naming.RunLabels(
        name="optim.lr=1e-3,seed=1", job_type="sweep", experiment="glu", swept=(("optim.lr", "1e-3"),)
    )
    extra = {"axes": {"norm": "pre"}, "optim": {"lr": 0.001}, "seed": 1, "act": {"name": "gelu"}}
    loggers = build_loggers(*typed(cfg), out, labels.name, "g", extra, labels=labels)
    wandb_logger = loggers[1]
    # a key the run config holds is not overwritten; the translation task's signature is new
    wandb_logger.log_hyperparams({"optim": {"lr": 0.5}, "seed": 7})
    wandb_logger.log_hyperparams({"bleu_signature": "nrefs:1|tok:13a"})
    finish_wandb()
    run = read_offline_run(out)
    assert run["name"] == "optim.lr=1e-3,seed=1"
    assert run["config"]["axis_lr"] == 0.001 and run["config"]["axis_norm"] == "pre"
    assert run["config"]["act"] == {"name": "gelu"}  # the nested resolved config is still there
    assert run["config"]["optim"] == {"lr": 0.001} and run["config"]["seed"] == 1
    assert run["config"]["bleu_signature"] == "nrefs:1|tok:13a"
    assert run["tags"] == ["wb", "baseline", "experiment:glu", "norm:pre", "lr:0.001"]
    assert raw_run_record(out)["job_type"] == "sweep"


@pytest.mark.integration
def test_tokens_and_time_are_declared_as_x_axes(tmp_path: Path) -> None:
    out = tmp_path / "job"
    loggers = build_loggers(*typed(logger_cfg("wandb")), out, "r", None, {})
    log_rows(
        loggers,
        [
            (1, {"train/loss": 3.0, "train/tokens_seen": 64.0, "train/time_s": 0.5}),
            (2, {"val/loss": 2.5, "train/tokens_seen": 128.0, "train/time_s": 1.0}),
        ],
    )
    finish_wandb()
    records = wandb_reader._read_records(wandb_reader._run_file(find_run_dirs(out)[0]))
    defined = {}
    for record in records:
        for metric in (record.get("metric") or {},) if record.get("type") == "metric" else ():
            defined[metric.get("name")] = metric
    assert {"train/tokens_seen", "train/time_s"} <= set(defined)
    assert read_offline_run(out)["summary"]["train/tokens_seen"] == 128


# ------------------------------------------------------------ TensorBoard, MLflow


def multi_cfg(tmp_path: Path, *names: str, tags: list[str] | None = None):
    """A config with the logger files ``names`` merged (as ``logger=[a,b]`` composes them)."""
    logger = OmegaConf.merge(*(OmegaConf.load(LOGGER_CONF / f"{n}.yaml") for n in names))
    return OmegaConf.create({"logger": logger, "paths": {"log_dir": str(tmp_path / "logs")}, "tags": tags or []})


@pytest.fixture
def no_mlflow_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # reading the store back here: MLflow 3 opens a file store only when asked to (the loggers ask)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")


def test_logger_files_compose_as_a_list() -> None:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        both = compose("train", overrides=["logger=[wandb,tensorboard,mlflow]", "tags=[a]"])
        tb_only = compose("train", overrides=["logger=tensorboard"])
    assert both.logger.wandb.enabled and both.logger.tensorboard.enabled and both.logger.mlflow.enabled
    assert list(both.tags) == ["a"]
    assert set(logger_options.configured(tb_only.logger)) == {"tensorboard"}  # not selected: no W&B at all
    assert logger_options.configured(tb_only.logger)["tensorboard"].enabled


def read_tensorboard(log_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    texts = " ".join(
        e.tensor_proto.string_val[0].decode()
        for tag in events.Tags()["tensors"]
        if tag.startswith("run/tags")
        for e in events.Tensors(tag)
    )
    return scalars, texts


def test_tensorboard_logger_writes_metrics_tags_and_axes(tmp_path: Path, no_mlflow_env: None) -> None:
    pytest.importorskip("tensorboard")
    out = tmp_path / "job"
    loggers = build_loggers(
        *typed(multi_cfg(tmp_path, "csv", "tensorboard", tags=["baseline"])),
        out,
        "norm=pre",
        "g",
        {"axes": {"norm": "pre"}, "seed": 3},
    )
    assert [type(lg) for lg in loggers] == [CSVLogger, tracking_loggers.AblateTensorBoardLogger]
    loggers[1].log_hyperparams({"seed": 99, "bleu_signature": "sig"})
    log_rows(loggers, ROWS)
    for logger in loggers:
        logger.finalize("success")
    scalars, text = read_tensorboard(out / "tensorboard")
    assert scalars["val/ppl"] == [(10, 20.0), (20, 7.5), (30, 9.0)]
    assert "baseline" in text and "norm:pre" in text
    hparams = OmegaConf.load(out / "tensorboard" / "hparams.yaml")
    assert hparams.tags == "baseline, norm:pre" and hparams.axis_norm == "pre" and hparams.seed == 3
    assert hparams.run_name == "norm=pre" and hparams.job_type == "train" and hparams.bleu_signature == "sig"


def read_mlflow(store: Path) -> tuple[Any, list[Any]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"file:{store}")
    experiment = client.get_experiment_by_name("ablate")
    return client, client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])


@pytest.mark.integration
def test_mlflow_logger_writes_metrics_params_and_tags(tmp_path: Path, no_mlflow_env: None) -> None:
    pytest.importorskip("mlflow")
    out = tmp_path / "logs" / "sweep" / "job"
    cfg = multi_cfg(tmp_path, "mlflow", tags=["baseline"])
    labels = naming.RunLabels(name="norm=pre", job_type="sweep")
    loggers = build_loggers(
        *typed(cfg), out, "norm=pre", "g1", {"axes": {"norm": "pre"}, "optim": {"lr": 0.5}}, labels=labels
    )
    assert [type(lg) for lg in loggers] == [CSVLogger, tracking_loggers.AblateMLFlowLogger]
    loggers[1].log_hyperparams({"optim": {"lr": 0.1}})  # the run config's value stays
    log_rows(loggers, [*ROWS, (30, {"test/ppl@32": 5.0})])
    loggers[1].finalize("success")
    client, runs = read_mlflow(tmp_path / "logs" / "mlruns")  # the shared store under paths.log_dir
    [run] = runs
    assert run.info.run_name == "norm=pre" and run.info.status == "FINISHED"
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "val/ppl")] == [
        (10, 20),
        (20, 7.5),
        (30, 9),
    ]
    assert client.get_metric_history(run.info.run_id, "test/ppl_at_32")[0].value == 5
    tags = run.data.tags
    assert (tags["baseline"], tags["norm"], tags["group"], tags["job_type"]) == ("", "pre", "g1", "sweep")
    assert run.data.params["axis_norm"] == "pre" and run.data.params["optim/lr"] == "0.5"

    # the job resumes: the same MLflow run goes on (params already there are not logged again)
    resumed = build_loggers(
        *typed(cfg),
        out,
        "norm=pre",
        "g1",
        {"axes": {"norm": "pre"}, "optim": {"lr": 0.5}, "ckpt_path": "last"},
        resuming=True,
        labels=labels,
    )
    log_rows(resumed, [(40, {"val/ppl": 6.0})])
    resumed[1].finalize("success")
    _, runs = read_mlflow(tmp_path / "logs" / "mlruns")
    assert [r.info.run_id for r in runs] == [run.info.run_id]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val/ppl")] == [10, 20, 30, 40]
    assert runs[0].data.params["ckpt_path"] == "last"


def test_a_selected_logger_that_is_not_installed_names_the_pip_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_mlflow_env: None
) -> None:
    installed = {"tensorboard": True, "tensorboardX": False, "mlflow": False}
    monkeypatch.setattr(logger_options, "_installed", lambda module: installed[module])
    typed(multi_cfg(tmp_path, "csv", "tensorboard"))  # installed: fine
    with pytest.raises(
        logger_options.LoggerUnavailable, match=r"pip install -c requirements/constraints.txt -e '\.\[mlflow\]'"
    ):
        build_loggers(*typed(multi_cfg(tmp_path, "tensorboard", "mlflow")), tmp_path / "job", "r", None, {})
    installed["tensorboard"] = False
    with pytest.raises(logger_options.LoggerUnavailable, match=r"'\.\[tensorboard\]'"):
        typed(multi_cfg(tmp_path, "tensorboard"))
    from ablate.errors import ConfigError

    assert issubclass(logger_options.LoggerUnavailable, ConfigError)  # train.py prints it as a user error


@pytest.mark.integration
def test_train_with_tensorboard_and_mlflow(run_train, tmp_path: Path, no_mlflow_env: None) -> None:
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    from helpers.runs import TINY

    proc = run_train(
        *TINY, "logger=[tensorboard,mlflow]", "tags=[smoke]", "pos=rope", "hydra.run.dir=" + str(tmp_path / "run")
    )
    # each says where it wrote, and TensorBoard's hyper-parameters are the real ones, not only names
    assert f"tensorboard  {tmp_path / 'run' / 'tensorboard'}" in proc.stdout
    assert f"mlflow       file:{tmp_path / 'logs' / 'mlruns'}" in proc.stdout
    hparams = yaml.safe_load((tmp_path / "run" / "tensorboard" / "hparams.yaml").read_text())
    assert hparams["optim.lr"] == 2e-3 and hparams["model.d_model"] == 32 and hparams["pos.name"] == "rope"
    # the task's constructor arguments (spec, optim, data, compile) are the run config again: not logged twice
    assert not any(k == "spec" or k.startswith(("spec.", "spec/", "compile")) for k in hparams)
    scalars, text = read_tensorboard(tmp_path / "run" / "tensorboard")
    for name in ("train/loss", "val/loss", "test/loss", "grad_norm/total", "train/tokens_seen", "train/time_s"):
        assert scalars.get(name), name
    assert [v for _, v in scalars["train/tokens_seen"]][:3] == [64, 128, 192]  # batch 4 x 16 tokens a step
    assert "smoke" in text and "pos:rope" in text
    _, [run] = read_mlflow(tmp_path / "logs" / "mlruns")
    assert (
        run.info.run_name.startswith("pos=rope,model=tiny,batch_size=4,seq_len=16,") and len(run.info.run_name) <= 120
    )
    assert {"val/loss", "test/loss", "train/tokens_seen"} <= set(run.data.metrics)
    assert run.data.tags["smoke"] == "" and run.data.tags["pos"] == "rope" and run.data.tags["job_type"] == "train"
    assert not (tmp_path / "run" / "wandb").exists()


# -------------------------------------------------------- cumulative tokens and time


def test_tokens_seen_and_training_time_leave_out_pauses_and_survive_a_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    import torch

    from ablate.callbacks import throughput
    from ablate.callbacks.throughput import ThroughputMonitor

    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(throughput, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    monitor = ThroughputMonitor(window=4)
    trainer = SimpleNamespace(world_size=2)
    batch = (torch.zeros(2, 8), torch.zeros(2, 8))  # 16 tokens a rank and step
    for step in range(4):
        monitor.on_train_batch_start(trainer, None, batch, step)
        clock.now += 0.5
        if step == 1:
            monitor.pause()  # a validation pass: 100 s not counted
            clock.now += 100.0
    assert monitor.tokens_seen == 4 * 16 * 2
    assert monitor.elapsed() == pytest.approx(4 * 0.5)
    state = monitor.state_dict()
    restored = ThroughputMonitor(window=4)
    restored.load_state_dict(state)
    clock.now += 7.0  # the restart
    restored.on_train_batch_start(trainer, None, batch, 4)
    clock.now += 0.5
    assert restored.tokens_seen == 5 * 32 and restored.elapsed() == pytest.approx(2.5)
