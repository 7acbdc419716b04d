"""Where raw corpus files come from: a local folder, a plain URL, or the Hugging Face Hub.

Every failure to obtain data raises :class:`DataNotFoundError` saying which file is needed, where
it was looked for, where to get it and how to point the project at another folder: an offline
machine fails in seconds with a fix in hand instead of hanging on a network timeout.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ablate.config import locations
from ablate.config.locations import ENV_DATA_DIR
from ablate.errors import UserError

HUB_PROBE_TIMEOUT_S = 3.0
_TRUE_VALUES = {"1", "ON", "YES", "TRUE"}

_HOW_TO_REDIRECT = (
    f"To use data from another folder, run with `paths.data_dir=/path/to/data` "
    f"or set the environment variable {ENV_DATA_DIR}=/path/to/data."
)


class DataNotFoundError(UserError, FileNotFoundError):
    """A corpus file is neither on disk nor obtainable from the network."""


class DataFormatError(UserError, ValueError):
    """A data file that exists but cannot be read as text; the message names the file."""


def read_utf8_lines(path: str | os.PathLike[str]) -> list[str]:
    """The lines of a plain or gzipped (``.gz``) UTF-8 file, line ends kept; a file that is not UTF-8
    raises :class:`DataFormatError` naming it and the first bad byte."""
    import gzip

    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return f.readlines()
    except UnicodeDecodeError as err:
        bad = err.object[err.start : err.start + 4]
        raise DataFormatError(
            f"{path} is not valid UTF-8 (byte {bad!r} near offset {err.start:,} of the decoded chunk): convert it, "
            f"e.g. `iconv -f latin1 -t utf-8 {path} > fixed.txt`"
        ) from None


def read_utf8(path: str | os.PathLike[str]) -> str:
    """The whole text of a UTF-8 file (see :func:`read_utf8_lines`)."""
    return "".join(read_utf8_lines(path))


def default_data_dir() -> Path:
    """The data folder used when none is configured (:func:`ablate.config.locations.data_dir`)."""
    return locations.data_dir()


def default_cache_dir() -> Path:
    """The cache folder used when none is configured (:func:`ablate.config.locations.cache_dir`)."""
    return locations.cache_dir()


def resolve_local(
    data_dir: str | os.PathLike[str] | None, relpath: str | os.PathLike[str], what: str = "data file"
) -> Path | None:
    """``data_dir/relpath`` (an absolute ``relpath`` as is) if that file exists, else ``None``;
    something else in its place raises :class:`DataFormatError` (:func:`regular_file`)."""
    base = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    return regular_file(base / Path(relpath).expanduser(), what)


def regular_file(path: Path, what: str) -> Path | None:
    """``path`` when it is a regular file (or a link to one), ``None`` when nothing is there; a
    directory, device, pipe or socket is named as what it is (:class:`DataFormatError`) from its
    metadata alone, never opened (a pipe would block, ``/dev/zero`` never ends)."""
    try:
        mode = path.stat().st_mode
    except OSError:  # missing, or a path through a file
        return None
    if stat.S_ISREG(mode):
        return path
    kind = next((name for test, name in _NOT_FILES if test(mode)), "not a regular file")
    raise DataFormatError(f"{what}: {path} is {kind}, not a text file; give the path of a text file")


_NOT_FILES = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def missing_file_message(name: str, expected: Path, url: str | None = None, reason: str | None = None) -> str:
    """The standard text of a :class:`DataNotFoundError` for one file."""
    lines = [f"Data file '{name}' is missing: looked for it at {expected.absolute()}."]
    if reason:
        lines.append(f"Reason: {reason}")
    if url:
        lines.append(f"Download it from {url} and save it at that path (no network access here?).")
    lines.append(_HOW_TO_REDIRECT)
    return "\n".join(lines)


def download_url(url: str, dest: str | os.PathLike[str], timeout: float = 10) -> Path:
    """Download ``url`` to ``dest`` atomically; network errors become :class:`DataNotFoundError`."""
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    except OSError as err:
        raise DataNotFoundError(
            missing_file_message(dest.name, dest, url, reason=f"cannot write to {dest.parent} ({err})")
        ) from err
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            shutil.copyfileobj(response, out)
        os.replace(tmp, dest)
    except (OSError, urllib.error.URLError, ValueError) as err:
        # URLError covers DNS/refused/HTTP errors; OSError covers timeouts and resets
        # mid-transfer; ValueError a malformed URL.
        raise DataNotFoundError(missing_file_message(dest.name, dest, url, reason=f"download failed: {err}")) from err
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def hub_offline_reason() -> str | None:
    """Why the Hub cannot be used right now, or ``None`` if it looks reachable (checked first:
    ``datasets.load_dataset`` can spend minutes in retries offline)."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").upper() in _TRUE_VALUES:
            return f"{var}={os.environ[var]} is set"
    endpoint = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_TIMEOUT_S).close()
    except OSError as err:
        return f"cannot connect to {host}:{port} ({err})"
    return None


def hub_error_message(path: str, name: str | None, local_alternative: str, reason: str) -> str:
    """The text of a :class:`DataNotFoundError` for a Hub dataset that cannot be loaded."""
    config = f" (config '{name}')" if name else ""
    return (
        f"Hugging Face dataset '{path}'{config} cannot be loaded: {reason}.\n"
        f"Local alternative: {local_alternative}\n{_HOW_TO_REDIRECT}"
    )


def _network_errors() -> tuple[type[BaseException], ...]:
    """Exception types that mean 'the Hub could not be reached' (library-version tolerant)."""
    errors: list[type[BaseException]] = [OSError]  # includes ConnectionError, HfHubHTTPError
    try:
        import httpx

        errors.append(httpx.HTTPError)
    except ImportError:
        pass
    return tuple(errors)


def load_hub_dataset(path: str, name: str | None = None, *, local_alternative: str, **kwargs: Any) -> Any:
    """``datasets.load_dataset(path, name, **kwargs)``, failing fast offline, naming ``local_alternative``."""
    reason = hub_offline_reason()
    if reason is not None:
        raise DataNotFoundError(hub_error_message(path, name, local_alternative, reason))
    import datasets  # imported lazily: it is slow to import and only needed here

    try:
        return datasets.load_dataset(path, name, **kwargs)
    except _network_errors() as err:
        raise DataNotFoundError(
            hub_error_message(path, name, local_alternative, f"{type(err).__name__}: {err}")
        ) from err
