"""The translation task's pieces: config composition (`task=translation`), the data module (joint
BPE, token batching, both directions, offline failures), the loss and the training order."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from ablate.config import ConfigError, ModelSpec, model_spec, validate
from ablate.data.samplers import ResumableSampler
from ablate.data.sources import DataNotFoundError
from ablate.data.translation_data import (
    BOS,
    EOS,
    PAD,
    ParallelCorpus,
    collate,
    detokenize,
    encode_lines,
    make_batches,
    padding_fraction,
)
from ablate.tasks import build_task
from ablate.tasks.translation import TranslationTask, corpus_bleu
from conftest import SHARED_DATA

CONF = Path(__file__).resolve().parents[1] / "conf"
MULTI30K = SHARED_DATA / "multi30k"


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# ----------------------------------------------------------------------------------------------
# configuration


@pytest.fixture(scope="module")
def hydra_init():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


def test_task_translation_selects_translation_defaults(hydra_init):
    cfg = compose(config_name="train", overrides=["task=translation"])
    assert cfg.task.name == "translation"
    assert cfg.data._target_.endswith("ParallelCorpus") and cfg.data.name == "multi30k"
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("de", "en")
    assert cfg.optim.schedule == "inverse_sqrt" and list(cfg.optim.betas) == [0.9, 0.98]
    assert cfg.optim.label_smoothing == 0.1
    assert (cfg.pos.name, cfg.norm.placement, cfg.act.name, cfg.init.name) == ("sinusoidal", "post", "relu", "xavier")
    assert cfg.model.encoder_layers > 0 and cfg.model.decoder_layers > 0
    assert cfg.decode.beam_size >= 1
    spec = model_spec(cfg, vocab_size=100, max_len=cfg.data.seq_len)
    assert (spec.encoder_layers, spec.n_layers) == (cfg.model.encoder_layers, cfg.model.decoder_layers)


def test_command_line_and_experiment_override_the_task_defaults(hydra_init):
    cfg = compose(
        config_name="train",
        overrides=[
            "task=translation",
            "data=iwslt14",
            "norm=pre",
            "model=transformer_iwslt_de_en",
            "model.encoder_layers=2",
        ],
    )
    assert cfg.data.name == "iwslt14" and cfg.norm.placement == "pre"
    spec = model_spec(cfg, vocab_size=100, max_len=256)
    assert (spec.encoder_layers, spec.n_layers, spec.d_model, spec.n_heads, spec.d_ff) == (2, 6, 512, 4, 1024)
    exp = compose(config_name="train", overrides=["experiment=multi30k_small"])
    assert exp.task.name == "translation" and exp.norm.placement == "pre" and exp.data.max_tokens == 2048
    base = compose(config_name="train", overrides=["task=translation", "model=transformer_base"])
    spec = model_spec(base, vocab_size=37000, max_len=256)
    assert (spec.encoder_layers, spec.n_layers, spec.d_model, spec.n_heads, spec.d_ff) == (6, 6, 512, 8, 2048)
    # the LM default is untouched
    lm = compose(config_name="train")
    assert lm.task.name == "lm" and lm.data._target_.endswith("TinyShakespeare") and lm.pos.name == "learned"


def test_task_and_data_must_match(hydra_init):
    cfg = compose(config_name="train", overrides=["task=translation"])
    spec = validate(ModelSpec(vocab_size=20, n_layers=1, encoder_layers=1, d_model=16, n_heads=2, d_ff=32, max_len=16))
    with pytest.raises(ConfigError, match="parallel corpus"):
        build_task(cfg, object(), spec)
    lm_cfg = compose(config_name="train")
    dm = ParallelCorpus.__new__(ParallelCorpus)
    with pytest.raises(ConfigError, match="task=translation"):
        build_task(lm_cfg, dm, spec)
    with pytest.raises(ConfigError, match="encoder"):
        build_task(cfg, dm, validate(ModelSpec(vocab_size=20, n_layers=1, d_model=16, n_heads=2, d_ff=32, max_len=16)))


# ----------------------------------------------------------------------------------------------
# batching


def test_token_batches_respect_max_tokens_cover_every_pair_and_pad_little():
    rng = np.random.default_rng(0)
    src = rng.integers(2, 60, 3000)
    tgt = np.clip(src + rng.integers(-5, 6, 3000), 2, None)
    batches = make_batches(src, tgt, max_tokens=1000)
    assert sorted(np.concatenate(batches).tolist()) == list(range(3000))
    for b in batches:
        assert len(b) * max(src[b].max(), tgt[b].max()) <= 1000
    sorted_frac = padding_fraction(src, tgt, batches)
    shuffled = np.array_split(rng.permutation(3000), len(batches))
    assert sorted_frac < 0.1 < padding_fraction(src, tgt, shuffled)
    assert len(make_batches(src, tgt, max_tokens=1000, max_sentences=8)) >= 3000 // 8


def test_collate_layout():
    b = collate([np.array([5, 6, 7]), np.array([8])], [np.array([9, 10]), np.array([11, 12, 13])], torch.tensor([4, 2]))
    assert b.src.tolist() == [[5, 6, 7, EOS], [8, EOS, PAD, PAD]]
    assert b.tgt_in.tolist() == [[BOS, 9, 10, PAD], [BOS, 11, 12, 13]]
    assert b.tgt_out.tolist() == [[9, 10, EOS, PAD], [11, 12, 13, EOS]]
    assert b.index.tolist() == [4, 2] and b[0] is b.src


def test_training_order_shuffles_per_epoch_splits_ranks_and_resumes():
    data = list(range(10))
    s = ResumableSampler(data, batch_size=1, seed=3)  # one item = one token batch
    s.set_epoch(0)
    e0 = list(s)
    s.set_epoch(1)
    e1 = list(s)
    assert sorted(e0) == sorted(e1) == data and e0 != e1
    ranks = [ResumableSampler(data, batch_size=1, num_replicas=2, rank=r, seed=3) for r in (0, 1)]
    parts = [list(r) for r in ranks]
    assert len(parts[0]) == len(parts[1]) == 5 and sorted(parts[0] + parts[1]) == data
    s.set_epoch(0)
    s.resume_at(0, 4)
    assert list(s) == e0[4:]
    assert list(s) == e0  # resuming applies once


# ----------------------------------------------------------------------------------------------
# the loss


def test_loss_ignores_padding_and_smooths_as_documented():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11)
    target = torch.tensor([[3, 4, 5, EOS, PAD], [6, 7, 8, 9, EOS]])
    real = target != PAD
    lp = logits.log_softmax(-1)
    nll = -lp.gather(-1, target[..., None]).squeeze(-1)[real].mean()
    smooth = -lp.mean(-1)[real].mean()
    eps = 0.1
    assert TranslationTask.token_nll(logits, target) == pytest.approx(float(nll), rel=1e-5)
    assert TranslationTask.token_nll(logits, target, eps) == pytest.approx(
        float((1 - eps) * nll + eps * smooth), rel=1e-5
    )
    # what the padded position holds does not matter
    other = logits.clone()
    other[0, 4] = 100 * torch.randn(11)
    assert TranslationTask.token_nll(other, target, eps) == TranslationTask.token_nll(logits, target, eps)


def test_corpus_bleu_and_signature():
    score, signature = corpus_bleu(["A man rides a bike ."], ["A man rides a bike ."])
    assert score == pytest.approx(100.0)
    assert "tok:13a" in signature and "case:mixed" in signature and "version:" in signature
    assert corpus_bleu(["dog"], ["A man rides a bike ."])[0] < 5


# ----------------------------------------------------------------------------------------------
# corpora


def multi30k(cache_dir: Path, **kw) -> ParallelCorpus:
    cfg = OmegaConf.load(CONF / "data" / "multi30k.yaml")
    cfg.data_dir, cfg.cache_dir, cfg.vocab_size = str(SHARED_DATA), str(cache_dir), 1000
    for k, v in kw.items():
        cfg[k] = v
    return instantiate(cfg)


@pytest.fixture(scope="module")
def m30k_cache(tmp_path_factory) -> Path:
    if not (MULTI30K / "train.de.gz").exists():
        pytest.skip(f"Multi30k is not at {MULTI30K}")
    return tmp_path_factory.mktemp("m30k-cache")


def test_multi30k_local_files_both_directions_one_cache(m30k_cache):
    de_en = multi30k(m30k_cache)
    de_en.setup()
    assert de_en.vocab_size == 1000
    assert [len(de_en.datasets[s].src) for s in ("train", "val", "test")] == [29000, 1014, 1000]
    assert len(de_en.references("test")) == 1000 and de_en.sources("test")[0].startswith(
        "Ein Mann mit einem orangefarbenen Hut"
    )
    assert de_en.padding_fraction["train"] < 0.1
    train = de_en.datasets["train"]
    for i in range(0, len(train), 7):
        b = train[i]
        assert max(b.src.size(1), b.tgt_in.size(1)) * b.src.size(0) <= de_en.max_tokens
        assert ((b.src == EOS).sum(1) == 1).all() and (b.tgt_in[:, 0] == BOS).all()
    # byte-level BPE gives the raw text back exactly (so BLEU is computed on detokenised text)
    refs = de_en.references("val")[:50]
    assert [detokenize(de_en.tokenizer, ids) for ids in encode_lines(de_en.tokenizer, refs)] == refs
    # the other direction: the same cache folder, sides swapped
    en_de = multi30k(m30k_cache, src_lang="en", tgt_lang="de")
    assert en_de.cache_path() == de_en.cache_path()
    en_de.setup()
    assert en_de.references("test") == de_en.sources("test")
    assert np.array_equal(en_de.datasets["val"].src[3], de_en.datasets["val"].tgt[3])


def test_missing_corpus_fails_fast_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("iwslt14", "iwslt2017", "wmt14", "multi30k"):
        cfg = OmegaConf.load(CONF / "data" / f"{name}.yaml")
        cfg.data_dir, cfg.cache_dir = str(tmp_path / "nothing"), str(tmp_path / "cache")
        dm = instantiate(cfg)
        start = time.perf_counter()
        with pytest.raises(DataNotFoundError) as err:
            dm.prepare_data()
        assert time.perf_counter() - start < 30
        msg = str(err.value)
        assert cfg.hub_path in msg and str(tmp_path / "nothing" / cfg.local_dir) in msg and "ABLATE_DATA_DIR" in msg
    # a half-copied local folder names the missing files instead of going to the Hub
    folder = tmp_path / "partial" / "multi30k"
    folder.mkdir(parents=True)
    (folder / "train.de").write_text("Hallo\n")
    dm = multi30k(tmp_path / "cache", data_dir=str(tmp_path / "partial"))
    with pytest.raises(DataNotFoundError, match="test_2016_flickr.en"):
        dm.prepare_data()


def test_parallel_files_plain_and_gzipped(tmp_path):
    import gzip

    lines_src = [f"quelle {i} wort" for i in range(40)]
    lines_tgt = [f"source {i} word" for i in range(40)]
    (tmp_path / "tr.src").write_text("\n".join(lines_src) + "\n")
    with gzip.open(tmp_path / "tr.tgt.gz", "wt") as f:
        f.write("\n".join(lines_tgt) + "\n")
    cfg = OmegaConf.load(CONF / "data" / "parallel.yaml")
    cfg.update(
        data_dir=str(tmp_path),
        cache_dir=str(tmp_path / "cache"),
        train_src="tr.src",
        train_tgt="tr.tgt.gz",
        val_src=str(tmp_path / "tr.src"),
        val_tgt="tr.tgt.gz",
        vocab_size=300,
        max_tokens=256,
    )
    dm = instantiate(cfg)
    dm.setup()
    assert dm.references("test") == lines_tgt and dm.sources("val") == lines_src
    assert sum(len(b) for b in dm.datasets["train"].batches) == 40
    cfg.train_src = "missing.src"
    with pytest.raises(DataNotFoundError, match="missing.src"):
        instantiate(cfg).prepare_data()


def test_throughput_counts_source_and_target_tokens():
    """train/tokens_per_sec and train/tokens_seen count what both stacks process (issue 11)."""
    from ablate.callbacks.throughput import batch_tokens
    from ablate.data.translation_data import PairBatch
    from ablate.tasks.translation import TranslationTask

    batch = PairBatch(
        src=torch.zeros(4, 7, dtype=torch.long),
        tgt_in=torch.zeros(4, 5, dtype=torch.long),
        tgt_out=torch.zeros(4, 5, dtype=torch.long),
        index=torch.arange(4),
    )
    task = TranslationTask.__new__(TranslationTask)  # no model needed to count
    assert batch_tokens(task, batch) == 4 * 7 + 4 * 5
    assert batch_tokens(object(), (torch.zeros(4, 16), torch.zeros(4, 16))) == 64  # a task without its own count
