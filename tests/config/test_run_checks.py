"""Bad numbers, inapplicable optimiser keys and damaged inputs are refused by name, early.

Each case here was accepted before (issue 13): a run "completed" with 0 steps, an LR schedule
climbing to 5x, clipping silently off, `optim.name=sgd` training AdamW, a truncated token cache
trained on 0.1% of the corpus, a non-UTF-8 file failing without its name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ablate.config.checks import clip_validation_interval
from ablate.data.cache import CacheCorruptError, read_meta
from ablate.data.lm_data import TinyShakespeare
from ablate.data.sources import DataFormatError
from ablate.errors import ConfigError
from ablate.optim import build_optimizer, used_optim_config
from ablate.run.plan import check_config
from helpers.runs import TINY, composed

BAD_NUMBERS = [
    ("trainer.max_steps=0", "trainer.max_steps=0"),
    ("trainer.max_steps=-5", "trainer.max_steps=-5"),
    ("trainer.val_check_interval=0", "trainer.val_check_interval=0"),
    ("optim.min_lr_ratio=5", "optim.min_lr_ratio=5"),
    ("optim.warmup_steps=-5", "optim.warmup_steps=-5"),
    ("optim.grad_clip=-1", "optim.grad_clip=-1"),
    ("optim.lr=-0.001", "optim.lr=-0.001"),
    ("optim.lr=0", "optim.lr=0"),
    ("optim.weight_decay=-0.1", "optim.weight_decay=-0.1"),
    ("optim.label_smoothing=1.0", "optim.label_smoothing=1.0"),
    ("optim.betas=[0.9,1.5]", "optim.betas=[0.9, 1.5]"),
    ("optim.schedule=step", "one of cosine, linear, inverse_sqrt, constant"),
    ("optim.name=lion", "one of adamw, adam, sgd"),
    ("data.batch_size=0", "data.batch_size=0"),
    ("data.seq_len=0", "data.seq_len=0"),
]


@pytest.mark.parametrize(("override", "message"), BAD_NUMBERS)
def test_bad_number_is_refused_by_name(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_config(composed(override))
    assert message in str(err.value)


def test_good_config_passes_and_validation_can_be_switched_off() -> None:
    check_config(composed())
    check_config(composed("trainer.max_steps=200", "trainer.val_check_interval=200"))
    # an interval longer than the run is fine when validation is off on purpose
    check_config(composed("trainer.max_steps=200", "trainer.limit_val_batches=0"))
    check_config(composed("trainer.max_steps=-1", "trainer.max_epochs=3"))
    with pytest.raises(ConfigError, match="never end"):
        check_config(composed("trainer.max_steps=-1", "trainer.max_epochs=null"))


def test_an_interval_longer_than_the_run_validates_at_its_end() -> None:
    """``python train.py trainer.max_steps=100`` alone runs (issue 35 item 5): the default
    validation interval (500) becomes the run's length, in the config itself, and says so."""
    cfg = composed("trainer.max_steps=100")
    assert cfg.trainer.val_check_interval > 100  # the default experiment validates every 500 steps
    note = clip_validation_interval(cfg.trainer)
    assert cfg.trainer.val_check_interval == 100
    assert note is not None and "validating at the end of the run (trainer.val_check_interval=100)" in note
    check_config(cfg)
    assert clip_validation_interval(composed("trainer.max_steps=200", "trainer.val_check_interval=200").trainer) is None
    off = composed("trainer.max_steps=100", "trainer.limit_val_batches=0")
    assert (
        clip_validation_interval(off.trainer) is None and off.trainer.val_check_interval > 100
    )  # validation off: as set


@pytest.mark.integration
def test_shortened_run_validates_once_at_its_end(run_train, tmp_path: Path) -> None:
    tiny = [o for o in TINY if not o.startswith(("trainer.max_steps", "trainer.val_check_interval"))]
    proc = run_train(*tiny, "trainer.max_steps=4", "logger=csv")
    assert "validating at the end of the run (trainer.val_check_interval=4)" in proc.stdout + proc.stderr
    status = json.loads(next((tmp_path / "logs" / "runs").glob("*/status.json")).read_text())
    assert status["status"] == "completed" and status["metrics"].get("val/loss") is not None


