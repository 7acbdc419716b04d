"""The arguments of the checkpoint scripts (``eval.py``, ``generate.py``, ...) with their types and
valid values, checked before any checkpoint is read: a bad value exits 2 naming the key and what it
takes, instead of an IndexError in sampling (``top_k=0``) or a traceback after minutes of decoding."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf

from ablate.config.types import UNRESOLVED, plain_items, top_level_key_message, type_ok, wrong_type_message
from ablate.errors import ConfigError


@dataclass(frozen=True)
class Argument:
    """One argument: its type hint and, optionally, ``problem(value) -> why it is invalid or None``."""

    hint: Any
    problem: Callable[[Any], str | None] | None = None
    example: str = ""  # shown when the argument is missing: ``ckpt_path=<file>``


def at_least(low: float, what: str) -> Callable[[Any], str | None]:
    return lambda v: None if v is None or v >= low else f"{what} (>= {low:g})"


def text_file(kind: str) -> Callable[[Any], str | None]:
    """A readable, non-empty file (None allowed): an empty one would give a score of nothing."""

    def problem(value: Any) -> str | None:
        if value is None:
            return None
        path = Path(value)
        if not path.is_file():
            return f"no such file ({kind})"
        if path.stat().st_size == 0:
            return f"the file is empty (0 bytes): {kind} expected"
        return None

    return problem


def lengths(value: Any) -> str | None:
    values = value if isinstance(value, list) else [value]
    if value is None or (values and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in values)):
        return None
    return "give positive lengths, e.g. seq_lens=[128,256,512]"


def device(value: Any) -> str | None:
    if value in ("auto", "cpu", "cuda") or (isinstance(value, str) and value.startswith("cuda:")):
        return None
    return "one of auto, cpu, cuda, cuda:<index>"


CHECKPOINT = {
    "ckpt_path": Argument(str, example="ckpt_path=logs/runs/<run>/checkpoints/last.ckpt"),
    "trust_checkpoint": Argument(bool),
}
DECODING = {
    "beam_size": Argument(int | None, at_least(1, "a beam of at least one hypothesis")),
    "length_penalty": Argument(float | None, at_least(0, "a length penalty alpha")),
    "max_len_a": Argument(float | None, at_least(0, "a factor of the source length")),
    "max_len_b": Argument(int | None, at_least(0, "a number of tokens")),
}
GENERATE = {
    **CHECKPOINT,
    "prompt": Argument(str),
    "max_new_tokens": Argument(int, at_least(1, "a number of tokens to generate")),
    "num_samples": Argument(int, at_least(1, "a number of samples")),
    "temperature": Argument(float, at_least(0, "a temperature (0: greedy)")),
    "top_k": Argument(int | None, at_least(1, "null (the whole vocabulary) or a number of tokens")),
    "use_cache": Argument(bool),
    "seed": Argument(int),
}
TRANSLATE = {
    **CHECKPOINT,
    **DECODING,
    "batch_lines": Argument(int, at_least(1, "a number of lines")),
    "batch_tokens": Argument(int, at_least(1, "a number of tokens")),
    "device": Argument(str, device),
}
EVAL = {
    **CHECKPOINT,
    **DECODING,
    "split": Argument(Literal["test", "val"]),
    "device": Argument(str, device),
    "batch_tokens": Argument(int, at_least(1, "a number of tokens")),
    "data": Argument(dict),
    "src_file": Argument(str | None, text_file("one source sentence per line")),
    "ref_file": Argument(str | None, text_file("one reference per line")),
    "output": Argument(str | None),
    "seq_lens": Argument(int | list[int] | None, lengths),
    "text_file": Argument(str | None, text_file("UTF-8 text")),
    "default_data": Argument(str),
}
EXPORT_HF = {
    **CHECKPOINT,
    "out": Argument(str, example="out=exports/my_model"),
    "verify": Argument(bool),
    "overwrite": Argument(bool),
}
AVERAGE_CHECKPOINTS = {
    "ckpt_dir": Argument(str | None),
    "trust_checkpoint": Argument(bool),
    "last_n": Argument(int, at_least(1, "a number of checkpoints")),
    "ckpts": Argument(list[str] | None),
    "out": Argument(str, example="ckpt_dir=<run>/checkpoints out=<run>/checkpoints/averaged.ckpt"),
    "weights": Argument(Literal["state_dict", "raw"]),
    "allow_changes": Argument(list[str]),
    "overwrite": Argument(bool),
}
ATTENTION_MAPS = {
    **CHECKPOINT,
    "text": Argument(str),
    "target": Argument(str | None),
    "max_tokens": Argument(int, at_least(1, "a number of tokens")),
    "out": Argument(str | None),
}
SCRIPT_ARGUMENTS: dict[str, Mapping[str, Argument]] = {
    "generate": GENERATE,
    "translate": TRANSLATE,
    "eval": EVAL,
    "export_hf": EXPORT_HF,
    "average_checkpoints": AVERAGE_CHECKPOINTS,
    "attention_maps": ATTENTION_MAPS,
}


def check_arguments(cfg: DictConfig, arguments: Mapping[str, Argument], script: str) -> None:
    """Refuse a missing, mistyped or out-of-range argument, naming the key and what it takes."""
    for key, argument in arguments.items():
        if OmegaConf.is_missing(cfg, key):  # (`key in cfg` is False for a ??? value)
            example = argument.example or f"{key}=..."
            raise ConfigError(f"{script} needs {key}: e.g. python {script} {example}")
    values = {key: value for key, value in plain_items(cfg) if value is not UNRESOLVED}
    for key in values:
        if key not in arguments and key != "paths":  # paths: where data lives (conf/paths)
            raise ConfigError(top_level_key_message(key, [*arguments, *(["paths"] if "paths" in values else [])]))
    for key, argument in arguments.items():
        if key not in values:
            continue
        value = values[key]
        if not type_ok(value, argument.hint):
            raise ConfigError(wrong_type_message(key, value, argument.hint))
        problem = argument.problem(value) if argument.problem is not None else None
        if problem:
            raise ConfigError(f"{key}={value!r} is invalid: {problem}")
    if script == "eval.py" and values.get("ref_file") and not values.get("src_file"):
        raise ConfigError("ref_file is given without src_file: give the source sentences with src_file=...")


def checker(name: str) -> Callable[[DictConfig, list[str]], None]:
    """The command-line check of ``<name>.py`` for :func:`ablate.cli.entry_point`."""
    script = f"{name}.py" if name in ("eval", "generate", "translate") else f"scripts/{name}.py"

    def check(cfg: DictConfig, overrides: list[str]) -> None:
        check_arguments(cfg, SCRIPT_ARGUMENTS[name], script)

    return check
