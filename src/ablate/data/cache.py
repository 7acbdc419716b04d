"""Token caches that are complete and intact, or rebuilt: shared by the LM and translation data.

A cache folder is built under a temporary name and renamed into place; ``meta.json``, written
last, lists every other file's size and SHA-256, checked before use (a damaged cache is rebuilt).
Parallel jobs wait on an ``flock`` for the first one's build; one that would not fit is refused.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ablate.errors import UserError
from ablate.writes import human_bytes, is_disk_full, size_limit, write_text_atomically

log = logging.getLogger(__name__)

META = "meta.json"
_HASH_CHUNK = 1 << 22
_VERIFIED: set[Path] = set()  # folders whose checksums this process has checked
_NEEDED: dict[Path, int] = {}  # build folder -> the bytes check_free_space was told it needs


class CacheCorruptError(RuntimeError):
    """A cache file does not match its ``meta.json``; the message names the file."""


class CacheSpaceError(UserError, OSError):
    """The disk cannot hold the cache that is about to be built; the message says how much is missing."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return str(self.args[1])


def check_free_space(folder: Path, needed: int | None) -> None:
    """Refuse to start writing ``needed`` bytes (None: unknown) into ``folder`` without the free space."""
    if needed is None:
        return
    _NEEDED[Path(folder)] = needed  # named again if the disk fills up anyway (another writer)
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise CacheSpaceError(
            f"the token cache needs about {human_bytes(needed)} but {folder.parent} has {human_bytes(free)} free: "
            "free some space, or put the cache on a larger disk with paths.cache_dir=... (or ABLATE_CACHE_DIR)"
        )


class CacheLinkError(UserError):
    """A damaged cache reached through a symbolic link: refused, naming the link and its target."""


class CacheFolderError(UserError, OSError):
    """The cache folder cannot be written where a cache must be built; the message names it."""


def _folder_error(final: Path, err: OSError, needed: int | None = None) -> UserError:
    """A failed write into the cache folder (size limit, full disk, unwritable), named with the path."""
    where = err.filename or final.parent
    if limit := size_limit(err):
        return CacheFolderError(
            f"the token cache cannot be built in {final.parent} ({where}): a file reached {limit[0]}, with "
            f"{human_bytes(shutil.disk_usage(final.parent).free)} free on the disk; the partial cache was removed. {limit[1]}"
        )
    if is_disk_full(err):
        why = err.strerror or "No space left on device"
        size = f"about {human_bytes(needed)} needed, " if needed is not None else ""
        free = shutil.disk_usage(final.parent).free
        return CacheSpaceError(
            f"the disk filled up while the token cache was written ({where}: {why}); the partial cache was removed "
            f"({size}{human_bytes(free)} free now). Free some space, or put the cache on a larger disk with "
            "paths.cache_dir=... (or ABLATE_CACHE_DIR)"
        )
    return CacheFolderError(
        f"the token cache cannot be built in {final.parent} ({where}: {err.strerror or err}): set ABLATE_CACHE_DIR "
        "(or paths.cache_dir=...) to a folder you can write"
    )


HASH_MEMO = ".source-sha256.json"  # in a cache folder: each source file's SHA-256, by its stat identity
# a file changed less than this long ago is hashed but not remembered: ctime comes from a coarse
# clock, so a rewrite within the same tick would show the same identity (git's "racily clean")
RACY_NS = 2_000_000_000


def _stat_identity(path: Path) -> list[int]:
    """What changes whenever a file's bytes can have changed: size, mtime, inode, device and ctime
    (set on every write and ``utime``: a rewrite given back its old mtime still shows)."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def content_sha256(path: Path, memo_dir: Path | None = None) -> str:
    """SHA-256 of a source file's bytes, remembered in ``memo_dir`` by its :func:`_stat_identity`."""
    path = path.absolute()
    identity = _stat_identity(path)
    memo_file = memo_dir / HASH_MEMO if memo_dir is not None else None
    memo: dict[str, Any] = {}
    if memo_file is not None:
        try:
            loaded = json.loads(memo_file.read_text())
            memo = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            memo = {}
        entry = memo.get(str(path))
        if isinstance(entry, dict) and entry.get("stat") == identity and isinstance(entry.get("sha256"), str):
            return str(entry["sha256"])
    digest = sha256_file(path)
    settled = time.time_ns() - max(identity[1], identity[2]) > RACY_NS
    if memo_file is not None and settled and _stat_identity(path) == identity:  # not changed while it was read
        memo[str(path)] = {"stat": identity, "sha256": digest}
        try:
            memo_file.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomically(memo_file, json.dumps(memo))  # a concurrent reader sees the old or the new
        except OSError:
            pass
    return digest


