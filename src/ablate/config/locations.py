"""Where the project's folders are: one rule, used by the configs (``conf/paths``) and the code.

``python train.py`` inside the activated environment, ``bash scripts/run.sh python train.py`` and
``python /elsewhere/ablate/run/train.py`` run from another directory all find the same folders:

- the project root: ``$ABLATE_ROOT``, else the checkout this package was installed from (the folder
  holding ``conf/train.yaml`` above ``src/ablate``), else the current directory;
- data: ``$ABLATE_DATA_DIR``, else ``../shared/data`` beside the checkout when it exists (the shared
  corpora of a development machine), else ``<root>/data`` (corpora are downloaded there);
- caches: ``$ABLATE_CACHE_DIR``, else ``<root>/cache``; logs: ``$ABLATE_LOG_DIR``, else ``<root>/logs``.

None of this reads Hydra's runtime config, so a sweeper can resolve ``hydra.sweep.dir`` before Hydra
has set it (Hydra's basic sweeper does exactly that: ``${hydra:runtime.cwd}`` failed there).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_ROOT = "ABLATE_ROOT"
ENV_DATA_DIR = "ABLATE_DATA_DIR"
ENV_CACHE_DIR = "ABLATE_CACHE_DIR"
ENV_LOG_DIR = "ABLATE_LOG_DIR"

SHARED_DATA = Path("..") / "shared" / "data"
"""The shared corpora beside a checkout (a development machine or CI), relative to the root."""


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser().absolute() if value else None


def checkout_root() -> Path | None:
    """The checkout holding this package (an editable install), or None for an installed copy."""
    candidate = Path(__file__).resolve().parents[3]  # src/ablate/config/locations.py -> the checkout
    return candidate if (candidate / "conf" / "train.yaml").is_file() else None


def project_root() -> Path:
    """``$ABLATE_ROOT``, else this package's checkout, else the current directory."""
    return _env_path(ENV_ROOT) or checkout_root() or Path.cwd()


def data_dir(root: str | Path | None = None) -> Path:
    """``$ABLATE_DATA_DIR``, else ``<root>/../shared/data`` when it exists, else ``<root>/data``."""
    explicit = _env_path(ENV_DATA_DIR)
    if explicit is not None:
        return explicit
    root = Path(root) if root else project_root()
    shared = root / SHARED_DATA
    return shared.resolve() if shared.is_dir() else root / "data"


def cache_dir(root: str | Path | None = None) -> Path:
    """``$ABLATE_CACHE_DIR``, else ``<root>/cache``."""
    return _env_path(ENV_CACHE_DIR) or (Path(root) if root else project_root()) / "cache"


def log_dir(root: str | Path | None = None) -> Path:
    """``$ABLATE_LOG_DIR``, else ``<root>/logs``."""
    return _env_path(ENV_LOG_DIR) or (Path(root) if root else project_root()) / "logs"
