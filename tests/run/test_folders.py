"""Folders and disks (issue 32 item 11): a folder a command cannot write is refused at start naming
it and the variable that chose it; a full disk names the path; sizes read as sizes; an empty
parallel file is named, not blamed on data.seq_len; eval.py checks where the hypotheses go before
decoding. The tests run as root, where permissions do not stop a write: /proc (where no file can be
made) stands in for a read-only folder."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.config.locations import check_writable_folders, folder_problem
from ablate.data import cache
from ablate.errors import ConfigError
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO

UNWRITABLE = Path("/proc/ablate-no-such-folder")


def test_folder_problem_names_a_file_in_place_and_an_unwritable_disk(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert folder_problem(tmp_path / "afile") == "it is a file, not a folder"
    assert "afile is a file, not a folder" in str(folder_problem(tmp_path / "afile" / "below"))
    assert "/proc, where it would be made, cannot be written" in str(folder_problem(UNWRITABLE))
    assert folder_problem(tmp_path / "new" / "deeper") is None and not (tmp_path / "new").exists()
    assert folder_problem(Path("/proc"), must_exist_writable=False) is None  # a read-only cache may be read


def test_the_variable_that_chose_a_folder_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "afile"))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match=r"ABLATE_CACHE_DIR=.*afile \(paths\.cache_dir\) is not a folder this run"):
        check_writable_folders({"log_dir": str(tmp_path), "cache_dir": str(tmp_path / "afile")})
    with pytest.raises(ConfigError, match=r"hydra\.run\.dir=/proc/run cannot be written"):
        check_writable_folders({"log_dir": str(tmp_path)}, "/proc/run")


def test_sizes_read_as_sizes_not_zero_gb(tmp_path, monkeypatch):
    monkeypatch.setattr(cache.shutil, "disk_usage", lambda p: type("Usage", (), {"free": 1_200})())
    with pytest.raises(cache.CacheSpaceError, match=r"needs about 5\.3 kB but .* has 1\.2 kB free"):
        cache.check_free_space(tmp_path / "c", 5_300)
    assert cache.human_bytes(2_100_000_000) == "2.10 GB" and cache.human_bytes(412) == "412 B"


def test_a_full_disk_during_a_cache_build_names_the_folder(tmp_path):
    def fills_the_disk(folder: Path) -> None:
        (folder / "train.bin").write_bytes(b"x")
        raise OSError(errno.ENOSPC, "No space left on device")  # what write() raises: no file name

    final = tmp_path / "cache" / "corpus-char-0123"
    with pytest.raises(cache.CacheSpaceError, match=rf"{tmp_path / 'cache'}: No space left on device\); the partial"):
        cache.ensure_cache(final, fills_the_disk)
    assert not final.exists() and not list((tmp_path / "cache").glob(".corpus-char-0123.tmp-*"))


def test_a_cache_folder_that_cannot_be_made_is_named(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(cache.CacheFolderError, match=r"cannot be built in .*afile .*set ABLATE_CACHE_DIR"):
        cache.ensure_cache(tmp_path / "afile" / "corpus", lambda folder: None)


def test_an_empty_parallel_file_is_named_not_blamed_on_seq_len(tmp_path):
    from ablate.data.sources import DataFormatError
    from ablate.data.translation_text import check_aligned, file_source

    (tmp_path / "train.de").write_text("")
    (tmp_path / "train.en").write_text("")
    sides = {lang: file_source(tmp_path / f"train.{lang}") for lang in ("de", "en")}
    with pytest.raises(DataFormatError, match=r"the train split: .*train\.de is empty \(0 lines\)"):
        check_aligned("the train split", sides)


def _run(tmp_path: Path, script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", **env}
    full.pop("HYDRA_FULL_ERROR", None)
    return forked_python.run(
        [sys.executable, str(REPO / script), *args],
        cwd=tmp_path,
        env=full,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({"ABLATE_CACHE_DIR": "{tmp}/afile"}, [], "ABLATE_CACHE_DIR={tmp}/afile (paths.cache_dir) is not a folder"),
        ({"ABLATE_LOG_DIR": str(UNWRITABLE)}, [], f"ABLATE_LOG_DIR={UNWRITABLE} (paths.log_dir) is not a folder"),
        ({}, ["hydra.run.dir=/proc/finished-run", "ckpt_path=last"], "hydra.run.dir=/proc/finished-run cannot be"),
    ],
)
def test_train_refuses_a_folder_it_cannot_write_before_hydra(tmp_path, env, args, message):
    (tmp_path / "afile").write_text("x")
    env = {k: v.format(tmp=tmp_path) for k, v in env.items()}
    proc = _run(tmp_path, "train.py", "debug=fdr", "logger=csv", *args, **env)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert message.format(tmp=tmp_path) in proc.stderr
    assert "Traceback" not in proc.stderr and "Unable to configure handler" not in proc.stderr


@pytest.mark.integration
def test_eval_checks_where_the_hypotheses_go_before_translating(tmp_path):
    from helpers.checkpoints import translation_checkpoint

    ckpt = translation_checkpoint(tmp_path / "tr.ckpt")
    (tmp_path / "s.de").write_text("ein hund\n")
    (tmp_path / "r.en").write_text("a dog\n")
    proc = _run(
        tmp_path, "eval.py", f"ckpt_path={ckpt}", "src_file=s.de", "ref_file=r.en", f"output={UNWRITABLE}/t.hyp"
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"the hypotheses go to {UNWRITABLE}/t.hyp, but {UNWRITABLE}: /proc, where it would be made" in proc.stderr
