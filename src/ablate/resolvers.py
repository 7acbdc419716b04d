"""OmegaConf resolvers used by the configs. Registered on import of :mod:`ablate`."""

from __future__ import annotations

import hashlib

from omegaconf import OmegaConf

MAX_DIRNAME = 120


def job_dirname(override_dirname: str) -> str:
    """A sweep job's directory name from its overrides (``norm=post,pos=rope``): readable, stable
    across re-runs of the same sweep, and short enough for a file system (255 bytes a name).
    Long names keep their start and end with a hash of the whole in between."""
    name = override_dirname.replace("/", "_") or "default"
    if len(name) <= MAX_DIRNAME:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    return f"{name[:60]}..{digest}..{name[-40:]}"


def register() -> None:
    if not OmegaConf.has_resolver("job_dirname"):
        OmegaConf.register_new_resolver("job_dirname", job_dirname)
