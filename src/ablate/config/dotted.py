"""Dotted keys (``optim.lr``) in plain nested mappings: the resolved configs that runs record."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def select(config: Mapping[str, Any], key: str) -> Any:
    """The value at the dotted ``key`` of a nested mapping, or None when any part is missing."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as ``{dotted key: leaf}``; a list or tuple is one leaf, as a list."""
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: list(node) if isinstance(node, (list, tuple)) else node}


def override_key(override: str) -> str:
    """``+optim.lr=1e-3`` -> ``optim.lr``: a Hydra override's key (``+``/``++``/``~`` prefixes dropped)."""
    return override.split("=", 1)[0].lstrip("+~").strip()
