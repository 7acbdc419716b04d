"""The language-modelling data module: a corpus tokenised once into memory-mapped token files,
served as fixed-length windows in a resumable order.

Each corpus subclass (:mod:`ablate.data.lm_data`) only says where its text comes from; the cache
is ``{cache_dir}/{corpus}-{tokenizer}[-{vocab_size}]-{hash}/`` (:mod:`ablate.data.token_files`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ablate.data.cache import CacheCorruptError, read_meta, sha256_file
from ablate.data.corpus import CachedCorpus
from ablate.data.lm_windows import TokenWindows, collate_windows
from ablate.data.samplers import ResumableSampler
from ablate.data.sources import default_cache_dir, default_data_dir
from ablate.data.text_stream import SplitText
from ablate.data.token_files import CACHE_FORMAT_VERSION, SPLITS, build_token_files
from ablate.data.tokenizers import Tokenizer, tokenizer_class
from ablate.errors import UserError


class SplitTooShortError(UserError, ValueError):
    """A split has fewer tokens than one window (or batch of windows) needs; the message says which."""


class LMDataModule(CachedCorpus):
    """Base class: tokenise a corpus once, cache it, serve fixed-length windows. Its arguments are
    the ``data`` keys (``conf/data/*.yaml``); ``batch_size`` is the global batch (all devices and
    accumulation steps together). After ``prepare_data(); setup("fit")``: :attr:`tokenizer`,
    :attr:`vocab_size` and :attr:`datasets` (split name -> :class:`TokenWindows`)."""

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
        """JSON-able identity of the raw sources, hashed into the cache folder name (reads no text)."""
        raise NotImplementedError

    def split_texts(self) -> dict[str, SplitText]:
        """The ``train``, ``val`` and ``test`` splits, each a stream of text chunks."""
        raise NotImplementedError

    def split_blocks(self) -> dict[str, list[SplitText]]:
        """Split -> its disjoint blocks of the corpus (``splits=blocks``), boundaries in ``meta.json``."""
        return {}

    @classmethod
    def validation_as_test(cls, config: Mapping[str, Any]) -> str | None:
        """Why the test split that ``config`` (a ``data`` config of this class) gives is the validation
        text, or None when it is a text of its own: a verdict read on it after a selection on
        validation (``tune=lr``) would grade itself, which the tuned sweeper warns about."""
        return None

    # --- batches and caching -------------------------------------------------------------------

    @property
    def tokens_per_batch(self) -> int:
        """Training tokens per optimiser step (``batch_size * seq_len``), for throughput logging."""
        return self.batch_size * self.seq_len

    def device_batch_size(self) -> int:
        """Sequences per training DataLoader batch: the global batch over world size x accumulation."""
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

    def use_eval_length(self, seq_len: int) -> None:
        """Evaluate at ``seq_len`` from now on, the eval batch holding about as many tokens as before."""
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

    def _build_cache(self, folder: Path) -> None:
        build_token_files(
            folder,
            self.split_texts(),
            self.split_blocks(),
            corpus=self.name,
            kind=self.tokenizer_kind,
            vocab_size=self.bpe_vocab_size,
            bpe_train_mb=self.bpe_train_mb,
            sources=self.source_key(),
        )

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
        meta = self.cache_meta()
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
        """What a per-window record of ``split`` needs (:mod:`ablate.eval_units`): ``text`` (the key of
        the exact text and windowing), ``stride``, ``bounds`` (of the held-out blocks, or None) and
        ``layout`` (the split scheme)."""
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

    def loader_options(self) -> dict[str, Any]:
        return {
            "collate_fn": collate_windows,  # batches come gathered in one go (TokenWindows.__getitems__)
            "pin_memory": self.pin_memory,
            "persistent_workers": self.num_workers > 0,
            # its own generator: starting an iteration (it draws the workers' base seed) then
            # leaves the global RNG alone, which a resumed run restores exactly
            "generator": torch.Generator().manual_seed(self.seed),
        }

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
