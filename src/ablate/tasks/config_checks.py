"""What each task declares about its config, without torch (the command line is typed before torch
is imported): its ``task`` keys, the ``model`` keys its model has not, and its checks of a composed
config; each task's LightningModule inherits them (:attr:`ablate.tasks.TaskSpec.checks`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from omegaconf import DictConfig, open_dict

from ablate.errors import ConfigError

TRANSLATION_TASK_DEFAULTS = {  # the task keys of task=translation and their defaults
    "val_bleu_samples": 500,
    "val_beam_size": 1,
    "log_examples": 5,
    "bleu_tokenize": "13a",
    "sample_seed": 0,
}


def check_bpe_train_mb(data: Any) -> None:
    """``data.bpe_train_mb`` is null or a positive number of MB, checked before any data is read."""
    sample = data.get("bpe_train_mb")
    if sample is not None and (isinstance(sample, bool) or not isinstance(sample, (int, float)) or sample <= 0):
        raise ConfigError(f"data.bpe_train_mb={sample}: give a positive number of MB, or null for all of train")


class TaskChecks:
    """Base of a task's config declarations (the default: ``task.name`` only, no checks)."""

    task_name: str = ""  # the ``task.name`` it implements; stored in checkpoints (ablate.tasks.checkpoints)

    config_keys: ClassVar[frozenset[str]] = frozenset({"name"})
    """The keys of the ``task`` config group this task reads (``task.name`` selects the task)."""

    other_model_keys: ClassVar[frozenset[str]] = frozenset()
    """Keys of the ``model`` group that this task's model does not have (refused by
    :class:`ablate.run.config.ModelConfig`): an LM has no encoder, a translation model's depth is per stack."""

    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        """Task-specific checks of a composed config before any data is read (may fill derived keys)."""
        evaluation = cfg.get("eval") or {}
        if evaluation.get("seq_len") or evaluation.get("seq_lens"):
            raise ConfigError(f"eval.seq_len / eval.seq_lens apply to task=lm; remove them for task={cls.task_name}")


class LanguageModelChecks(TaskChecks):
    """``task=lm`` (:class:`ablate.tasks.lm.LanguageModelTask`): decoder-only, ``model.n_layers``."""

    task_name = "lm"
    other_model_keys = frozenset({"encoder_layers", "decoder_layers"})  # decoder-only: model.n_layers

    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        """``data.bpe_train_mb`` needs ``data.tokenizer=bpe``; ``data.heldout_blocks`` needs
        ``data.splits=blocks`` and a whole number >= 1; ``eval.seq_len`` is the validation/test
        length: copied into ``data.eval_seq_len`` (which also still works on its own);
        ``eval.seq_lens`` must be a list of positive lengths."""
        sample, kind = cfg.data.get("bpe_train_mb"), cfg.data.get("tokenizer")
        if sample is not None and kind != "bpe":
            raise ConfigError(f"data.bpe_train_mb={sample} applies to data.tokenizer=bpe only, not {kind}")
        check_bpe_train_mb(cfg.data)
        blocks, splits = cfg.data.get("heldout_blocks"), cfg.data.get("splits")
        if blocks is not None and splits != "blocks":
            raise ConfigError(f"data.heldout_blocks={blocks} applies to data.splits=blocks only, not {splits}")
        if blocks is not None and (isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1):
            raise ConfigError(f"data.heldout_blocks={blocks}: give a whole number of held-out blocks >= 1 (null: 4)")
        evaluation = cfg.get("eval") or {}
        length, lengths = evaluation.get("seq_len"), evaluation.get("seq_lens")
        if (length or lengths) and "eval_seq_len" not in cfg.data:
            raise ConfigError(
                "eval.seq_len / eval.seq_lens need an LM data config (data.eval_seq_len); "
                f"data={cfg.data.get('_target_')} has none"
            )
        listed = lengths is not None and not isinstance(lengths, (str, int))
        if lengths is not None and not (listed and all(isinstance(n, int) and n > 0 for n in lengths)):
            raise ConfigError(
                f"eval.seq_lens={lengths}: give a list of positive lengths, e.g. eval.seq_lens=[256,512,1024]"
            )
        if length is None:
            return
        current = cfg.data.get("eval_seq_len")
        if current not in (None, length):
            raise ConfigError(f"eval.seq_len={length} but data.eval_seq_len={current}: set only one of them")
        with open_dict(cfg):
            cfg.data.eval_seq_len = length


class TranslationChecks(TaskChecks):
    """``task=translation`` (:class:`ablate.tasks.translation.TranslationTask`): an encoder-decoder."""

    task_name = "translation"
    config_keys = frozenset({"name", *TRANSLATION_TASK_DEFAULTS})
    other_model_keys = frozenset({"n_layers"})  # model.encoder_layers / model.decoder_layers

    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        """An encoder, and a valid ``data.bpe_train_mb`` (the joint BPE's training sample)."""
        super().check_config(cfg)
        check_bpe_train_mb(cfg.data)
        if not (cfg.model.get("encoder_layers") or 0) > 0:
            raise ConfigError(
                "task=translation needs an encoder: set model.encoder_layers and model.decoder_layers, or "
                "use model=translation_small, transformer_iwslt_de_en or transformer_base"
            )


class ClassificationChecks(TaskChecks):
    """``task=classify`` (:class:`ablate.tasks.classify.ClassificationTask`): encoder-only."""

    task_name = "classify"

    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        """One stack of ``model.n_layers``, and no tied output embedding (there is no output vocabulary)."""
        super().check_config(cfg)
        model = cfg.model
        if model.get("encoder_layers") or model.get("decoder_layers"):
            raise ConfigError(
                "task=classify is encoder-only: set model.n_layers (its depth), not model.encoder_layers/decoder_layers"
            )
        if model.get("tie_embeddings"):
            raise ConfigError(
                "model.tie_embeddings applies to models with an output vocabulary; task=classify has none"
            )
