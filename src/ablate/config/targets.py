"""The keyword arguments, with their type hints, of the classes Hydra builds from the typed groups
(by ``_target_`` in :data:`ablate.run.config.SCHEMAS`): declared, so that a command line is checked
without importing torch. ``tests/config/test_target_schemas.py`` holds each against :mod:`inspect`
of the real class, so a change there (a Lightning upgrade) fails a test instead of drifting."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import ClassVar, Literal

from ablate.config.checks import number, optional, positive_int
from ablate.config.types import Rule


class Lightning:
    """Lightning's classes a hint names, by name only (the message says "a string or Accelerator")."""

    class Accelerator: ...

    class Strategy: ...

    class Logger: ...

    class Callback: ...

    class Profiler: ...

    class Precision: ...

    class ClusterEnvironment: ...

    class CheckpointIO: ...

    class LayerSync: ...

    Plugin = Precision | ClusterEnvironment | CheckpointIO | LayerSync


@dataclass
class Trainer:
    accelerator: str | Lightning.Accelerator
    strategy: str | Lightning.Strategy
    devices: list[int] | str | int
    num_nodes: int
    precision: (
        Literal[64, 32, 16]
        | Literal[
            "transformer-engine",
            "transformer-engine-float16",
            "16-true",
            "16-mixed",
            "bf16-true",
            "bf16-mixed",
            "32-true",
            "64-true",
        ]
        | Literal["64", "32", "16", "bf16"]
        | None
    )
    logger: Lightning.Logger | Iterable[Lightning.Logger] | bool | None
    callbacks: list[Lightning.Callback] | Lightning.Callback | None
    fast_dev_run: int | bool
    max_epochs: int | None
    min_epochs: int | None
    max_steps: int
    min_steps: int | None
    max_time: str | timedelta | dict[str, int] | None
    limit_train_batches: int | float | None
    limit_val_batches: int | float | None
    limit_test_batches: int | float | None
    limit_predict_batches: int | float | None
    overfit_batches: int | float
    val_check_interval: int | float | str | timedelta | dict[str, int] | None
    check_val_every_n_epoch: int | None
    num_sanity_val_steps: int | None
    log_every_n_steps: int | None
    enable_checkpointing: bool | None
    enable_progress_bar: bool | None
    enable_model_summary: bool | None
    accumulate_grad_batches: int
    gradient_clip_val: int | float | None
    gradient_clip_algorithm: str | None
    deterministic: bool | Literal["warn"] | None
    benchmark: bool | None
    inference_mode: bool
    use_distributed_sampler: bool
    profiler: Lightning.Profiler | str | None
    detect_anomaly: bool
    barebones: bool
    plugins: Lightning.Plugin | list[Lightning.Plugin] | None
    sync_batchnorm: bool
    reload_dataloaders_every_n_epochs: int
    default_root_dir: str | Path | None
    enable_autolog_hparams: bool
    model_registry: str | None


@dataclass
class ModelCheckpoint:
    dirpath: str | Path | None
    filename: str | None
    monitor: str | None
    verbose: bool
    save_last: bool | Literal["link"] | None
    save_top_k: int
    save_on_exception: bool
    save_weights_only: bool
    mode: str
    auto_insert_metric_name: bool
    every_n_train_steps: int | None
    train_time_interval: timedelta | None
    every_n_epochs: int | None
    save_on_train_epoch_end: bool | None
    enable_version_counter: bool


# ------------------------------------------------------------------ ablate's callbacks


@dataclass
class EMA:
    decay: float | None
    update_every_n_steps: int
    update_starting_at_step: int | None
    device: str | None
    use_buffers: bool


@dataclass
class StepCheckpoints:
    dirpath: str | os.PathLike[str]
    every_n_train_steps: int
    keep_last_n: int


@dataclass
class LastCheckpoint:
    dirpath: str | os.PathLike[str]
    every_n_train_steps: int | None
    keep_previous: str


@dataclass
class DivergenceMonitor:
    max_ratio: float | None
    check_every_n_steps: int | None
    # checked where the config is typed (ablate.run.config) and by the callback itself
    CONFIG_RULES: ClassVar[dict[str, Rule]] = {
        "max_ratio": (
            lambda v: v is None or (number(v) and v >= 0),
            "null or 0 (only a non-finite loss counts), or a positive multiple of the first loss",
        ),
        "check_every_n_steps": (
            optional(positive_int),
            "null (trainer.log_every_n_steps) or a positive number of steps",
        ),
    }


@dataclass
class GradNormMonitor:  # and ResidualRMSMonitor: the same keys
    every_n_steps: int
    dense_steps: int


@dataclass
class ProgressCallback:
    mode: str
    every_n_steps: int | None
    every_n_seconds: float


@dataclass
class ThroughputMonitor:
    window: int
    peak_flops: float | str | None
    flops_per_token: float | None


# ------------------------------------------------------------------ ablate's data modules


@dataclass
class Corpus:  # the keys both kinds of corpus below take
    data_dir: str | os.PathLike[str] | None
    cache_dir: str | os.PathLike[str] | None
    vocab_size: int
    seq_len: int
    batch_size: int
    micro_batch_size: int | None
    num_workers: int
    pin_memory: bool
    seed: int
    bpe_train_mb: float | None


@dataclass
class LMDataModule(Corpus):  # and WikiText2, WikiText103: the same keys
    tokenizer: str
    eval_seq_len: int | None
    eval_batch_size: int | None
    train_stride: int | None


@dataclass
class TinyShakespeare(LMDataModule):
    splits: str
    heldout_blocks: int | None
    CONFIG_CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"splits": ("nanogpt", "disjoint", "blocks")}


@dataclass
class TextFiles(LMDataModule):
    train_path: str | os.PathLike[str]
    val_path: str | os.PathLike[str]
    test_path: str | os.PathLike[str] | None


@dataclass
class MajorityData:
    seq_len: int
    symbols: int
    train_size: int
    val_size: int
    test_size: int
    batch_size: int
    eval_batch_size: int | None
    num_workers: int
    seed: int


@dataclass
class TranslationDataModule(Corpus):
    src_lang: str
    tgt_lang: str
    max_tokens: int
    max_sentences: int | None
    eval_max_tokens: int | None
    max_train_pairs: int | None
    max_eval_pairs: int | None


@dataclass
class ParallelCorpus(TranslationDataModule):
    name: str
    languages: Sequence[str]
    local_dir: str
    split_files: Mapping[str, str]
    hub_path: str | None
    hub_config: str | None
    hub_revision: str | None
    hub_splits: Mapping[str, str] | None


@dataclass
class ParallelFiles(TranslationDataModule):
    train_src: str
    train_tgt: str
    val_src: str
    val_tgt: str
    test_src: str | None
    test_tgt: str | None
