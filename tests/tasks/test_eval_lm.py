"""eval.py on language-model checkpoints: loss and perplexity at one or more lengths, on the
checkpoint's corpus (test or val split) or on a text file, with the code train.py's post-fit
evaluation uses (ablate.tasks.lm_eval.evaluate_lengths), so both give the same numbers."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from ablate.data.tokenizers import CharTokenizer
from ablate.tasks.lm import LanguageModelTask
from ablate.tasks.lm_eval import TextFileData, evaluate_lengths
from helpers import forked_python
from helpers.checkpoints import quiet_trainer
from helpers.runs import HANG_TIMEOUT, REPO, TINY
from helpers.tiny_models import tiny_spec

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 12


def direct_loss(model, tokenizer, text: str, length: int) -> tuple[float, int]:
    """The oracle: mean NLL over every target of the text's non-overlapping windows of ``length``."""
    ids = torch.tensor(tokenizer.encode(text))
    n = (len(ids) - 1) // length
    x, y = ids[: n * length].view(n, length), ids[1 : n * length + 1].view(n, length)
    with torch.no_grad():
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item(), y.numel()


@pytest.mark.parametrize("split", ["test", "val"])
def test_text_file_at_each_length_is_the_token_weighted_nll(split, tmp_path):
    torch.manual_seed(0)
    tokenizer = CharTokenizer.from_text(TEXT)
    task = LanguageModelTask(tiny_spec(vocab_size=tokenizer.vocab_size, pos="rope").as_dict(), {"name": "adamw"}).eval()
    path = tmp_path / "text.txt"
    path.write_text(TEXT)
    dm = TextFileData(path, tokenizer, tmp_path, seq_len=16, eval_batch_size=3)  # batches of 48 tokens
    metrics, info = evaluate_lengths(quiet_trainer(), task, dm, [16, 64], split)
    for length in (16, 64):  # 64 is twice the model's max_len: RoPE extrapolates
        loss, tokens = direct_loss(task.model, tokenizer, TEXT, length)
        assert info[str(length)] == {"tokens": tokens}
        assert metrics[f"{split}/loss@{length}"] == pytest.approx(loss, rel=1e-5)
        assert metrics[f"{split}/ppl@{length}"] == pytest.approx(math.exp(loss), rel=1e-5)
    assert dm.eval_batch_size == max(1, 48 // 64)  # tokens per batch kept (use_eval_length)


def test_learned_positions_skip_lengths_beyond_the_table(tmp_path):
    tokenizer = CharTokenizer.from_text(TEXT)
    task = LanguageModelTask(tiny_spec(vocab_size=tokenizer.vocab_size).as_dict(), {"name": "adamw"}).eval()
    (tmp_path / "t.txt").write_text(TEXT)
    dm = TextFileData(tmp_path / "t.txt", tokenizer, tmp_path, seq_len=32, eval_batch_size=4)
    metrics, info = evaluate_lengths(quiet_trainer(), task, dm, [32, 64])
    assert "test/loss@32" in metrics and "test/loss@64" not in metrics
    assert "pos=learned has 32 positions" in info["64"]["skipped"]
    # the fix is a training command (eval.py has no model.* keys): issue 35 item 4
    assert "train with pos=rope, alibi, sinusoidal or none (python train.py pos=rope)" in info["64"]["skipped"]
    with pytest.raises(ValueError, match="split='train'"):
        evaluate_lengths(quiet_trainer(), task, dm, [32], "train")


def test_a_character_outside_the_vocabulary_names_the_file(tmp_path):
    path = tmp_path / "euro.txt"
    path.write_text("a price of 5 €\n")
    dm = TextFileData(path, CharTokenizer.from_text("a price of 5\n"), tmp_path, seq_len=4, eval_batch_size=2)
    with pytest.raises(ValueError, match=r"euro\.txt: character '€' is not in the vocabulary"):
        dm.setup("test")


def test_seq_lens_must_be_positive_lengths():
    from omegaconf import OmegaConf

    from ablate.tasks.lm_eval import eval_lengths as lengths

    assert lengths(OmegaConf.create({"seq_lens": [128, 256]})) == [128, 256]
    assert lengths(OmegaConf.create({"seq_lens": 64})) == [64]
    assert lengths(OmegaConf.create({"seq_lens": None})) is None
    for bad in ([0], [16, "x"], [], [True]):
        with pytest.raises(SystemExit, match="positive lengths"):
            lengths(OmegaConf.create({"seq_lens": bad}))


@pytest.mark.slow
def test_eval_py_gives_train_py_numbers(run_train, tmp_path, data_dir):
    """Train on text files whose val and test splits differ, with eval.seq_lens; eval.py on the
    checkpoint reproduces the post-fit test/loss@L and the final val/loss, evaluates a text file,
    finds the corpus of an older checkpoint (no data config) from overrides, and refuses a corpus
    whose tokenizer is not the checkpoint's."""
    text = (data_dir / "tinyshakespeare" / "input.txt").read_text()
    files = {"train": text[:100_000], "val": text[100_000:110_000], "test": text[110_000:125_000]}
    for split, part in files.items():
        (tmp_path / f"{split}.txt").write_text(part)
    data = [f"data.{s}_path={tmp_path / f'{s}.txt'}" for s in files]
    tiny = [a for a in TINY if not a.startswith(("+trainer.limit_test_batches", "trainer.limit_val_batches"))]
    run_train(
        *tiny,
        "data=text",
        *data,
        "pos=rope",
        "logger=csv",
        "data.eval_batch_size=64",
        "eval.seq_lens=[16,32]",
        "optim.lr=0.03",
    )  # away from the uniform prediction, where every split has the same loss
    job = next((tmp_path / "logs" / "runs").iterdir())
    status = json.loads((job / "status.json").read_text())
    ckpt = job / "checkpoints" / "last.ckpt"
    env = {
        **os.environ,
        "ABLATE_DATA_DIR": str(data_dir),
        "ABLATE_CACHE_DIR": str(tmp_path.parent / "cache"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }

    def eval_py(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        proc = forked_python.run(
            [sys.executable, str(REPO / "eval.py"), f"ckpt_path={ckpt}", *args],
            check=False,
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=HANG_TIMEOUT,
        )
        assert (proc.returncode == 0) == ok, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc

    def result(proc: subprocess.CompletedProcess) -> dict:
        return json.loads(proc.stdout.strip().splitlines()[-1])

    proc = eval_py("seq_lens=[16,32]")
    test = result(proc)
    assert test["split"] == "test" and test["corpus"] == "text"
    # eval.py's console carries none of Lightning's known noise either (issue 35.9; ablate.cli.task)
    noise = ("TPU available", "litlogger", "LeafSpec")
    assert [n for n in noise if n in proc.stdout + proc.stderr] == [], proc.stderr[-2000:]
    for length in ("16", "32"):
        got = test["lengths"][length]
        assert got["loss"] == pytest.approx(status["metrics"][f"test/loss@{length}"], rel=1e-5)
        assert got["ppl"] == pytest.approx(math.exp(got["loss"]), rel=1e-6)
        assert got["tokens"] == status["eval_lengths"][length]["tokens"]

    val = result(eval_py("split=val", "seq_lens=[16]"))["lengths"]["16"]
    assert val["loss"] == pytest.approx(status["metrics"]["val/loss"], rel=1e-5)  # the last validation, whole split
    assert val["loss"] != pytest.approx(test["lengths"]["16"]["loss"], rel=1e-3)  # another split indeed

    sample = tmp_path / "sample.txt"
    sample.write_text(files["val"][:3000])
    proc = eval_py(f"text_file={sample}", "seq_lens=[8,16]")
    assert "seq_len=8: loss = " in proc.stdout
    on_text = result(proc)
    assert on_text["text_file"] == str(sample)
    model = LanguageModelTask.load_from_checkpoint(str(ckpt), map_location="cpu").eval()
    for length in (8, 16):
        loss, tokens = direct_loss(model.model, model.tokenizer, files["val"][:3000], length)
        assert on_text["lengths"][str(length)]["loss"] == pytest.approx(loss, rel=1e-5)
        assert on_text["lengths"][str(length)]["tokens"] == tokens

    # an older checkpoint: no data config; the corpus comes from default_data and the overrides
    checkpoint = torch.load(ckpt, map_location="cpu", weights_only=False)
    del checkpoint["hyper_parameters"]["data"]
    ckpt = tmp_path / "old.ckpt"
    torch.save(checkpoint, ckpt)
    proc = eval_py("default_data=text", *(f"+{d}" for d in data), "seq_lens=[16]")
    assert "carries no data config" in proc.stdout
    assert result(proc)["lengths"]["16"]["loss"] == pytest.approx(test["lengths"]["16"]["loss"], rel=1e-5)
    proc = eval_py("seq_lens=[16]", ok=False)  # tinyshakespeare: 65 characters, not the checkpoint's
    assert "the data's tokenizer (char, 65 tokens) is not the checkpoint's" in proc.stderr
    (tmp_path / "x.de").write_text("ein hund\n")  # a file that exists: the refusal is about the task
    proc = eval_py("src_file=x.de", ok=False)
    assert "holds a task=lm checkpoint; src_file apply to task=translation" in proc.stderr
    assert not list(tmp_path.glob("*.log"))


# ----------------------------------------------------------------------------- bits per byte (issue 18.4)


def _bpb_of(task, tokenizer, ids: torch.Tensor) -> dict:
    task.tokenizer = tokenizer
    x, y = ids[:-1].view(1, -1), ids[1:].view(1, -1)
    with torch.no_grad():
        task._eval_step((x, y))
    return {k: float(v) for k, v in task.eval_metrics("val").items()}


def test_bpb_of_the_char_tokenizer_on_ascii_is_loss_over_ln2():
    torch.manual_seed(0)
    tokenizer = CharTokenizer.from_text(TEXT)
    task = LanguageModelTask(tiny_spec(vocab_size=tokenizer.vocab_size).as_dict(), {"name": "adamw"}).eval()
    metrics = _bpb_of(task, tokenizer, torch.tensor(tokenizer.encode(TEXT[:33])))
    assert metrics["val/bpb"] == pytest.approx(metrics["val/loss"] / math.log(2), rel=1e-6)
    task.tokenizer = None  # no tokenizer (a bare task): loss and ppl only
    task._eval_step((torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long)))
    assert set(task.eval_metrics("test")) == {"test/loss", "test/ppl"}


def test_bpb_of_bpe_is_nats_over_the_bytes_of_the_text():
    """Byte-level BPE on text with multi-byte characters: a hand computation from the model's
    per-token NLL and the UTF-8 bytes of the text the predicted tokens decode to."""
    from ablate.data.tokenizers import BPETokenizer
    from ablate.tasks.lm import token_byte_lengths

    text = ("Café naïve — “quoted” €5, ça va? " * 40) + TEXT
    tokenizer = BPETokenizer.train(text, vocab_size=300)
    lengths = token_byte_lengths(tokenizer)
    assert lengths.min() >= 1 and lengths.max() > 1
    sample = "Un café naïve — “€5”, ça va?\n"
    ids = tokenizer.encode(sample)
    assert sum(int(lengths[i]) for i in ids) == len(sample.encode("utf-8"))  # every byte counted once
    torch.manual_seed(0)
    task = LanguageModelTask(tiny_spec(vocab_size=tokenizer.vocab_size).as_dict(), {"name": "adamw"}).eval()
    ids_t = torch.tensor(ids)
    metrics = _bpb_of(task, tokenizer, ids_t)
    with torch.no_grad():
        nll = F.cross_entropy(task.model(ids_t[:-1].view(1, -1)).flatten(0, 1), ids_t[1:], reduction="sum").item()
    covered = len(tokenizer.decode(ids[1:]).encode("utf-8"))  # the text the predicted tokens cover
    assert metrics["val/bpb"] == pytest.approx(nll / (math.log(2) * covered), rel=1e-5)
    assert metrics["val/bpb"] != pytest.approx(metrics["val/loss"] / math.log(2), rel=1e-2)  # tokens are not bytes


def test_bpb_at_each_eval_length(tmp_path):
    torch.manual_seed(0)
    tokenizer = CharTokenizer.from_text(TEXT)
    task = LanguageModelTask(tiny_spec(vocab_size=tokenizer.vocab_size, pos="rope").as_dict(), {"name": "adamw"}).eval()
    task.tokenizer = tokenizer
    (tmp_path / "t.txt").write_text(TEXT)
    dm = TextFileData(tmp_path / "t.txt", tokenizer, tmp_path, seq_len=16, eval_batch_size=3)
    metrics, _ = evaluate_lengths(quiet_trainer(), task, dm, [16, 32])
    for length in (16, 32):
        assert metrics[f"test/bpb@{length}"] == pytest.approx(metrics[f"test/loss@{length}"] / math.log(2), rel=1e-5)


def test_bpb_is_lower_is_better():
    from ablate.analysis.job import higher_is_better

    assert not higher_is_better("val/bpb") and not higher_is_better("test/bpb@512") and higher_is_better("val/bleu")


@pytest.mark.integration
def test_eval_py_prints_a_number_per_length_where_positions_extrapolate(tmp_path):
    """Issue 35 item 4: past the training length, a RoPE checkpoint gives a number at every length; a
    learned table evaluates up to its size and names the training command for longer ones."""
    from helpers.checkpoints import lm_checkpoint

    (tmp_path / "t.txt").write_text(TEXT)
    outputs = {}
    for pos in ("rope", "learned"):
        ckpt = lm_checkpoint(tmp_path / f"{pos}.ckpt", pos=pos)  # max_len 32: the training length
        proc = forked_python.run(
            [sys.executable, str(REPO / "eval.py"), f"ckpt_path={ckpt}", "text_file=t.txt", "seq_lens=[32,64]"],
            cwd=tmp_path,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=HANG_TIMEOUT,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        outputs[pos] = proc.stdout
    assert "seq_len=32: loss = " in outputs["rope"] and "seq_len=64: loss = " in outputs["rope"]
    assert "seq_len=32: loss = " in outputs["learned"]
    assert "seq_len=64: skipped (pos=learned has 32 positions" in outputs["learned"]
    assert "(python train.py pos=rope)" in outputs["learned"]
