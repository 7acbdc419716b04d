"""The composed config, typed once at the entry: :meth:`RunConfig.from_hydra`.

Each section is a frozen dataclass whose fields are its group's keys: type (the annotation) and
valid values (the field's :func:`rule`) declared side by side. Groups Hydra builds (``trainer``,
``data``, ``callbacks.*``) are typed from their class's keyword arguments, declared without torch
(:data:`SCHEMAS`); the architecture groups as their options' configs (:mod:`ablate.nn.axes`). A
refusal is a :class:`ConfigError` (exit 2), before Hydra makes a run folder or any data is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from hydra.core.config_store import ConfigStore

from ablate.config import targets
from ablate.config.checks import (
    DATA_RULES,
    TRAINER_RULES,
    check_precision_and_strategy,
    clip_validation_interval,
    integer,
    number,
    optional,
    positive_int,
)
from ablate.config.store import register, store_section
from ablate.config.types import (
    UNRESOLVED,
    Rule,
    check_rules,
    dataclass_hints,
    declared_rules,
    plain_items,
    signature,
    top_level_key_message,
    typed_values,
    unknown_key_message,
)
from ablate.errors import ConfigError
from ablate.nn.axes import ARCHITECTURE_GROUPS, AXES, typed_options
from ablate.nn.spec import ModelSpec
from ablate.optim import OPTIMIZERS, SCHEDULES, optimizer_kind
from ablate.tasks.config_checks import TRANSLATION_TASK_DEFAULTS, LanguageModelChecks, TranslationChecks
from ablate.tasks.decode_config import DecodeConfig
from ablate.tracking.options import LOGGER_OPTIONS, logger_options

S = TypeVar("S", bound="Section")
SEED_RANGE = (0, 2**32 - 1)  # numpy's (and so Lightning's seed_everything's)
LR_MAX = 1e6  # optim.lr's bound (OptimConfig.lr says why)
_BUILD_KEYS = frozenset({"_target_", "_partial_", "_recursive_", "_convert_"})  # Hydra's instantiate keys


def rule(default: Any, predicate: Callable[[Any], bool], valid: str) -> Any:
    """A field whose value must satisfy ``predicate`` (``valid`` says what it takes)."""
    return field(default=default, metadata={"rule": (predicate, valid)})


class Section:
    """Base of the typed sections: the keys of the config node ``PATH``. The rules run in
    ``__post_init__``, so a section is valid however made."""

    PATH: ClassVar[str]

    def __post_init__(self) -> None:
        rules = {f.name: f.metadata["rule"] for f in dataclasses.fields(self) if "rule" in f.metadata}  # type: ignore[arg-type]
        check_rules({k: getattr(self, k) for k in rules}, self.PATH, rules)

    @classmethod
    def from_node(cls: type[S], node: Any, exclude: frozenset[str] = frozenset()) -> S:
        """The section of a config node (``exclude``: fields this run has not, e.g. the other task's)."""
        hints = {k: v for k, v in dataclass_hints(cls).items() if k not in exclude}
        return cls(**typed_values(node, hints, cls.PATH))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def get(self, key: str, default: Any = None) -> Any:
        """A key's value, as a config node's ``get`` (the code that reads mappings reads a section)."""
        return getattr(self, key, default)


@dataclass(frozen=True)
class ModelConfig(Section):
    """The ``model`` group: sizes of the network (the architecture's options are its own groups)."""

    PATH = "model"
    # absent for an encoder-decoder (its stacks: encoder_layers, decoder_layers), so null by default
    n_layers: int = rule(None, optional(positive_int), "a positive number of layers")
    encoder_layers: int | None = rule(None, optional(positive_int), "null or a positive number of layers")
    decoder_layers: int | None = rule(None, optional(positive_int), "null or a positive number of layers")
    d_model: int = rule(128, positive_int, "a positive width")
    n_heads: int = rule(4, positive_int, "a positive number of attention heads")
    d_ff: int | None = rule(None, optional(positive_int), "null (4 x model.d_model) or a positive width")
    max_len: int | None = rule(
        None, optional(positive_int), "null (the longest data length) or a positive number of positions"
    )
    dropout: float = rule(0.0, lambda v: 0 <= v < 1, "a probability in [0, 1)")
    bias: bool = True
    tie_embeddings: bool | str = True  # an encoder-decoder also takes "decoder" (ablate.nn.seq2seq.TIE_MODES)
    scale_embeddings: bool = False
    compile: bool = False


@dataclass(frozen=True)
class OptimConfig(Section):
    """The ``optim`` group (:mod:`ablate.optim`); its defaults are ``schema/optim``'s."""

    PATH = "optim"
    name: str = rule("adamw", lambda v: v in OPTIMIZERS, "one of adamw, adam, sgd")
    # at most LR_MAX: far past any rate that trains (a divergence test's 1e4), below those whose first
    # update float32 cannot hold (1e300: torch's "cannot be converted ... without overflow", a crash)
    lr: float = rule(2e-3, lambda v: number(v) and 0 < v <= LR_MAX, f"a positive learning rate, at most {LR_MAX:g}")
    betas: Any = rule(  # noqa: RUF009  (a rule, not a call per instance)
        (0.9, 0.99),
        lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(number(b) and 0 <= b < 1 for b in v),
        "two coefficients in [0, 1), e.g. [0.9, 0.99]",
    )
    eps: float = rule(1e-8, lambda v: number(v) and v > 0, "a positive epsilon")
    weight_decay: float = rule(0.1, lambda v: number(v) and v >= 0, "a weight decay >= 0")
    schedule: str = rule("cosine", lambda v: v in SCHEDULES, "one of cosine, linear, inverse_sqrt, constant")
    warmup_steps: int = rule(100, lambda v: integer(v) and v >= 0, "a number of steps >= 0")  # linear warmup
    decay_steps: int | None = rule(
        None, optional(positive_int), "null (= trainer.max_steps) or a positive number of steps"
    )
    # cosine/linear decay to lr * min_lr_ratio
    min_lr_ratio: float = rule(0.1, lambda v: number(v) and 0 <= v <= 1, "a fraction of the peak LR in [0, 1]")
    grad_clip: float | None = rule(  # the maximum global gradient norm
        1.0, optional(lambda v: number(v) and v > 0), "null (no clipping) or a positive maximum gradient norm"
    )
    label_smoothing: float = rule(0.0, lambda v: number(v) and 0 <= v < 1, "a value in [0, 1)")
    momentum: float | None = rule(None, optional(lambda v: number(v) and 0 <= v < 1), "null or a momentum in [0, 1)")
    fused: bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            optimizer_kind(self.as_dict())  # optim.momentum with an optimiser that has none
        except ValueError as err:
            raise ConfigError(str(err)) from None


@dataclass(frozen=True)
class EvalConfig(Section):
    """The ``eval`` group: what a run evaluates after training."""

    PATH = "eval"
    test_at_end: bool = True
    seq_len: int | None = rule(None, optional(positive_int), "null or a positive number of tokens")
    seq_lens: list[int] | None = None  # checked by the task that reads it (task=lm)


@dataclass(frozen=True)
class LogConfig(Section):
    """The ``log`` group: the cadence of the per-layer gradient norms."""

    PATH = "log"
    grad_norm_every_n_steps: int = rule(10, positive_int, "a positive number of steps")
    grad_norm_dense_steps: int = rule(0, lambda v: integer(v) and v >= 0, "a number of steps >= 0")


@dataclass(frozen=True)
class RuntimeConfig(Section):
    """The ``runtime`` group: floating-point settings of the process."""

    PATH = "runtime"
    flush_denormal: bool = True
    # torch.set_float32_matmul_precision's, or auto (ablate.config.checks.matmul_precision)
    matmul_precision: Literal["auto", "highest", "high", "medium"] = "auto"


@dataclass(frozen=True)
class PathsConfig(Section):
    """The ``paths`` group (:mod:`ablate.config.locations`)."""

    PATH = "paths"
    root_dir: str = "."
    data_dir: str = "data"
    cache_dir: str = "cache"
    log_dir: str = "logs"
    output_dir: Any = None  # Hydra's job directory, set by Hydra itself


# ------------------------------------------------------------------------ built by Hydra


# the classes Hydra builds from the typed groups, by ``_target_``: their keyword arguments declared
# in ablate.config.targets, so that the check imports no torch
SCHEMAS: dict[str, type] = {
    "lightning.pytorch.Trainer": targets.Trainer,
    "lightning.pytorch.callbacks.ModelCheckpoint": targets.ModelCheckpoint,
    "ablate.callbacks.averaging.EMA": targets.EMA,
    "ablate.callbacks.averaging.StepCheckpoints": targets.StepCheckpoints,
    "ablate.callbacks.checkpointing.LastCheckpoint": targets.LastCheckpoint,
    "ablate.callbacks.divergence.DivergenceMonitor": targets.DivergenceMonitor,
    "ablate.callbacks.grad_norm.GradNormMonitor": targets.GradNormMonitor,
    "ablate.callbacks.residual_rms.ResidualRMSMonitor": targets.GradNormMonitor,
    "ablate.callbacks.progress.progress_callback": targets.ProgressCallback,
    "ablate.callbacks.throughput.ThroughputMonitor": targets.ThroughputMonitor,
    "ablate.data.lm_data.TinyShakespeare": targets.TinyShakespeare,
    "ablate.data.lm_data.WikiText2": targets.LMDataModule,
    "ablate.data.lm_data.WikiText103": targets.LMDataModule,
    "ablate.data.lm_data.TextFiles": targets.TextFiles,
    "ablate.data.majority.MajorityData": targets.MajorityData,
    "ablate.data.translation_data.ParallelCorpus": targets.ParallelCorpus,
    "ablate.data.translation_data.ParallelFiles": targets.ParallelFiles,
}


class TargetConfig(dict[str, Any]):
    """A config node Hydra builds into an object (``_target_``), as plain data, checked against the
    target's keyword arguments, their type hints and its declared rules."""

    @classmethod
    def from_node(cls, path: str, node: Any, rules: Mapping[str, Rule] | None = None) -> TargetConfig:
        """The node at ``path`` of a composed config, checked (``rules``: those ablate adds)."""
        target = str(node["_target_"])
        schema = SCHEMAS.get(target)  # else the target is imported and inspected
        hints, closed = (dataclass_hints(schema), True) if schema else signature(target)
        build = dict.fromkeys(_BUILD_KEYS, Any) if closed else {k: Any for k, _ in plain_items(node)}
        values = typed_values(node, {**build, **hints}, path)
        check_rules(values, path, declared_rules(schema or target, rules))
        return cls((k, v) for k, v in plain_items(node) if v is not UNRESOLVED)


def _callbacks(node: Any) -> dict[str, TargetConfig | None]:
    """``callbacks.<name>``: each a node with ``_target_`` or null (dropped); ``+callbacks.foo.bar=1``
    names no class, and Lightning would fail on the plain dict it becomes."""
    items = dict(plain_items(node))
    for name, value in items.items():
        if value is not None and not (isinstance(value, Mapping) and value.get("_target_")):
            listed = ", ".join(sorted(str(n) for n in items if n != name))
            raise ConfigError(
                f"callbacks.{name} is not a callback of this run (it has no _target_, the class to build); "
                f"the callbacks are {listed}. A new one needs +callbacks.{name}._target_=<class>"
            )
    return {k: None if v is None else TargetConfig.from_node(f"callbacks.{k}", v) for k, v in items.items()}


# ------------------------------------------------------------------------------- the run


def _loggers(node: Any) -> dict[str, Any]:
    """``logger.<name>``, each its options dataclass (:mod:`ablate.tracking.options`)."""
    found: dict[str, Any] = {}
    for name, value in plain_items(node):
        if name not in LOGGER_OPTIONS:
            raise ConfigError(unknown_key_message("logger", name, LOGGER_OPTIONS))
        hints = dataclass_hints(LOGGER_OPTIONS[name])
        if "tags" in hints:
            hints["tags"] = list[str] | str  # a single tag may be given as a string
        found[name] = logger_options(name, typed_values(value or {}, hints, f"logger.{name}"))
    return found


GROUPS = ("task", "decode", "model", *ARCHITECTURE_GROUPS, "optim", "data", "trainer", "callbacks", "logger", "eval")
GROUPS += ("log", "runtime", "paths")


@dataclass(frozen=True)
class Derived:
    """What the entry derives from a run's composed config, once: its identity (what a resume must
    match), its record (the composed config as plain data: the W&B config, ``print_config``), its
    start warnings and the fp32 matmul precision for its device."""

    identity: Mapping[str, Any] = field(default_factory=dict)
    record: Mapping[str, Any] = field(default_factory=dict, repr=False)
    warnings: tuple[str, ...] = ()
    matmul_precision: str = "highest"

    @classmethod
    def of(cls, resolved: Mapping[str, Any], notes: tuple[str, ...]) -> Derived:
        from ablate.config.checks import matmul_precision, start_warnings
        from ablate.config.identity import run_identity
        from ablate.tasks import ranked_metrics

        warnings = (*notes, *start_warnings(resolved, ranked_metrics(resolved)))
        return cls(run_identity(resolved), resolved, warnings, matmul_precision(resolved))


@dataclass(frozen=True)
class RunConfig(Section):
    """A training run's config, typed and checked (:meth:`from_hydra`)."""

    seed: int = rule(1337, lambda v: SEED_RANGE[0] <= v <= SEED_RANGE[1], f"an integer in [0, {SEED_RANGE[1]}]")
    tags: list[str] | str = field(default_factory=list)
    ckpt_path: str | None = None
    trust_checkpoint: bool = False
    overwrite: bool = False
    resume_allow_changes: list[str] = field(default_factory=list)
    sweep_name: str | None = None
    skip_completed: bool = True
    optimized_metric: str | None = "val/loss"
    print_config: bool = False
    # the groups
    model: ModelConfig = field(default_factory=ModelConfig)
    architecture: Mapping[str, Any] = field(default_factory=dict)  # ModelSpec's options and shared keys
    optim: OptimConfig = field(default_factory=OptimConfig)
    task: Mapping[str, Any] = field(default_factory=lambda: {"name": "lm"})
    decode: Mapping[str, Any] | None = None
    data: TargetConfig = field(default_factory=TargetConfig)
    trainer: TargetConfig = field(default_factory=TargetConfig)
    callbacks: Mapping[str, TargetConfig | None] = field(default_factory=dict)
    logger: Mapping[str, Any] = field(default_factory=dict)  # name -> its options (ablate.tracking.options)
    eval: EvalConfig = field(default_factory=EvalConfig)
    log: LogConfig = field(default_factory=LogConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    derived: Derived = field(default_factory=Derived, repr=False)

    PATH = ""

    @property
    def task_name(self) -> str:
        return str(self.task.get("name", "lm"))

    def model_spec(self, vocab_size: int, max_len: int | None = None) -> ModelSpec:
        """The checked :class:`~ablate.nn.spec.ModelSpec` of this run (``max_len``: the data's, where
        ``model.max_len`` is null)."""
        model = self.model
        return ModelSpec(
            vocab_size=vocab_size,
            n_layers=model.n_layers or model.decoder_layers,  # type: ignore[arg-type]  # one of them is set
            encoder_layers=model.encoder_layers or 0,
            d_model=model.d_model,
            n_heads=model.n_heads,
            d_ff=model.d_ff or 4 * model.d_model,
            max_len=model.max_len or max_len or 0,
            dropout=model.dropout,
            bias=model.bias,
            tie_embeddings=model.tie_embeddings,
            scale_embeddings=model.scale_embeddings,
            **self.architecture,
        ).validate()

    @classmethod
    def of(cls, cfg: Any) -> RunConfig:
        """``cfg`` typed: a :class:`RunConfig` as it is, a composed config by :meth:`from_hydra`."""
        return cfg if isinstance(cfg, RunConfig) else cls.from_hydra(cfg)

    @classmethod
    def from_hydra(cls, cfg: Any, overrides: Sequence[str] = ()) -> RunConfig:
        """Type and check a composed ``train.yaml`` config, after the derivations that change ``cfg``
        in place so that what is recorded is what is used (the task's, the validation interval).

        An unknown top-level key is refused when the command line (``overrides``) appended it
        (``+foo=1``); one a config file declares is its table for interpolations, kept as is."""

        from ablate.tasks import task_checks

        task = task_checks(cfg)
        task.check_config(cfg)  # may fill derived keys
        note = clip_validation_interval(cfg.trainer)
        items = {k: v for k, v in plain_items(cfg) if k != "hydra"}  # a sweeper's job config carries Hydra's
        top = {f.name for f in dataclasses.fields(cls) if f.name not in GROUPS and f.init}
        top -= {"architecture", "derived"}
        appended = {o.lstrip("+").split("=", 1)[0].split(".", 1)[0] for o in overrides if o.startswith("+")}
        for key in items:
            if key not in top and key not in GROUPS and key in appended:
                raise ConfigError(top_level_key_message(key, [*top, *(g for g in GROUPS if g in items)]))
        hints = dataclass_hints(cls)
        own = typed_values({k: v for k, v in items.items() if k in top}, {k: hints[k] for k in top}, "")
        trainer = TargetConfig.from_node("trainer", items["trainer"], TRAINER_RULES)
        if trainer.get("max_steps", -1) == -1 and trainer.get("max_epochs") in (None, -1):
            raise ConfigError(
                "trainer.max_steps=-1 and trainer.max_epochs unset: training would never end; set one of them"
            )
        check_precision_and_strategy({"trainer": trainer})  # the combinations Lightning refuses late
        config = cls(
            **own,
            model=ModelConfig.from_node(items.get("model") or {}, exclude=task.other_model_keys),
            architecture=_architecture(items),
            optim=OptimConfig.from_node(items.get("optim") or {}),
            task=_task_node(task, items.get("task")),
            decode=_decode_node(items.get("decode")),
            data=TargetConfig.from_node("data", items["data"], DATA_RULES),
            trainer=trainer,
            callbacks=_callbacks(items.get("callbacks")),
            logger=_loggers(items.get("logger")),
            eval=EvalConfig.from_node(items.get("eval") or {}),
            log=LogConfig.from_node(items.get("log") or {}),
            runtime=RuntimeConfig.from_node(items.get("runtime") or {}),
            paths=PathsConfig.from_node(items.get("paths") or {}),
            derived=Derived.of(_resolved(cfg), (note,) if note else ()),
        )
        config.model_spec(vocab_size=1, max_len=config.eval_max_len)  # the architecture's combinations
        return config

    @property
    def eval_max_len(self) -> int:
        """The longest sequence the model will see: training or (longer) eval length. Not
        ``eval.seq_lens``: evaluating more lengths must not change the trained model."""
        data = self.data
        return max(int(data.get("seq_len") or 0), int(data.get("eval_seq_len") or 0))


# The defaults the YAML extends, which holds only what differs: schema/optim, schema/model (a decoder or
# an encoder: model.n_layers) and schema/model_seq2seq (encoder_layers, decoder_layers) by conf/optim and
# conf/model; run, eval, log, runtime by conf/train.yaml; decode, task_translation by task=translation
# (logger_<name>: ablate.tracking.options); and the architecture groups
register()
for _section in (OptimConfig, EvalConfig, LogConfig, RuntimeConfig, DecodeConfig):
    store_section(_section)
store_section(ModelConfig, exclude=LanguageModelChecks.other_model_keys)
store_section(ModelConfig, "model_seq2seq", exclude=TranslationChecks.other_model_keys)
store_section(RunConfig, "run", exclude=frozenset({*GROUPS, "architecture", "derived"}))
ConfigStore.instance().store(group="schema", name="task_translation", node=TRANSLATION_TASK_DEFAULTS)


def _architecture(items: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture groups typed, each value of its key's type (``+`` appends an untyped one)."""
    typed = typed_options({g: dict(plain_items(items[g])) for g in ARCHITECTURE_GROUPS if g in items})
    for axis in AXES:
        option = typed["options"][axis.name]
        typed_values(option.options(), {f.name: f.type for f in dataclasses.fields(option)}, axis.group)
    return typed


def _task_node(task: Any, node: Any) -> dict[str, Any]:
    values = dict(plain_items(node)) if node is not None else {"name": "lm"}
    keys = frozenset(getattr(task, "config_keys", {"name"}))
    for key in values:
        if key not in keys:
            raise ConfigError(unknown_key_message("task", key, keys))
    return values


def _decode_node(node: Any) -> dict[str, Any] | None:
    if node is None:
        return None
    return typed_values(node, dataclass_hints(DecodeConfig), "decode")


def _resolved(node: Any) -> dict[str, Any]:
    """The composed config as plain data, each value resolved where it resolves (else as written)."""
    from omegaconf import DictConfig, OmegaConf

    raw: Any = OmegaConf.to_container(node, resolve=False)
    return {
        k: raw[k] if v is UNRESOLVED else _resolved(v) if isinstance(v, DictConfig) else v
        for k, v in plain_items(node)
        if k != "hydra"
    }
