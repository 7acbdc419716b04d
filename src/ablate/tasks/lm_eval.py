"""Language-model evaluation at one or more lengths, shared by ``train.py`` (after training,
``eval.seq_lens``) and ``eval.py`` (from a checkpoint, on its corpus or on any text file).

The maths is :class:`ablate.tasks.lm.LanguageModelTask`'s own validation/test step (token-weighted
mean NLL over the split, perplexity = exp of it); the windows are
:class:`ablate.data.lm_data.LMDataModule`'s (non-overlapping,
:meth:`~ablate.data.lm_data.LMDataModule.use_eval_length`).
:class:`TextFileData` serves a text file, tokenised with a checkpoint's tokenizer, through the
same data module code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from ablate.data.lm_data import LMDataModule
from ablate.data.lm_windows import token_dtype
from ablate.data.sources import DataFormatError
from ablate.data.text_stream import SplitText
from ablate.data.tokenizers import TOKENIZERS, Tokenizer
from ablate.tasks.base import finite_or_none

if TYPE_CHECKING:
    from ablate.tasks.lm import LanguageModelTask

EVAL_SPLITS = ("val", "test")


def evaluate_lengths(
    trainer: L.Trainer, task: LanguageModelTask, datamodule: Any, lengths: list[int], split: str = "test"
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """``<split>/loss@L``, ``<split>/ppl@L`` (and ``<split>/bpb@L`` when the task knows its
    tokenizer: bits per UTF-8 byte) for each length L: the split (``test``, or ``val``)
    cut into non-overlapping windows of L tokens (Press et al. 2022's "nonoverlapping inference";
    no sliding window, so every token is predicted from the tokens of its own window only).

    Every length covers the same split (up to its last partial window); the tokens per eval
    batch stay constant (:meth:`ablate.data.lm_data.LMDataModule.use_eval_length`). With
    ``pos=learned`` a length beyond the position table (``model.max_len``, by default the
    training/eval length) is skipped with a note: the table has no rows there, and rows added
    only for evaluation would be untrained. Returns the metrics and, per length, the tokens
    evaluated or why it was skipped.
    """
    if split not in EVAL_SPLITS:
        raise ValueError(f"split={split!r}; valid options: {', '.join(EVAL_SPLITS)}")
    run = trainer.test if split == "test" else trainer.validate
    metrics: dict[str, float | None] = {}
    info: dict[str, Any] = {}
    spec = task.spec
    for length in lengths:
        if spec.pos == "learned" and length > spec.max_len:
            info[str(length)] = {"skipped": f"pos=learned has {spec.max_len} positions (model.max_len)"}
            rank_zero_info(
                f"{split}/ppl@{length} skipped: pos=learned has only {spec.max_len} positions; set "
                f"model.max_len={length} to evaluate with untrained positions beyond the training length"
            )
            continue
        datamodule.use_eval_length(length)
        task.eval_tag = f"@{length}"
        try:
            run(task, datamodule=datamodule, verbose=False)
        finally:
            task.eval_tag = ""
        for key in (f"{split}/loss@{length}", f"{split}/ppl@{length}", f"{split}/bpb@{length}"):
            if key in trainer.callback_metrics or not key.startswith(f"{split}/bpb"):
                metrics[key] = finite_or_none(trainer.callback_metrics.get(key))
        info[str(length)] = {"tokens": task.eval_tokens_seen}
    return metrics, info


class TextFileData(LMDataModule):
    """One UTF-8 text file as the validation and test split, tokenised with a given tokenizer (a
    checkpoint's: the ids must mean what the model learned), for ``eval.py text_file=...``.

    The token ids are written once to ``work_dir/text_file.bin`` (a temporary folder of the
    caller); everything else (windows, batches, :meth:`use_eval_length`) is :class:`LMDataModule`'s.
    A character the tokenizer does not know raises a ValueError that names the file.
    """

    name = "text_file"

    def __init__(
        self,
        path: str | os.PathLike[str],
        tokenizer: Tokenizer,
        work_dir: str | os.PathLike[str],
        seq_len: int,
        eval_batch_size: int,
        num_workers: int = 0,
    ) -> None:
        kind = next(k for k, cls in TOKENIZERS.items() if isinstance(tokenizer, cls))
        super().__init__(
            data_dir=Path(path).parent,
            cache_dir=work_dir,
            tokenizer=kind,
            seq_len=seq_len,
            batch_size=eval_batch_size,
            eval_batch_size=eval_batch_size,
            num_workers=num_workers,
        )
        self.path = Path(path)
        self.tokenizer, self.vocab_size = tokenizer, tokenizer.vocab_size
        self.dtype = token_dtype(tokenizer.vocab_size)
        self.tokens_path = Path(work_dir) / "text_file.bin"
        self.num_tokens: int | None = None

    def prepare_data(self) -> None:
        if self.num_tokens is not None:
            return
        assert self.tokenizer is not None  # the checkpoint's, given to __init__
        text = SplitText.from_file(self.path)
        try:
            self.num_tokens = self._write_tokens(self.tokenizer, text, self.tokens_path, self.dtype, self.path.name)
        except DataFormatError:  # not UTF-8: the message names the file already
            raise
        except ValueError as err:  # a character outside the checkpoint's vocabulary
            raise ValueError(f"{self.path}: {err} of the checkpoint's tokenizer") from None

    def setup(self, stage: str | None = None) -> None:
        self.prepare_data()
        for split in EVAL_SPLITS:
            if split not in self.datasets:
                self.datasets[split] = self._windows(self.tokens_path, self.dtype, split)


def load_lm_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu", script: str = "eval.py") -> Any:
    """The :class:`~ablate.tasks.lm.LanguageModelTask` of a ``task=lm`` checkpoint, in eval mode and
    never compiled (``model.compile`` is a training setting); a checkpoint of another task stops
    with a message naming the script that takes it."""
    from ablate.tasks import load_task_checkpoint

    return load_task_checkpoint(Path(path), "lm", script, map_location=map_location, compile=False).eval()


def tokenizer_mismatch(model_tokenizer: Tokenizer | None, data_tokenizer: Tokenizer, vocab_size: int) -> str | None:
    """Why the data's token ids would not mean what the model learned, or None: a checkpoint that
    carries its tokenizer must have the data's exactly; an older one (none stored) at least a
    vocabulary of the data's size."""
    from ablate.data.tokenizers import tokenizer_to_dict

    data = tokenizer_to_dict(data_tokenizer)
    if model_tokenizer is None:
        if data_tokenizer.vocab_size != vocab_size:
            return f"the data's {data['kind']} tokenizer has {data_tokenizer.vocab_size} tokens, the model {vocab_size}"
        return None
    model = tokenizer_to_dict(model_tokenizer)
    if model != data:
        return (
            f"the data's tokenizer ({data['kind']}, {data_tokenizer.vocab_size} tokens) is not the checkpoint's "
            f"({model['kind']}, {model_tokenizer.vocab_size} tokens)"
        )
    return None