@pytest.mark.integration
def test_bad_number_fails_before_any_data_is_read(run_train, tmp_path: Path) -> None:
    proc = run_train("optim.min_lr_ratio=5", check=False)
    assert proc.returncode == 2
    assert "optim.min_lr_ratio=5 is invalid: a fraction of the peak LR in [0, 1]" in proc.stderr
    assert "Traceback" not in proc.stderr  # a user error is its message, not a stack
    assert "tinyshakespeare" not in proc.stdout + proc.stderr  # no data was read or tokenised


# ---------------------------------------------------------------------------- optimisers


def test_optim_name_builds_the_named_optimiser() -> None:
    model = torch.nn.Linear(4, 4)
    base = {"lr": 0.1, "weight_decay": 0.0, "betas": [0.9, 0.95], "eps": 1e-8, "momentum": None}
    assert type(build_optimizer(model, {**base, "name": "adamw"})) is torch.optim.AdamW
    adam = build_optimizer(model, {**base, "name": "adam"})
    assert type(adam) is torch.optim.Adam and adam.defaults["betas"] == (0.9, 0.95)
    sgd = build_optimizer(model, {**base, "name": "sgd", "momentum": 0.8})
    assert type(sgd) is torch.optim.SGD and sgd.defaults["momentum"] == 0.8


def test_recorded_optim_config_has_only_the_keys_the_optimiser_reads() -> None:
    cfg = {
        "name": "sgd",
        "lr": 0.1,
        "weight_decay": 0.0,
        "betas": [0.9, 0.99],
        "eps": 1e-8,
        "momentum": 0.9,
        "fused": None,
        "schedule": "cosine",
    }
    assert used_optim_config(cfg) == {
        "name": "sgd",
        "lr": 0.1,
        "weight_decay": 0.0,
        "momentum": 0.9,
        "schedule": "cosine",
    }
    assert "momentum" not in used_optim_config({**cfg, "name": "adamw", "momentum": None})


def test_momentum_with_adam_is_refused() -> None:
    with pytest.raises(ConfigError, match="optim.momentum=0.9 does not apply to optim.name=adamw"):
        check_config(composed("optim.momentum=0.9"))


@pytest.mark.integration
def test_sgd_run_records_and_trains_sgd(run_train, tmp_path: Path) -> None:
    from helpers.runs import TINY

    run_train(*TINY, "logger=csv", "optim.name=sgd", "optim.momentum=0.9")
    run = next((tmp_path / "logs" / "runs").glob("*/"))
    hparams = (run / "csv" / "hparams.yaml").read_text()
    assert "name: sgd" in hparams and "momentum: 0.9" in hparams and "betas" not in hparams
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert "momentum_buffer" in next(iter(checkpoint["optimizer_states"][0]["state"].values()))


# ---------------------------------------------------------------------------- token caches


@pytest.fixture
def built_cache(tmp_path: Path, data_dir: Path) -> tuple[TinyShakespeare, Path]:
    dm = TinyShakespeare(data_dir=data_dir, cache_dir=tmp_path / "cache", seq_len=16, batch_size=4)
    dm.prepare_data()
    return dm, dm.cache_path()


def damage_truncate(folder: Path) -> None:
    path = folder / "train.bin"
    path.write_bytes(path.read_bytes()[:2000])


def damage_garbage(folder: Path) -> None:
    path = folder / "train.bin"
    data = bytearray(path.read_bytes())
    data[1000:1100] = b"\xff" * 100  # same size, ids far beyond the vocabulary
    path.write_bytes(bytes(data))


def damage_meta(folder: Path) -> None:
    (folder / "meta.json").write_text('{"format": 2, "vocab_')


def damage_vocab(folder: Path) -> None:
    (folder / "char_vocab.json").write_text("not json")


@pytest.mark.parametrize("damage", [damage_truncate, damage_garbage, damage_meta, damage_vocab])
def test_damaged_cache_is_named_and_rebuilt(built_cache, damage, caplog: pytest.LogCaptureFixture) -> None:
    dm, folder = built_cache
    intact = {p.name: p.read_bytes() for p in folder.iterdir()}
    damage(folder)
    with caplog.at_level("WARNING"):
        dm.prepare_data()
    assert "rebuilding the cache" in caplog.text
    assert any(name in caplog.text for name in ("train.bin", "meta.json", "char_vocab.json"))
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == intact
    dm.setup("fit")
    assert dm.datasets["train"].num_tokens == json.loads((folder / "meta.json").read_text())["num_tokens"]["train"]


