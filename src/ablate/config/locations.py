"""Where the project's folders are: one rule (``$ABLATE_*`` variables, else the checkout's or the
current directory), used by the configs (``conf/paths``) and the code, from any working directory.
None of it reads Hydra's runtime config, so a sweeper can resolve ``hydra.sweep.dir`` before Hydra
has set it (``${hydra:runtime.cwd}`` failed there)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

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


def conf_dir() -> Path:
    """The ``conf/`` folder the entry points' ``@hydra.main`` read: this package's checkout's, else the
    one beside the running script, else ``<root>/conf``."""
    checkout = checkout_root()
    if checkout is None:  # an installed copy, run through a checkout's train.py or scripts/*.py
        script = Path(sys.argv[0]).resolve().parent
        for folder in (script, script.parent):
            if (folder / "conf" / "train.yaml").is_file():
                return folder / "conf"
    return (checkout or project_root()) / "conf"


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


def folder_problem(folder: str | Path, must_exist_writable: bool = True) -> str | None:
    """Why files cannot be written into ``folder`` (made when missing), or None; a write is tried,
    as permissions alone do not tell (a read-only mount, root). ``must_exist_writable=False``: an
    existing folder may be read-only (a shared, prebuilt cache)."""
    folder = Path(folder)
    too_long = _name_too_long(folder)  # first: any other look at such a path raises Errno 36
    if too_long:
        return too_long
    if folder.exists() and not folder.is_dir():
        return "it is a file, not a folder"
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if existing == folder and not must_exist_writable:
        return None
    try:
        handle, name = tempfile.mkstemp(dir=existing, prefix=".ablate-write-test-")
        os.close(handle)
        os.unlink(name)
    except OSError as err:
        where = "it" if existing == folder else f"{existing}, where it would be made,"
        return f"{where} cannot be written ({err.strerror or err})"
    return None


def _name_too_long(folder: Path) -> str | None:
    """Why the file system cannot hold ``folder`` (a part longer than its longest file name), or None."""
    parts = folder.absolute().parts
    longest = max(parts, key=lambda part: len(os.fsencode(part)))
    try:
        limit = os.pathconf(parts[0], "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    size = len(os.fsencode(longest))
    if size <= limit:
        return None
    return f"its part {longest[:24]}... is {size} bytes long, more than the {limit} a file name may have"


def env_name(key: str) -> str | None:
    """The environment variable that set ``paths.<key>`` (``cache_dir`` -> ``ABLATE_CACHE_DIR``), when set."""
    name = {"data_dir": ENV_DATA_DIR, "cache_dir": ENV_CACHE_DIR, "log_dir": ENV_LOG_DIR, "root_dir": ENV_ROOT}.get(key)
    return name if name and os.environ.get(name) else None


def check_writable_folders(paths: Any, run_dir: str | Path | None = None) -> None:
    """Refuse, before anything runs, a log folder that cannot be written, a cache folder that is a file
    or cannot be made (an existing read-only cache may be read), and a run folder that cannot be written."""
    from ablate.errors import ConfigError

    for key, strict in (("log_dir", True), ("cache_dir", False)):
        try:
            value = paths[key]
        except Exception:  # unset, or does not resolve here: nothing to check
            continue
        problem = folder_problem(value, must_exist_writable=strict) if value else None
        if problem:
            by = env_name(key)
            named = f"{by}={os.environ[by]} (paths.{key})" if by else f"paths.{key}={value}"
            variable = by or f"ABLATE_{key.upper()}"
            raise ConfigError(
                f"{named} is not a folder this run can use: {problem}. Set {variable} (or paths.{key}=...) to a "
                "folder you can write"
            )
    problem = folder_problem(run_dir) if run_dir is not None else None
    if problem:
        existing = "copy the run to a writable folder" if os.path.exists(str(run_dir)) else "choose another folder"
        raise ConfigError(
            f"hydra.run.dir={run_dir} cannot be written: {problem}. A run writes its log, config and status there, "
            f"also to resume or to report a finished run: {existing}"
        )
