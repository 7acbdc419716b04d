"""Issue 52 item 3 (the fifth hostile round): a damaged token cache reached through a symbolic link
was "rebuilt" (the link could not be removed, the rename onto it failed, and that failure was taken
for a concurrent build) and then used, damaged. Now it is refused, naming the link and its target,
and nothing the link points at changes; a cache that is not a link is still rebuilt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ablate.data import cache
from ablate.errors import UserError


def build(folder: Path) -> None:
    (folder / "train.bin").write_bytes(bytes(range(64)))
    cache.write_meta(folder, {"corpus": "test"})


def test_a_damaged_cache_behind_a_link_is_refused_and_left_as_it_is(tmp_path):
    copy = cache.ensure_cache(tmp_path / "elsewhere" / "corpus-char-0123", build)
    (copy / "train.bin").write_bytes(bytes(64))  # zeroed, the same size: only the checksum tells
    final = tmp_path / "cache" / "corpus-char-0123"
    final.parent.mkdir()
    final.symlink_to(copy)
    with pytest.raises(UserError, match=rf"{final} is a symbolic link to {copy}, which is not rebuilt"):
        cache.ensure_cache(final, build)
    assert final.is_symlink() and (copy / "train.bin").read_bytes() == bytes(64)  # nothing was used or changed
    assert json.loads((copy / cache.META).read_text())["corpus"] == "test"


def test_a_damaged_cache_folder_is_rebuilt(tmp_path, caplog):
    final = cache.ensure_cache(tmp_path / "cache" / "corpus-char-0123", build)
    (final / "train.bin").write_bytes(bytes(64))
    cache._VERIFIED.discard(final)  # another process: the checksums are checked again
    assert cache.ensure_cache(final, build) == final
    assert (final / "train.bin").read_bytes() == bytes(range(64)) and "rebuilding the cache" in caplog.text
