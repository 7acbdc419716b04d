"""OmegaConf resolvers used by the configs. Registered on import of :mod:`ablate`."""

from __future__ import annotations

import hashlib

from omegaconf import OmegaConf

MAX_DIRNAME = 120


# Overrides that define a variant come first in a job's directory name, run-control ones last.
ARCHITECTURE_FIRST = ("experiment", "seed", "task", "pos", "norm", "act", "init", "attn", "model", "data", "optim")


def _priority(item: str) -> int:
    top = item.lstrip("+~").split("=", 1)[0].split(".", 1)[0]
    return ARCHITECTURE_FIRST.index(top) if top in ARCHITECTURE_FIRST else len(ARCHITECTURE_FIRST)


def job_dirname(override_dirname: str) -> str:
    """A sweep job's directory name from its overrides (``norm=post,pos=rope``): readable, stable
    across re-runs of the same sweep, and short enough for a file system (255 bytes a name).

    A long name keeps the architecture overrides first and ends with a hash of the whole, so
    two jobs never share a directory."""
    name = override_dirname.replace("/", "_") or "default"
    if len(name) <= MAX_DIRNAME:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    items = sorted(name.split(","), key=_priority)  # stable: command-line order within a rank
    kept = ""
    for item in items:
        if len(kept) + len(item) + 1 > MAX_DIRNAME - 12:
            break
        kept = f"{kept},{item}" if kept else item
    return f"{kept}..{digest}"


def register() -> None:
    if not OmegaConf.has_resolver("job_dirname"):
        OmegaConf.register_new_resolver("job_dirname", job_dirname)
