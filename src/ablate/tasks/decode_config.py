"""The ``decode`` config group: how a translation model searches (:mod:`ablate.tasks.decoding`);
here, without torch, so that the command line is typed before torch is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class DecodeConfig:
    PATH: ClassVar[str] = "decode"  # schema/decode (ablate.config.store), what task=translation extends
    beam_size: int = 4
    length_penalty: float = 0.6
    max_len_a: float = 1.2
    max_len_b: int = 10
    use_cache: bool = True

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any] | None, **overrides: Any) -> DecodeConfig:
        values = {k: v for k, v in dict(cfg or {}).items() if k in cls.__dataclass_fields__}
        values.update({k: v for k, v in overrides.items() if v is not None})
        out = cls(**values)
        if out.beam_size < 1:
            raise ValueError(f"decode.beam_size must be >= 1, got {out.beam_size}")
        return out
