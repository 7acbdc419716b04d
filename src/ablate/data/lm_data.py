"""Language-modelling data: corpora tokenised once into memory-mapped token files.

``LMDataModule`` does the caching and data loading; each corpus subclass only says where its text
comes from (:meth:`LMDataModule.source_key`, :meth:`LMDataModule.split_texts`). The windows a
token file is cut into are :mod:`ablate.data.lm_windows`.

The text is never held whole: each split is streamed from disk (or the Hub) in chunks
(:class:`~ablate.data.text_stream.SplitText`), the tokenizer is fitted on that stream (or on a
sample of its first ``bpe_train_mb`` MB) and the ids are appended to the token file batch by
batch, so memory stays flat in the corpus's size; the BPE encodes each batch with all cores.

Cache layout, one folder per corpus/tokenizer/source version::

    {cache_dir}/{corpus}-{tokenizer}[-{vocab_size}]-{hash}/
        train.bin  val.bin  test.bin   flat token ids (uint16, or uint32 for vocabularies > 65536)
        char_vocab.json | tokenizer.json
        meta.json                      written last; sizes and SHA-256 of the other files

The folder is built under a temporary name and renamed into place, so a folder with the
final name is always complete and a killed run never leaves a half cache that is trusted; a
damaged file is detected and the cache rebuilt (:mod:`ablate.data.cache`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch.utils.data import DataLoader

from ablate.data.cache import (
    CacheCorruptError,
    check_free_space,
    file_fingerprint,
    read_meta,
    sha256_file,
    write_meta,
)
from ablate.data.corpus import CachedCorpus
from ablate.data.lm_windows import TokenWindows, collate_windows, token_dtype
from ablate.data.progress import Progress
from ablate.data.samplers import ResumableSampler
from ablate.data.sources import (
    DataNotFoundError,
    default_cache_dir,
    default_data_dir,
    download_url,
    load_hub_dataset,
    missing_file_message,
    read_utf8,
    resolve_local,
)
from ablate.data.text_stream import SplitText
from ablate.data.tokenizers import Tokenizer, build_tokenizer, tokenizer_class
from ablate.errors import UserError

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
# bump when the cached files or the split logic change (2: checksums in meta.json; 3: streamed from
# files in chunks cut by bytes, which moves some BPE chunk boundaries of non-ASCII corpora over 16 MB)
CACHE_FORMAT_VERSION = 3


class SplitTooShortError(UserError, ValueError):
    """A split has fewer tokens than one window (or one batch of windows) needs; found once the corpus
    is tokenised. The message names the split, its size and the setting to lower."""


class LMDataModule(CachedCorpus):
    """Base class: tokenise a corpus once, cache it, serve fixed-length windows.

    Args:
        data_dir: folder with the raw corpora (may be read-only); default ``$ABLATE_DATA_DIR`` or ``./data``.
        cache_dir: folder for tokenised caches; default ``$ABLATE_CACHE_DIR`` or ``./cache``.
        tokenizer: ``"char"`` or ``"bpe"``.
        vocab_size: target BPE vocabulary size (ignored for ``char``). The actual size is
            :attr:`vocab_size` after :meth:`setup`.
        seq_len: training context length.
        eval_seq_len: validation/test context length; ``None`` means ``seq_len``. May be
            longer than ``seq_len`` (length-extrapolation experiments; ``eval.seq_len`` in
            ``conf/train.yaml`` sets it, :meth:`use_eval_length` changes it after training).
        batch_size: the global training batch: sequences per optimiser step, over all devices and
            gradient-accumulation steps together. Each training DataLoader batch (one device, one
            micro-batch) is ``batch_size / (world size x accumulate_grad_batches)`` of the Trainer
            it runs under (all of it without a Trainer); an error when that does not divide.
        micro_batch_size: optional check of that per-device batch: ``train.py`` derives the
            Trainer's gradient accumulation from it; ``None`` means no check.
        eval_batch_size: validation/test batch size per device; ``None`` means the per-device
            training batch.
        num_workers, pin_memory: passed to every DataLoader.
        train_stride: distance between the starts of training windows; ``None`` means
            ``seq_len`` (non-overlapping), 1 makes every offset a window (random windows, as
            nanoGPT samples them). Evaluation windows never overlap.
        seed: seed of the training order (:class:`ResumableSampler`); ``train.py`` passes the
            run's ``seed``.
        bpe_train_mb: learn the BPE merges on the first this many MB of the training text
            (whole chunks) instead of all of it, as large tokenizer trainings do; ``None``: all.
            Every token file still holds the whole corpus.

    The training order is split across ranks and micro-batches by :class:`ResumableSampler`. The
    position in the training order is part of the checkpoint (:meth:`state_dict`), so a
    resumed run continues with the next unseen batch instead of restarting the epoch.

    After ``prepare_data(); setup("fit")``: :attr:`tokenizer` (a :class:`Tokenizer`),
    :attr:`vocab_size` (int), :attr:`datasets` (split name -> :class:`TokenWindows`).
    """

    name: str | None = "corpus"
    """Corpus name, used in cache folder names and messages."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        tokenizer: str = "char",
        vocab_size: int = 2048,
        seq_len: int = 256,
        eval_seq_len: int | None = None,
        batch_size: int = 32,
        micro_batch_size: int | None = None,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        train_stride: int | None = None,
        seed: int = 0,
        bpe_train_mb: float | None = None,
    ) -> None:
        super().__init__()
        tokenizer_class(tokenizer)  # fail at construction on a typo, not after loading data
        if bpe_train_mb is not None and tokenizer != "bpe":
            raise ValueError(f"bpe_train_mb={bpe_train_mb} applies to tokenizer=bpe only, not tokenizer={tokenizer}")
        if bpe_train_mb is not None and not bpe_train_mb > 0:
            raise ValueError(f"bpe_train_mb must be positive (or null for the whole train split), got {bpe_train_mb}")
        for arg, value in {
            "seq_len": seq_len,
            "eval_seq_len": eval_seq_len,
            "batch_size": batch_size,
            "micro_batch_size": micro_batch_size,
            "eval_batch_size": eval_batch_size,
            "vocab_size": vocab_size,
        }.items():
            if value is not None and value < 1:
                raise ValueError(f"{arg} must be positive, got {value}")
        # No save_hyperparameters(): Lightning refuses to log a datamodule whose hparams share
        # a key with the model's but differ (here `vocab_size`: requested vs actual).
        self.data_dir = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        self.tokenizer_kind = tokenizer
        self.bpe_vocab_size = vocab_size
        self.seq_len = seq_len
        self.eval_seq_len = eval_seq_len or seq_len
        self.batch_size = batch_size
        self.micro_batch_size = micro_batch_size
        self._eval_batch_size = eval_batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.train_stride = train_stride
        self.seed = seed
        self.bpe_train_mb = bpe_train_mb
        self._eval_tokens_per_batch: int | None = None  # fixed by the first use_eval_length()
        self.tokenizer: Tokenizer | None = None
        self.vocab_size: int | None = None
        self.datasets: dict[str, TokenWindows] = {}

    # --- what a corpus provides ------------------------------------------------------

    def source_key(self) -> Any:
        """JSON-able identity of the raw sources, hashed into the cache folder name.

        Must be cheap (no reading of the text); may download a missing file first.
        """
        raise NotImplementedError

    def split_texts(self) -> dict[str, SplitText]:
        """The ``train``, ``val`` and ``test`` splits, each a stream of text chunks."""
        raise NotImplementedError

    def split_blocks(self) -> dict[str, list[SplitText]]:
        """Splits made of several disjoint blocks of the corpus (Tiny Shakespeare's
        ``splits=blocks``): split -> its blocks in order, tokenised one after the other into the
        split's token file, their token boundaries recorded in ``meta.json`` (``blocks``) so that
        a test window knows its block (:mod:`ablate.eval_units`). Default: none."""
        return {}

    @classmethod
    def validation_as_test(cls, config: Mapping[str, Any]) -> str | None:
        """Why the test split that ``config`` (a ``data`` config of this class) gives is the validation
        text, or None when it is a text of its own: a verdict read on it after a selection on
        validation (``tune=lr``) would grade itself, which the tuned sweeper warns about."""
        return None

    # --- caching -------------------------------------------------------------------

    @property
    def tokens_per_batch(self) -> int:
        """Training tokens per optimiser step (``batch_size * seq_len``), for throughput logging."""
        return self.batch_size * self.seq_len

    def device_batch_size(self) -> int:
        """Sequences per training DataLoader batch: the global batch over the Trainer's world
        size and gradient accumulation steps."""
        trainer = self.trainer
        world, accumulate = (trainer.world_size, trainer.accumulate_grad_batches) if trainer is not None else (1, 1)
        if self.batch_size % (world * accumulate):
            raise ValueError(
                f"data.batch_size={self.batch_size} (the global batch) is not divisible by world size {world} x "
                f"gradient accumulation {accumulate}"
            )
        size = self.batch_size // (world * accumulate)
        if trainer is not None and self.micro_batch_size and self.micro_batch_size != size:
            raise ValueError(
                f"data.micro_batch_size={self.micro_batch_size} but the Trainer makes micro-batches of {size} "
                f"(data.batch_size={self.batch_size} / world size {world} / accumulate_grad_batches {accumulate})"
            )
        return size

    @property
    def eval_batch_size(self) -> int:
        return self._eval_batch_size or self.device_batch_size()

    def use_eval_length(self, seq_len: int) -> None:
        """Evaluate at ``seq_len`` from now on (length extrapolation; ``train.py`` does this for
        ``eval.seq_lens``): validation and test become non-overlapping windows of ``seq_len``
        tokens, and the per-device eval batch changes so that a batch holds about as many tokens
        as at the first eval length (at least one window), which keeps memory flat."""
        if self._eval_tokens_per_batch is None:
            self._eval_tokens_per_batch = self.eval_batch_size * self.eval_seq_len
        self.eval_seq_len = seq_len
        self._eval_batch_size = max(1, self._eval_tokens_per_batch // seq_len)
        for split in ("val", "test"):
            self.datasets.pop(split, None)  # rebuilt with the new length on the next setup()

    def cache_path(self) -> Path:
        """The cache folder for the current sources and tokenizer settings."""
        key = json.dumps(
            {"format": CACHE_FORMAT_VERSION, "corpus": self.name, "sources": self.source_key()}, sort_keys=True
        )
        if self.tokenizer_kind == "bpe" and self.bpe_train_mb is not None:
            key += f"|bpe_train_mb={self.bpe_train_mb:g}"  # other merges, other tokens
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        vocab = f"-{self.bpe_vocab_size}" if self.tokenizer_kind == "bpe" else ""
        return self.cache_dir / f"{self.name}-{self.tokenizer_kind}{vocab}-{digest}"

    def _fit_texts(self, texts: dict[str, SplitText]) -> Iterator[str]:
        """The stream the tokenizer is fitted on."""
        if self.tokenizer_kind == "char":
            # nanoGPT's convention: the character set of the whole corpus, so no split has unknown characters
            for split in SPLITS:
                yield from texts[split].open()
        elif self.bpe_train_mb is not None:
            yield from texts["train"].limited(int(self.bpe_train_mb * 1e6))
        else:
            yield from texts["train"].open()  # BPE merges are learned on the training text only

    def _build_cache(self, folder: Path) -> None:
        texts = self.split_texts()
        cls = tokenizer_class(self.tokenizer_kind)
        what = "characters of every split" if self.tokenizer_kind == "char" else "the train split"
        log.info("Fitting the %s tokenizer of %s on %s", self.tokenizer_kind, self.name, what)
        fit = self._fit_texts(texts)
        tokenizer = build_tokenizer(self.tokenizer_kind, fit, self.bpe_vocab_size, folder / cls.FILENAME)
        dtype = token_dtype(tokenizer.vocab_size)
        check_free_space(folder, self._token_bytes_estimate(tokenizer, texts, dtype))
        blocks = self.split_blocks()
        counts, bounds = {}, {}
        for split in SPLITS:
            path = folder / f"{split}.bin"
            if split not in blocks:
                counts[split] = self._write_tokens(tokenizer, texts[split], path, dtype, self.name)
                continue
            bounds[split] = [0]
            for i, part in enumerate(blocks[split]):
                n = self._write_tokens(tokenizer, part, path, dtype, self.name, append=i > 0)
                bounds[split].append(bounds[split][-1] + n)
            counts[split] = bounds[split][-1]
        meta = {
            "format": CACHE_FORMAT_VERSION,
            "corpus": self.name,
            "tokenizer": self.tokenizer_kind,
            "vocab_size": tokenizer.vocab_size,
            "dtype": dtype.name,
            "num_tokens": counts,
            "sources": self.source_key(),
            **({"blocks": bounds} if bounds else {}),
        }
        write_meta(folder, meta)  # last: marks the folder complete
        log.info(
            "Tokenised %s with %s (vocab %d): %s tokens", self.name, self.tokenizer_kind, tokenizer.vocab_size, counts
        )

    @staticmethod
    def _token_bytes_estimate(tokenizer: Tokenizer, texts: dict[str, SplitText], dtype: np.dtype) -> int | None:
        """About how many bytes the token files will take: the text's size times the tokens per
        byte of the train split's first chunk (a char tokenizer: at most one token per byte),
        with 10% to spare; None when a split's size is not known beforehand."""
        sizes = [text.num_bytes for text in texts.values()]
        if any(size is None for size in sizes):
            return None
        first = next(texts["train"].open(), "")
        per_byte = len(tokenizer.encode_array(first)) / max(len(first.encode("utf-8")), 1) if first else 1.0
        return int(1.1 * per_byte * dtype.itemsize * sum(size or 0 for size in sizes))

    @staticmethod
    def _write_tokens(
        tokenizer: Tokenizer, text: SplitText, path: Path, dtype: np.dtype, corpus: str | None, append: bool = False
    ) -> int:
        """Write (``append``: append) the ids of each encoded batch to ``path``; returns the number of tokens."""
        count = 0
        split = path.stem
        with (
            open(path, "ab" if append else "wb") as f,
            Progress(f"Tokenising {corpus} {split}", text.num_bytes) as progress,
        ):
            for ids, num_bytes in tokenizer.encode_stream(text.open()):
                ids.astype(dtype).tofile(f)
                count += ids.size
                progress.advance(num_bytes)
        return count

    # --- Lightning hooks -----------------------------------------------------------

    _STAGE_SPLITS: ClassVar[dict[str | None, tuple[str, ...]]] = {
        "fit": ("train", "val"),
        "validate": ("val",),
        "test": ("test",),
        "predict": (),
        None: SPLITS,
    }

    def setup(self, stage: str | None = None) -> None:
        """Memory-map the cached splits needed for ``stage``; set :attr:`tokenizer` and :attr:`vocab_size`."""
        folder = self.cache_path()
        try:
            meta = read_meta(folder)  # sizes checked: a truncated token file is not trained on
        except CacheCorruptError:  # none yet (setup() called first, no Trainer) or damaged since
            self.prepare_data()  # builds it, or verifies it and rebuilds it saying why
            meta = read_meta(folder)
        cls = tokenizer_class(self.tokenizer_kind)
        self.tokenizer = cls.load(folder / cls.FILENAME)
        self.vocab_size = int(meta["vocab_size"])
        for split in self._STAGE_SPLITS.get(stage, SPLITS):
            self.datasets[split] = self._windows(folder / f"{split}.bin", np.dtype(meta["dtype"]), split)

    def _windows(self, path: Path, dtype: np.dtype, split: str) -> TokenWindows:
        arg, seq_len = ("seq_len", self.seq_len) if split == "train" else ("eval_seq_len", self.eval_seq_len)
        windows = TokenWindows(path, dtype, seq_len, self.train_stride if split == "train" else None)
        if len(windows) == 0:
            raise SplitTooShortError(
                f"{arg}={seq_len} is too long for the {split} split of {self.name}: the split has "
                f"{windows.num_tokens} tokens and one window needs {arg} + 1 = {seq_len + 1}."
            )
        if split == "train" and len(windows) < self.batch_size:
            raise SplitTooShortError(
                f"the train split of {self.name} gives only {len(windows)} windows of seq_len={seq_len} "
                f"({windows.num_tokens} tokens), fewer than batch_size={self.batch_size}: with "
                f"drop_last no batch would be left. Lower batch_size or seq_len."
            )
        return windows

    def unit_text(self, split: str) -> dict[str, Any]:
        """What a per-window record of ``split`` needs (:mod:`ablate.eval_units`): ``text``, the
        key of the exact text and windowing (the token file's SHA-256 and the window length: two
        runs' windows pair only under equal keys), ``stride`` (tokens from one window's start to
        the next), ``bounds`` (the token boundaries of the split's held-out blocks, or None) and
        ``layout`` (the split scheme, when the corpus has several)."""
        windows = self._dataset(split)
        try:
            bounds = read_meta(windows.path.parent).get("blocks", {}).get(split)
        except CacheCorruptError:  # a token file outside a cache (eval.py text_file=...)
            bounds = None
        digest = sha256_file(windows.path)[:16]
        return {
            "text": f"{self.name}/{split}:{digest}:L{windows.seq_len}",
            "stride": windows.stride,
            "bounds": bounds,
            "layout": getattr(self, "splits", None),
        }

    def _dataset(self, split: str) -> TokenWindows:
        if split not in self.datasets:
            self.setup({"train": "fit", "val": "validate", "test": "test"}[split])
        return self.datasets[split]

    def _loader(self, split: str, batch_size: int, sampler: ResumableSampler | None = None) -> DataLoader:
        return DataLoader(
            self._dataset(split),
            batch_size=batch_size,
            sampler=sampler,  # training: ResumableSampler; evaluation: in order
            drop_last=sampler is not None,
            collate_fn=collate_windows,  # batches come gathered in one go (TokenWindows.__getitems__)
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0,
            # its own generator: starting an iteration (it draws the workers' base seed) then
            # leaves the global RNG alone, which a resumed run restores exactly
            generator=torch.Generator().manual_seed(self.seed),
        )

    def train_dataloader(self) -> DataLoader:
        size = self.device_batch_size()
        return self._loader("train", size, self.training_sampler(self._dataset("train"), size))

    def position(self, sampler: ResumableSampler, steps_done: int) -> dict[str, int]:
        """The samples (all ranks together) this epoch has consumed."""
        return {"samples_done": steps_done * sampler.batch_size * sampler.num_replicas}

    def resume_sampler(self, sampler: ResumableSampler, state: dict[str, int]) -> None:
        per_round = sampler.batch_size * sampler.num_replicas
        if state["samples_done"] % per_round:
            raise ValueError(
                f"cannot resume the training order: the checkpoint stopped {state['samples_done']} samples into "
                f"epoch {state['epoch']}, not a multiple of {sampler.num_replicas} devices x micro-batch "
                f"{sampler.batch_size}. Resume with the global batch size the checkpoint was trained with."
            )
        sampler.resume_at(state["epoch"], state["samples_done"] // per_round)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.eval_batch_size)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.eval_batch_size)


def _read(path: Path) -> str:
    return read_utf8(path)  # a non-UTF-8 file is named in the error


def _rows(dataset: Any, column: str) -> Iterator[str]:
    """The ``column`` of each row of a (streamed) dataset split."""
    for row in dataset:
        yield row[column]


class TinyShakespeare(LMDataModule):
    """Tiny Shakespeare (Karpathy's char-rnn corpus, 1.1 MB), cut at character offsets.

    Args:
        splits: ``"nanogpt"`` (default): first 90% of the characters train, last 10% validation,
            test = validation, as nanoGPT, so its numbers compare with nanoGPT's. ``"disjoint"``:
            the same training text, validation 90-95%, test the last 5%: a test text that a
            selection on validation (``tune=lr``) never saw, for a verdict that does not grade
            itself (the layout of the 2026-11-26 write-ups). ``"blocks"``: the corpus cut into 8
            equal segments, the first 90% of each trains, the last 10% is held out, test in
            segments 0, 2, 4, 6 and validation in 1, 3, 5, 7: validation and test are 4 blocks
            each (1.25% of the corpus, ~13.9k characters) spread through the whole play text, so
            a verdict is not about one passage (issue 34: Δ changed sign between quarters of the
            ``disjoint`` test text). Train 90%, validation 5%, test 5%, as ``disjoint``, but
            other text: its numbers compare with neither.
        **kwargs: the arguments of :class:`LMDataModule`.

    Read from ``{data_dir}/tinyshakespeare/input.txt``; downloaded from :attr:`URL` if missing.
    """

    name = "tinyshakespeare"
    URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
    RELPATH = "tinyshakespeare/input.txt"
    TRAIN_FRACTION = 0.9
    VAL_END_FRACTION = 0.95  # splits=disjoint: validation ends here, test is the rest
    SEGMENTS = 8  # splits=blocks: held-out blocks at the end of each segment, test and validation alternating
    CONFIG_CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"splits": ("nanogpt", "disjoint", "blocks")}

    def __init__(self, *args: Any, splits: str = "nanogpt", **kwargs: Any) -> None:
        valid = self.CONFIG_CHOICES["splits"]
        if splits not in valid:  # before anything is read or downloaded
            raise ValueError(f"splits={splits!r} is invalid: one of {', '.join(valid)}")
        super().__init__(*args, **kwargs)
        self.splits = splits

    @classmethod
    def validation_as_test(cls, config: Mapping[str, Any]) -> str | None:
        """With nanoGPT's splits the test text is the validation text (see the base class)."""
        if config.get("splits", "nanogpt") != "nanogpt":
            return None
        return (
            "data.splits=nanogpt: Tiny Shakespeare's test split is its validation text "
            "(data.splits=disjoint holds out a test text)"
        )

    def input_file(self) -> Path:
        """Path of ``input.txt``, downloading it into ``data_dir`` when missing."""
        return resolve_local(self.data_dir, self.RELPATH) or download_url(self.URL, self.data_dir / self.RELPATH)

    def source_key(self) -> Any:
        files = file_fingerprint({"input": self.input_file()}, memo_dir=self.cache_dir)
        # nanogpt keeps the key it always had, so its caches (and every number made with them) stay valid
        return files if self.splits == "nanogpt" else {"input": files, "splits": self.splits}

    def block_cuts(self, n: int) -> dict[str, list[tuple[int, int]]]:
        """``splits=blocks``: the character ranges of each split in a text of ``n`` characters."""
        edges = [n * k // self.SEGMENTS for k in range(self.SEGMENTS + 1)]
        cuts: dict[str, list[tuple[int, int]]] = {"train": [], "val": [], "test": []}
        for k in range(self.SEGMENTS):
            start, end = edges[k], edges[k + 1]
            held = start + int((end - start) * self.TRAIN_FRACTION)
            cuts["train"].append((start, held))
            cuts["test" if k % 2 == 0 else "val"].append((held, end))
        return cuts

    def split_blocks(self) -> dict[str, list[SplitText]]:
        if self.splits != "blocks":
            return {}
        path = self.input_file()
        text = _read(path)
        cuts = self.block_cuts(len(text))
        return {
            split: [SplitText.from_string(text[a:b], f"{path} (characters {a}-{b})") for a, b in cuts[split]]
            for split in ("val", "test")
        }

    def split_texts(self) -> dict[str, SplitText]:
        # 1.1 MB, split by characters: read whole (a byte offset could cut a character)
        path = self.input_file()
        text = _read(path)
        if self.splits == "blocks":
            cuts = self.block_cuts(len(text))
            return {
                split: SplitText.from_string(
                    "".join(text[a:b] for a, b in ranges), f"{path} ({split}: {len(ranges)} blocks)"
                )
                for split, ranges in cuts.items()
            }
        n_train = int(len(text) * self.TRAIN_FRACTION)
        train = SplitText.from_string(text[:n_train], f"{path} (first 90%)")
        if self.splits == "nanogpt":
            val = SplitText.from_string(text[n_train:], f"{path} (last 10%)")
            return {"train": train, "val": val, "test": val}
        n_val = int(len(text) * self.VAL_END_FRACTION)
        val = SplitText.from_string(text[n_train:n_val], f"{path} (90%-95%)")
        return {"train": train, "val": val, "test": SplitText.from_string(text[n_val:], f"{path} (last 5%)")}


class WikiText(LMDataModule):
    """WikiText (Merity et al. 2016): Wikipedia articles with given train/valid/test splits.

    Local files win: ``{data_dir}/{LOCAL_DIR}/`` holding one of the file sets in
    :attr:`LOCAL_NAMES`. Otherwise the raw version is loaded from the Hugging Face Hub.
    """

    LOCAL_DIR: ClassVar[str]
    HUB_PATH: ClassVar[str] = "Salesforce/wikitext"
    HUB_CONFIG: ClassVar[str]
    LOCAL_NAMES: ClassVar[tuple[dict[str, str], ...]] = (
        {"train": "train.txt", "val": "valid.txt", "test": "test.txt"},
        {"train": "wiki.train.tokens", "val": "wiki.valid.tokens", "test": "wiki.test.tokens"},
        {"train": "wiki.train.raw", "val": "wiki.valid.raw", "test": "wiki.test.raw"},
    )
    _HUB_SPLITS: ClassVar[dict[str, str]] = {"train": "train", "val": "validation", "test": "test"}

    def local_alternative(self) -> str:
        """Human-readable description of the local files that replace the Hub download."""
        sets = " or ".join(", ".join(names.values()) for names in self.LOCAL_NAMES)
        return f"put {sets} in the folder {(self.data_dir / self.LOCAL_DIR).absolute()}"

    def local_files(self) -> dict[str, Path] | None:
        """The local split files, or ``None`` when there are none (then the Hub is used)."""
        folder = self.data_dir / self.LOCAL_DIR
        partial: list[str] = []
        for names in self.LOCAL_NAMES:
            found = {split: resolve_local(folder, name) for split, name in names.items()}
            if all(found.values()):
                return found  # type: ignore[return-value]
            partial += [names[s] for s, p in found.items() if p is None and any(found.values())]
        if partial:
            # Some files are there: a half-copied folder is a mistake worth reporting rather
            # than silently downloading the corpus instead.
            raise DataNotFoundError(
                missing_file_message(", ".join(partial), folder, reason=f"{self.name} needs all three splits")
            )
        return None

    def source_key(self) -> Any:
        files = self.local_files()
        return file_fingerprint(files, memo_dir=self.cache_dir) if files else f"hub:{self.HUB_PATH}/{self.HUB_CONFIG}"

    def split_texts(self) -> dict[str, SplitText]:
        files = self.local_files()
        if files:
            return {split: SplitText.from_file(path) for split, path in files.items()}
        # streamed: nothing is downloaded or held whole beyond the chunk being tokenised
        ds = load_hub_dataset(
            self.HUB_PATH, self.HUB_CONFIG, local_alternative=self.local_alternative(), streaming=True
        )
        # One row per line of the original file; blank lines are empty rows.
        return {
            split: SplitText.from_rows(
                partial(_rows, ds[hub_split], "text"), f"hub:{self.HUB_PATH}/{self.HUB_CONFIG}/{hub_split}"
            )
            for split, hub_split in self._HUB_SPLITS.items()
        }


class WikiText2(WikiText):
    """WikiText-2 (about 2M training words)."""

    name = "wikitext2"
    LOCAL_DIR = "wikitext-2"
    HUB_CONFIG = "wikitext-2-raw-v1"


class WikiText103(WikiText):
    """WikiText-103 (about 103M training words; the Hub download is about 300 MB)."""

    name = "wikitext103"
    LOCAL_DIR = "wikitext-103"
    HUB_CONFIG = "wikitext-103-raw-v1"


class TextFiles(LMDataModule):
    """Any UTF-8 plain-text files, one per split.

    Args:
        train_path, val_path: the training and validation text files.
        test_path: the test file; ``None`` means test = validation.
        **kwargs: the arguments of :class:`LMDataModule`.

    Relative paths are looked up under ``data_dir`` first, then the working directory.
    """

    name = "text"

    def __init__(
        self,
        train_path: str | os.PathLike[str],
        val_path: str | os.PathLike[str],
        test_path: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.paths = {"train": Path(train_path), "val": Path(val_path), "test": Path(test_path or val_path)}

    @classmethod
    def validation_as_test(cls, config: Mapping[str, Any]) -> str | None:
        """Without ``test_path`` the test split is the validation file (see the base class)."""
        if config.get("test_path"):
            return None
        return "data.test_path is null: the test split is the validation file (data.test_path=... holds one out)"

    def files(self) -> dict[str, Path]:
        """Absolute paths of the split files; :class:`DataNotFoundError` names a missing one."""
        found = {}
        for split, path in self.paths.items():
            hit = resolve_local(self.data_dir, path) or resolve_local(Path.cwd(), path)
            if hit is None:
                where = path if path.is_absolute() else self.data_dir / path
                raise DataNotFoundError(missing_file_message(f"{split} text", where))
            found[split] = hit.absolute()
        return found

    def source_key(self) -> Any:
        # Full paths: two user files may share name and content, and be meant as different corpora.
        return file_fingerprint(self.files(), full_paths=True, memo_dir=self.cache_dir)

    def split_texts(self) -> dict[str, SplitText]:
        return {split: SplitText.from_file(path) for split, path in self.files().items()}