def file_fingerprint(
    paths: Mapping[str, Path], full_paths: bool = False, memo_dir: Path | None = None
) -> list[list[Any]]:
    """Identity of source files (name or path, size, content SHA-256), hashed into a cache folder's
    name: it changes whenever a file's content does, even with the same size and mtime."""
    return [
        [key, str(p.absolute()) if full_paths else p.name, p.stat().st_size, content_sha256(p, memo_dir)]
        for key, p in sorted(paths.items())
    ]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_HASH_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def write_meta(folder: Path, meta: dict[str, Any]) -> None:
    """Write ``meta.json`` (last: it marks the folder complete) with every other file's size and checksum."""
    files = {
        p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != META
    }
    (folder / META).write_text(json.dumps({**meta, "files": files}, indent=2))


DATA_SPLITS = ("train", "val", "test")


def split_fingerprints(files: Mapping[str, Any]) -> dict[str, str]:
    """Per split of a cache, the SHA-256 of its files' names and checksums: equal, the same tokens."""
    by_split: dict[str, list[str]] = {}
    for name, entry in sorted(files.items()):
        split = name.split(".", 1)[0]
        if split in DATA_SPLITS and isinstance(entry, Mapping):
            by_split.setdefault(split, []).append(f"{name}:{entry.get('sha256')}")
    return {split: hashlib.sha256("\n".join(lines).encode()).hexdigest() for split, lines in by_split.items()}


def read_meta(folder: Path, checksums: bool = False) -> dict[str, Any]:
    """``meta.json`` of a complete cache, every listed file's size (and SHA-256) checked."""
    meta_path = folder / META
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as err:
        raise CacheCorruptError(f"{meta_path} cannot be read ({type(err).__name__}: {err})") from None
    files = meta.get("files") if isinstance(meta, dict) else None
    if not isinstance(files, dict):
        raise CacheCorruptError(f"{meta_path} lists no files (written by an older version or damaged)")
    for name, expected in files.items():
        path = folder / name
        size = path.stat().st_size if path.is_file() else None
        if size != expected["bytes"]:
            found = "missing" if size is None else f"{size:,} bytes"
            raise CacheCorruptError(f"{path} is damaged: {found}, {meta_path} records {expected['bytes']:,} bytes")
        if checksums and sha256_file(path) != expected["sha256"]:
            raise CacheCorruptError(f"{path} is damaged: its SHA-256 differs from the one {meta_path} records")
    return meta


def ensure_cache(final: Path, build: Callable[[Path], None]) -> Path:
    """A complete, intact cache at ``final``, verified, or built by ``build(folder)`` (one process at a time)."""
    if _intact(final):
        return final
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        # read-only is enough for flock, and opens a lock file another user of a shared cache created
        lock = os.open(final.parent / f".{final.name}.lock", os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError as err:
        raise _folder_error(final, err) from None
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("Another process is building %s: waiting for it", final)
            fcntl.flock(lock, fcntl.LOCK_EX)
        if _intact(final):  # built by the process we waited for
            return final
        for stale in final.parent.glob(f".{final.name}.tmp-*"):
            # we hold the lock, so no build is running: this is what a killed one left
            log.warning("Removing %s, left by a build that did not finish", stale)
            shutil.rmtree(stale, ignore_errors=True)
        return _build(final, build)
    finally:
        os.close(lock)  # releases the lock


def _intact(final: Path) -> bool:
    """Whether ``final`` holds a complete cache matching its ``meta.json`` (a damaged one is removed)."""
    if (final / META).exists():
        try:
            # the checksums once per process (fit, test and eval each call prepare_data); sizes every time
            read_meta(final, checksums=final not in _VERIFIED)
            if final not in _VERIFIED:
                _VERIFIED.add(final)
                log.info("Using cached tokens from %s", final)
            return True
        except CacheCorruptError as err:
            if final.is_symlink():  # rebuilding would replace the link, not repair what it points at
                raise CacheLinkError(
                    f"{err}; the cache {final} is a symbolic link to {final.resolve()}, which is not rebuilt through "
                    "the link: remove the link (the cache is then built in its place) or repair what it points at"
                ) from None
            log.warning("%s; rebuilding the cache %s", err, final)
            try:
                shutil.rmtree(final)
            except OSError as gone:  # a shared cache this user cannot clear: named, never used damaged
                raise _folder_error(final, gone) from None
    return False


def _build(final: Path, build: Callable[[Path], None]) -> Path:
    """``build`` into a temporary folder beside ``final``, renamed into place when complete."""
    try:
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp-"))
    except OSError as err:
        raise _folder_error(final, err) from None
    tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared between users
    try:
        try:
            build(tmp)
        except OSError as err:
            if (is_disk_full(err) or size_limit(err)) and not isinstance(err, UserError):
                raise _folder_error(final, err, _NEEDED.get(tmp)) from None
            raise
        finally:
            _NEEDED.pop(tmp, None)
        if final.exists() and not (final / META).is_file():
            shutil.rmtree(final)  # an incomplete folder under the final name is never trusted
        try:
            os.rename(tmp, final)
        except OSError:
            try:  # a concurrent build renamed its intact cache into place first: that one is used
                read_meta(final, checksums=True)
            except CacheCorruptError:
                raise _folder_error(final, OSError(errno.EEXIST, "cannot be replaced", str(final))) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
