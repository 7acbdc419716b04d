"""The translation data module: a parallel corpus with a shared BPE vocabulary, cached token ids
and token-based batching (the corpora: :mod:`ablate.data.translation_data`; the cache:
:mod:`ablate.data.translation_cache`). Either direction of a pair uses the same cache.

A joint byte-level BPE of both sides (the embeddings can be tied three ways); batches of at most
``max_tokens`` padded tokens, as fairseq's ``--max-tokens`` (:mod:`ablate.data.translation_batches`);
``batch_size``: such batches per optimiser step over all devices.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from ablate.data.cache import read_meta
from ablate.data.corpus import CachedCorpus
from ablate.data.samplers import ResumableSampler
from ablate.data.sources import DataFormatError, default_cache_dir, default_data_dir
from ablate.data.tokenizers import BPETokenizer, Tokenizer
from ablate.data.translation_batches import PairBatches, make_batches, padding_fraction
from ablate.data.translation_cache import CACHE_FORMAT_VERSION, SPLITS, build_translation_cache
from ablate.data.translation_text import LineSource, head_lines
from ablate.data.translation_tokens import TokenSide, special_ids

log = logging.getLogger(__name__)
# the splits a Lightning stage reads (setup); any other stage (fit, None) reads them all
STAGE_SPLITS = {"validate": ("val",), "test": ("test",)}


class TranslationDataModule(CachedCorpus):
    """Base class: tokenise a parallel corpus once with a joint BPE, cache it, serve token batches.
    Its arguments are the ``data`` keys of ``conf/data/parallel.yaml``: ``seq_len`` drops longer
    training pairs and truncates longer evaluation sentences; ``micro_batch_size`` must be 1."""

    name: str | None = "parallel"
    languages: tuple[str, ...] = ()

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        src_lang: str = "de",
        tgt_lang: str = "en",
        vocab_size: int = 8000,
        seq_len: int = 256,
        max_tokens: int = 4096,
        max_sentences: int | None = None,
        eval_max_tokens: int | None = None,
        batch_size: int = 1,
        micro_batch_size: int | None = None,
        max_train_pairs: int | None = None,
        max_eval_pairs: int | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        seed: int = 0,
        bpe_train_mb: float | None = None,
        **_: Any,
    ) -> None:
        super().__init__()
        if bpe_train_mb is not None and (isinstance(bpe_train_mb, bool) or not bpe_train_mb > 0):
            raise ValueError(f"bpe_train_mb must be positive (or null for the whole train split), got {bpe_train_mb}")
        if src_lang == tgt_lang:
            raise ValueError(f"data.src_lang and data.tgt_lang are both {src_lang!r}")
        if self.languages and {src_lang, tgt_lang} - set(self.languages):
            raise ValueError(
                f"{self.name} has languages {self.languages}; got data.src_lang={src_lang} data.tgt_lang={tgt_lang}"
            )
        if max_tokens < seq_len:
            raise ValueError(
                f"data.max_tokens={max_tokens} must be at least data.seq_len={seq_len} "
                f"(the longest pair must fit in a batch)"
            )
        if micro_batch_size not in (None, 1) or (micro_batch_size is None and batch_size > 1):
            raise ValueError(
                "translation batches are sized in tokens (data.max_tokens): data.batch_size counts token "
                "batches per optimiser step (all devices), and data.micro_batch_size must be 1 (one token "
                f"batch per forward pass); got batch_size={batch_size}, micro_batch_size={micro_batch_size}"
            )
        self.data_dir = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.bpe_vocab_size, self.seq_len = vocab_size, seq_len
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.eval_max_tokens = eval_max_tokens or max_tokens
        self.batch_size, self.micro_batch_size = batch_size, micro_batch_size
        self.max_train_pairs, self.max_eval_pairs = max_train_pairs, max_eval_pairs
        self.num_workers, self.pin_memory, self.seed = num_workers, pin_memory, seed
        self.bpe_train_mb = bpe_train_mb
        self.tokenizer: Tokenizer | None = None
        self.vocab_size: int | None = None
        self.datasets: dict[str, PairBatches] = {}
        self.raw: dict[str, dict[str, list[str]]] = {}  # split -> {"src": lines, "tgt": lines}
        self.padding_fraction: dict[str, float] = {}

    # --- what a corpus provides ------------------------------------------------------

    def source_key(self) -> Any:
        """JSON-able identity of the raw sources (cheap: no reading of the text)."""
        raise NotImplementedError

    def line_sources(self) -> dict[str, dict[str, LineSource]]:
        """split -> language -> its lines, for ``train``, ``val``, ``test`` and both languages."""
        raise NotImplementedError

    # --- cache ------------------------------------------------------------------------

    def cache_path(self) -> Path:
        key: dict[str, Any] = {
            "format": CACHE_FORMAT_VERSION,
            "corpus": self.name,
            "sources": self.source_key(),
            "langs": sorted((self.src_lang, self.tgt_lang)),
            "max_train_pairs": self.max_train_pairs,
        }
        if self.bpe_train_mb is not None:  # other merges, other tokens (unset: the key, and folder, as before)
            key["bpe_train_mb"] = self.bpe_train_mb
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
        return self.cache_dir / f"{self.name}-bpe{self.bpe_vocab_size}-{digest}"

    def _build_cache(self, folder: Path) -> None:
        sources = self.line_sources()
        build_translation_cache(
            folder,
            {split: {lang: sources[split][lang] for lang in (self.src_lang, self.tgt_lang)} for split in SPLITS},
            corpus=self.name,
            vocab_size=self.bpe_vocab_size,
            max_train_pairs=self.max_train_pairs,
            bpe_train_mb=self.bpe_train_mb,
            sources=self.source_key(),
        )

    # --- Lightning hooks --------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        """The tokenizer and the splits ``stage`` needs (``validate``: val, ``test``: test, else all)."""
        folder = self.cache_path()
        meta = self.cache_meta()
        self.tokenizer = BPETokenizer.load(folder / BPETokenizer.FILENAME)
        special_ids(self.tokenizer)
        self.vocab_size = int(meta["vocab_size"])
        needed = [s for s in STAGE_SPLITS.get(stage or "", SPLITS) if s not in self.datasets]
        if not needed:
            return
        dtype, limit = np.dtype(meta["ids_dtype"]), self.seq_len - 1  # room for the end token
        for split in needed:
            src, tgt = (TokenSide.open(folder / f"{split}.{lang}", dtype) for lang in (self.src_lang, self.tgt_lang))
            if split == "train":
                src, tgt = self._trainable(src, tgt, limit)
            else:
                index = np.arange(min(self.max_eval_pairs or len(src), len(src)))
                src, tgt = src.subset(index, limit), tgt.subset(index, limit)
                self.raw[split] = {
                    "src": head_lines(folder / f"{split}.{self.src_lang}.txt", len(index)),
                    "tgt": head_lines(folder / f"{split}.{self.tgt_lang}.txt", len(index)),
                }
            src_lens, tgt_lens = src.lengths + 1, tgt.lengths + 1
            max_tokens = self.max_tokens if split == "train" else self.eval_max_tokens
            batches = make_batches(src_lens, tgt_lens, max_tokens, self.max_sentences if split == "train" else None)
            self.padding_fraction[split] = padding_fraction(src_lens, tgt_lens, batches)
            self.datasets[split] = PairBatches(src, tgt, batches)
        if "train" not in needed:
            return
        train, padding = self.datasets["train"], 100 * self.padding_fraction["train"]
        log.info(
            f"{self.name} {self.src_lang}->{self.tgt_lang}: {len(train.src)} training pairs in {len(train)} batches "
            f"of <= {self.max_tokens} tokens, padding {padding:.1f}%"
        )

    def _trainable(self, src: TokenSide, tgt: TokenSide, limit: int) -> tuple[TokenSide, TokenSide]:
        """The training pairs whose sides are both non-empty and at most ``limit`` tokens."""
        fits = (src.lengths > 0) & (src.lengths <= limit) & (tgt.lengths > 0) & (tgt.lengths <= limit)
        keep = np.flatnonzero(fits)
        dropped = len(src) - len(keep)
        if dropped:
            log.info(
                f"{self.name}: dropped {dropped} of {len(src)} training pairs (empty, or longer than "
                f"seq_len={self.seq_len})"
            )
        if not len(keep):
            both = (src.lengths > 0) & (tgt.lengths > 0)
            if not both.any():  # not a length problem: say so rather than blame data.seq_len
                raise DataFormatError(
                    f"{self.name}: every training pair has an empty side: the training files hold no text"
                )
            shortest = int(np.maximum(src.lengths, tgt.lengths)[both].min())
            raise DataFormatError(
                f"{self.name}: no training pair is left with data.seq_len={self.seq_len}: the shortest pair has "
                f"{shortest} tokens on its longer side; raise data.seq_len to at least {shortest}"
            )
        return src.subset(keep), tgt.subset(keep)

    @property
    def tokens_per_batch(self) -> int:
        return self.max_tokens * self.batch_size

    def references(self, split: str) -> list[str]:
        return self.raw[split]["tgt"]

    def unit_text(self, split: str) -> dict[str, Any]:
        """What a per-sentence record of ``split`` needs (:mod:`ablate.eval_units`): the text's key."""
        files = read_meta(self.cache_path())["files"]
        digest = hashlib.sha256(
            "".join(files[f"{split}.{lang}.ids"]["sha256"] for lang in (self.src_lang, self.tgt_lang)).encode()
        ).hexdigest()[:16]
        pairs = len(self._dataset(split).src)
        return {"text": f"{self.name}/{split}:{digest}:L{self.seq_len}:n{pairs}", "stride": 0, "bounds": None}

    def sources(self, split: str) -> list[str]:
        return self.raw[split]["src"]

    def _dataset(self, split: str) -> PairBatches:
        if split not in self.datasets:
            self.setup()
        return self.datasets[split]

    batched = False  # an item is a whole token batch: the sampler deals one item per rank and step

    def device_batch_size(self) -> int:
        return 1

    def loader_options(self) -> dict[str, Any]:
        return {"pin_memory": self.pin_memory, "persistent_workers": self.num_workers > 0}

    def position(self, sampler: ResumableSampler, steps_done: int) -> dict[str, int]:
        """The rounds (one token batch per rank each) this epoch has consumed."""
        return {"rounds_done": steps_done}

    def resume_sampler(self, sampler: ResumableSampler, state: dict[str, int]) -> None:
        sampler.resume_at(state["epoch"], state["rounds_done"])
