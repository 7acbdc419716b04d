"""Translation end to end: a tiny model overfits a few hundred pairs to near-perfect BLEU (train ->
decode -> detokenise -> sacreBLEU), and `train.py -m task=translation data=multi30k norm=pre,post`
at tiny size runs and logs val/bleu; eval.py and translate.py work from its checkpoint alone."""

from __future__ import annotations

import csv
import gzip
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf

from ablate.eval_units import read_units
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO, SHARED_DATA

pytestmark = pytest.mark.slow
MULTI30K = SHARED_DATA / "multi30k"


@pytest.fixture(scope="module", autouse=True)
def need_multi30k():
    if not (MULTI30K / "train.de.gz").exists():
        pytest.skip(f"Multi30k is not at {MULTI30K}")


def first_lines(path: Path, n: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(n)]


def test_tiny_model_overfits_to_near_perfect_bleu(tmp_path):
    from ablate.data.translation_data import ParallelFiles
    from ablate.nn.spec import ModelSpec
    from ablate.tasks.decoding import DecodeConfig
    from ablate.tasks.translation import TranslationTask, corpus_bleu

    for lang in ("de", "en"):
        (tmp_path / f"pairs.{lang}").write_text("\n".join(first_lines(MULTI30K / f"train.{lang}.gz", 200)) + "\n")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: one thread is fastest, and steady on a busy machine
    start = time.perf_counter()
    try:
        L.seed_everything(0)
        dm = ParallelFiles(
            train_src=str(tmp_path / "pairs.de"),
            train_tgt=str(tmp_path / "pairs.en"),
            val_src=str(tmp_path / "pairs.de"),
            val_tgt=str(tmp_path / "pairs.en"),
            cache_dir=str(tmp_path / "cache"),
            src_lang="de",
            tgt_lang="en",
            vocab_size=1000,
            seq_len=64,
            max_tokens=1024,
        )
        dm.setup()
        spec = ModelSpec.from_flat(
            dict(
                vocab_size=dm.vocab_size,
                n_layers=2,
                encoder_layers=2,
                d_model=64,
                n_heads=4,
                d_ff=256,
                max_len=64,
                pos="sinusoidal",
                norm="pre",
                act="relu",
                init="xavier",
                scale_embeddings=True,
            )
        ).validate()
        task = TranslationTask(
            spec.as_dict(),
            {
                "lr": 5e-3,
                "betas": [0.9, 0.98],
                "weight_decay": 0.0,
                "schedule": "constant",
                "warmup_steps": 30,
                "label_smoothing": 0.0,
            },
            decode={"beam_size": 1, "max_len_a": 1.5, "max_len_b": 5},
            task={"val_bleu_samples": 0},
        )
        task.tokenizer = dm.tokenizer
        trainer = L.Trainer(
            accelerator="cpu",
            max_steps=250,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            gradient_clip_val=1.0,
        )
        trainer.fit(task, datamodule=dm)
        trainer.test(task, datamodule=dm, verbose=False)
        greedy_bleu = float(trainer.callback_metrics["test/bleu"])
        beam = task.translate_text(dm.sources("test")[:60], DecodeConfig(beam_size=3, max_len_a=1.5, max_len_b=5))
        beam_bleu = corpus_bleu(beam, dm.references("test")[:60])[0]
    finally:
        torch.set_num_threads(threads)
    seconds = time.perf_counter() - start
    assert greedy_bleu > 90, f"greedy BLEU {greedy_bleu:.1f} on the memorised pairs"
    assert beam_bleu > 90, f"beam-3 BLEU {beam_bleu:.1f} on the memorised pairs"
    assert float(trainer.callback_metrics["test/ppl"]) < 1.2
    print(f"overfit: greedy BLEU {greedy_bleu:.1f}, beam BLEU {beam_bleu:.1f}, {seconds:.0f} s")


TINY_MT = [
    "task=translation",
    "data=multi30k",
    "model.encoder_layers=1",
    "model.decoder_layers=1",
    "model.d_model=32",
    "model.n_heads=4",
    "model.d_ff=64",
    "data.vocab_size=500",
    "data.max_train_pairs=3000",
    "data.max_eval_pairs=60",
    "data.max_tokens=1024",
    "trainer.max_steps=6",
    "trainer.val_check_interval=3",
    "task.val_bleu_samples=40",
    "decode.beam_size=2",
    "decode.max_len_a=1.0",
    "decode.max_len_b=4",
    "optim.warmup_steps=2",
    "trainer.log_every_n_steps=1",
    "callbacks.progress_bar=null",
    "print_config=false",
    "callbacks.throughput.peak_flops=1e12",
]
PROMISED = [
    "train/loss",
    "train/ppl",
    "train/lr",
    "train/padding_fraction",
    "data/padding_fraction",
    "val/loss",
    "val/ppl",
    "val/bleu",
    "test/loss",
    "test/ppl",
    "test/bleu",
    "grad_norm/total",
    "grad_norm/embed",
    "grad_norm/enc_layer_00/attn",
    "grad_norm/dec_layer_00/cross_attn",
    "grad_norm/dec_layer_00/attn",
    "model/params",
]


def read_csv(job: Path) -> list[dict[str, str]]:
    with open(job / "csv" / "metrics.csv") as f:
        return list(csv.DictReader(f))


def column(rows: list[dict[str, str]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) not in (None, "")]