def test_truncated_token_file_is_never_trained_on(built_cache) -> None:
    """setup() (which a data module may get without prepare_data) checks sizes too."""
    dm, folder = built_cache
    damage_truncate(folder)
    with pytest.raises(CacheCorruptError, match="train.bin is damaged"):
        read_meta(folder)
    dm.setup("fit")  # rebuilds, saying so
    assert dm.datasets["train"].num_tokens > 900_000


def test_non_utf8_file_is_named(tmp_path: Path) -> None:
    from ablate.data.lm_data import TextFiles

    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait\n".encode("latin-1") * 100)
    dm = TextFiles(train_path=bad, val_path=bad, data_dir=tmp_path, cache_dir=tmp_path / "cache")
    with pytest.raises(DataFormatError, match="latin1.txt is not valid UTF-8"):
        dm.prepare_data()


def test_misaligned_parallel_files_fail_even_with_max_train_pairs(tmp_path: Path) -> None:
    from ablate.data.translation_data import ParallelFiles

    for lang, n in (("de", 50), ("en", 49)):
        (tmp_path / f"train.{lang}").write_text("".join(f"satz {i}\n" for i in range(n)))
        (tmp_path / f"val.{lang}").write_text("a\nb\n")
    dm = ParallelFiles(
        train_src=str(tmp_path / "train.de"),
        train_tgt=str(tmp_path / "train.en"),
        val_src=str(tmp_path / "val.de"),
        val_tgt=str(tmp_path / "val.en"),
        data_dir=tmp_path,
        cache_dir=tmp_path / "cache",
        vocab_size=300,
        max_train_pairs=10,
    )
    with pytest.raises(ValueError, match="different line counts"):
        dm.prepare_data()


def test_optimized_metric_that_can_never_be_logged_is_named() -> None:
    from ablate.config.checks import optimized_metric_problem
    from ablate.tasks import ranked_metrics

    def problem(*overrides: str) -> str | None:
        cfg = composed(*overrides)
        return optimized_metric_problem(cfg, ranked_metrics(cfg))

    assert problem() is None
    assert problem("task=translation", "optimized_metric=val/bleu") is None
    assert "not logged by task=lm" in problem("optimized_metric=val/bleu")
    assert "validation is off" in problem("trainer.limit_val_batches=0")
    assert "eval.test_at_end=false" in problem("optimized_metric=test/loss", "eval.test_at_end=false")


@pytest.mark.parametrize("preset", ["default", "fdr", "limit", "overfit", "profiler"])
def test_debug_presets_compose_and_validate(preset: str) -> None:
    cfg = composed(f"debug={preset}")
    check_config(cfg)
    assert cfg.logger.wandb.enabled is False and cfg.print_config is True


@pytest.mark.integration
def test_debug_fdr_runs_one_step(run_train, tmp_path: Path) -> None:
    proc = run_train("debug=fdr", "model=tiny", "data.seq_len=16", "data.batch_size=4")
    (status_file,) = (tmp_path / "logs" / "debug" / "runs").glob("*/status.json")
    status = json.loads(status_file.read_text())
    assert status["status"] == "completed" and status["steps"] == 1
    assert "run completed" in proc.stdout
    assert "test/loss" in status["metrics"]  # one batch of train, validation *and test*, as conf/debug/fdr.yaml says


def test_warmup_as_long_as_the_run_is_warned_about() -> None:
    from ablate.config.checks import start_warnings, warmup_problem

    assert warmup_problem(composed()) is None
    problem = warmup_problem(composed("trainer.max_steps=80", "trainer.val_check_interval=40"))
    assert problem is not None and "optim.warmup_steps=100 >= trainer.max_steps=80" in problem
    assert problem in start_warnings(composed("trainer.max_steps=80", "trainer.val_check_interval=40"), ("loss",))
    assert (
        warmup_problem(composed("trainer.max_steps=80", "trainer.val_check_interval=40", "optim.warmup_steps=0"))
        is None
    )
    # the debugging presets are short on purpose: they warm up over a few steps, so they say nothing
    for preset in ("default", "fdr", "limit", "overfit", "profiler"):
        assert warmup_problem(composed(f"debug={preset}")) is None, preset