def test_multirun_norm_pre_post_logs_bleu(run_train, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tiny tensors: no thread spinning on a busy machine
    run_train("-m", "norm=pre,post", *TINY_MT, "logger=csv")
    sweep = next((tmp_path / "logs" / "multirun").iterdir())
    jobs = {
        json.loads((d / "status.json").read_text())["axes"]["norm"]: d
        for d in sweep.iterdir()
        if (d / "status.json").exists()
    }
    assert set(jobs) == {"pre", "post"}
    for norm, job in jobs.items():
        status = json.loads((job / "status.json").read_text())
        assert status["status"] == "completed" and status["steps"] == 6, status
        assert status["axes"]["pos"] == "sinusoidal"
        rows = read_csv(job)
        for key in PROMISED:
            assert column(rows, key), f"{norm}: {key} never logged"
        assert len(column(rows, "val/bleu")) == 2  # validated at steps 3 and 6
        assert all(0 <= b <= 100 for b in column(rows, "val/bleu") + column(rows, "test/bleu"))
        assert column(rows, "val/ppl") == pytest.approx([math.exp(v) for v in column(rows, "val/loss")], rel=1e-5)
        assert 0 <= column(rows, "data/padding_fraction")[0] < 0.2
        hparams = OmegaConf.load(job / "csv" / "hparams.yaml")
        assert "tok:13a" in hparams.bleu_signature
        assert len((job / "translations" / "test.hyp").read_text().splitlines()) == 60
        units = read_units(job / "test_units.npz")[0][""]  # each test sentence's NLL under its number
        assert units.index.tolist() == list(range(60))
        assert units.nats.sum() / units.tokens.sum() == pytest.approx(column(rows, "test/loss")[-1], rel=1e-4)
    texts = {read_units(job / "test_units.npz")[0][""].text for job in jobs.values()}
    assert len(texts) == 1  # the same sentences: the two runs pair sentence by sentence


def test_wandb_table_eval_and_translate_from_checkpoint(run_train, tmp_path, monkeypatch):
    from ablate.tracking.wandb_reader import read_offline_run

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run_train(*TINY_MT, "logger=wandb", "data.batch_size=2")
    job = next((tmp_path / "logs" / "runs").iterdir())
    status = json.loads((job / "status.json").read_text())
    assert status["steps"] == 6 and status["accumulate_grad_batches"] == 2  # two token batches per step
    record = read_offline_run(next((job / "wandb").glob("offline-run-*")))
    assert "tok:13a" in record["config"]["bleu_signature"]
    assert record["config"]["axes"]["norm"] == "post"  # task=translation's default placement
    assert sum(row.get("val/examples._type") == "table-file" for row in record["history"]) == 2, (
        "no W&B table per validation"
    )
    tables = sorted((job / "wandb").glob("offline-run-*/files/media/table/val/examples_*.table.json"))
    table = json.loads(tables[-1].read_text())
    assert table["columns"] == ["source", "reference", "hypothesis"] and len(table["data"]) == 5
    assert any("val/bleu" in row for row in record["history"])

    ckpt = job / "checkpoints" / "last.ckpt"
    env = {
        "ABLATE_DATA_DIR": str(SHARED_DATA),
        "ABLATE_CACHE_DIR": str(tmp_path.parent / "cache"),
        "HF_HUB_OFFLINE": "1",
        "PATH": "/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
    }
    src, ref = tmp_path / "in.de", tmp_path / "in.en"
    src.write_text("\n".join(first_lines(MULTI30K / "val.de.gz", 5)) + "\n")
    ref.write_text("\n".join(first_lines(MULTI30K / "val.en.gz", 5)) + "\n")
    proc = forked_python.run(
        [
            sys.executable,
            str(REPO / "eval.py"),
            f"ckpt_path={ckpt}",
            f"src_file={src}",
            f"ref_file={ref}",
            "beam_size=2",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sentences"] == 5 and "tok:13a" in result["signature"] and 0 <= result["bleu"] <= 100
    assert len(Path(result["hypotheses"]).read_text().splitlines()) == 5
    # the configured corpus' test split (found again under the current data dir)
    proc = forked_python.run(
        [sys.executable, str(REPO / "eval.py"), f"ckpt_path={ckpt}", "beam_size=1", "+data.max_eval_pairs=20"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["sentences"] == 20
    assert (job / "translations" / "test.hyp").exists()
    proc = forked_python.run(
        [sys.executable, str(REPO / "translate.py"), f"ckpt_path={ckpt}"],
        cwd=tmp_path,
        env=env,
        input="Ein Hund rennt.\nZwei Männer spielen Fußball.\n\n",
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(proc.stdout.split("\n")) == 4  # three lines out (the empty one too), trailing newline
    assert not list(tmp_path.glob("*.log")), "eval.py / translate.py left log files in the working directory"


def test_resume_continues_the_training_order_exactly(run_train, tmp_path, monkeypatch):
    """3 steps, stop, resume from last.ckpt to 6: the same losses as 6 steps in one go (the token
    batches' order, the RNG and the optimiser all continue where they stopped)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    args = [*TINY_MT, "logger=csv", "eval.test_at_end=false", "callbacks.checkpoint_last.every_n_train_steps=3"]
    run_train(*args, f"hydra.run.dir={tmp_path / 'resumed'}", "trainer.max_steps=3")
    run_train(*args, f"hydra.run.dir={tmp_path / 'resumed'}", "trainer.max_steps=6", "ckpt_path=last")
    run_train(*args, f"hydra.run.dir={tmp_path / 'straight'}", "trainer.max_steps=6")
    losses = {name: column(read_csv(tmp_path / name), "train/loss") for name in ("resumed", "straight")}
    assert len(losses["straight"]) == 6
    assert losses["resumed"] == pytest.approx(losses["straight"], rel=1e-6)
