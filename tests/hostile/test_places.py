"""Issue 41 items 2, 5, 6 and 7 (the fourth hostile round): writes stay inside the run (no link out
of it is written or deleted through), a full disk is named with the file and the bytes and leaves no
partial file, the records say what they hold (an unknown status, a sweep.json that is not a list
of commands), and odd places are named as what they are: a read-only sweep folder, a name too long
for the file system, a directory, a FIFO or a device as a corpus file."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import tempfile
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ablate.analysis.commands import plot as plot_command
from ablate.analysis.commands import summarize as summarize_command
from ablate.analysis.job import load_job
from ablate.callbacks.checkpointing import AtomicCheckpointIO
from ablate.config.locations import check_writable_folders, folder_problem
from ablate.data import cache
from ablate.data.lm_data import TextFiles
from ablate.data.sources import DataFormatError
from ablate.data.translation_data import ParallelFiles
from ablate.errors import ConfigError, UserError
from ablate.run.status import RunStatus, read_status, record_status, write_status
from ablate.sweepers.job_dirs import SweepCommand, check_compatible, record_command
from ablate.tasks.lm_eval import units_path
from ablate.tracking.csv_logger import MetricsWriter
from ablate.writes import DiskFullError, LinkOutsideError, check_run_folder, inside

# --- links out of the run ------------------------------------------------------------------------


def test_a_link_out_of_the_run_is_refused_by_name_and_one_inside_is_not(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "elsewhere"
    (run / "wandb" / "offline-run-1").mkdir(parents=True)
    outside.mkdir()
    (outside / "best.ckpt").write_bytes(b"theirs")
    (run / "wandb" / "latest-run").symlink_to("offline-run-1")  # W&B's own link, inside the run
    check_run_folder(run)
    (run / "checkpoints").symlink_to(outside)
    with pytest.raises(LinkOutsideError, match=rf"{run / 'checkpoints'} is a symbolic link to {outside}, outside"):
        check_run_folder(run, [run / "checkpoints"])
    with pytest.raises(LinkOutsideError):
        inside(run / "checkpoints" / "last.ckpt", run)
    assert inside(outside / "x", run) == outside / "x"  # configured elsewhere on purpose: not this check's
    assert (outside / "best.ckpt").read_bytes() == b"theirs"


def test_the_sweep_files_are_not_written_through_a_link(tmp_path, capsys):
    from ablate.callbacks.stop_file import request_stop
    from helpers.sweeps import write_sweep

    sweep, outside = write_sweep(tmp_path / "sweep", {"gelu": [3.0, 3.1], "relu": [3.2, 3.3]}), tmp_path / "outside"
    outside.mkdir()
    (sweep / ".stop").symlink_to(outside / "stop")  # a dangling link: writing it would create the target
    request_stop(sweep / ".stop", "SIGINT")
    assert not (outside / "stop").exists()
    (sweep / ".sweep.lock").symlink_to(outside / "lock")
    with pytest.raises(LinkOutsideError, match=r"\.sweep\.lock is a symbolic link"):
        record_command(sweep, sweep_command(["act=relu,gelu"], {"act"}))
    (outside / "theirs.md").write_text("theirs")
    (sweep / "summary.md").symlink_to(outside / "theirs.md")
    with pytest.raises(SystemExit) as exit_:
        summarize_command.main([str(sweep), "--metric", "val/loss"])
    assert exit_.value.code == 2 and "summary.md is a symbolic link" in capsys.readouterr().err
    assert (
        sorted(p.name for p in outside.iterdir()) == ["theirs.md"] and (outside / "theirs.md").read_text() == "theirs"
    )


def test_the_folders_a_run_writes_are_folders(tmp_path):
    (tmp_path / "wandb").write_text("not a folder")
    with pytest.raises(UserError, match=r"wandb is a file, not a folder: the run writes its wandb files there"):
        check_run_folder(tmp_path)


def test_a_wandb_link_to_a_read_only_mount_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "wandb").symlink_to("/proc")  # a place no file can be made, as a read-only mount
    with pytest.raises(LinkOutsideError, match="wandb is a symbolic link to /proc"):
        check_run_folder(tmp_path / "run")


def test_eval_writes_its_units_beside_its_checkpoint_named_after_it(tmp_path):
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    cfg = OmegaConf.create({"ckpt_path": str(folder / "best.ckpt"), "text_file": None})
    assert units_path(cfg) == folder / "best.test_units@test.npz"  # not <ckpt>/../../eval/test_units@test.npz
    cfg.ckpt_path = str(folder / "last.ckpt")
    assert units_path(cfg) == folder / "last.test_units@test.npz"  # every checkpoint its own file
    cfg.text_file = "/data/my.txt"
    assert units_path(cfg).name == "last.test_units@my.txt.npz"
    (folder / "last.test_units@my.txt.npz").symlink_to(tmp_path / "elsewhere.npz")
    with pytest.raises(LinkOutsideError):
        units_path(cfg)


# --- a full disk -----------------------------------------------------------------------------


def enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_a_checkpoint_is_written_names_it_and_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    path.write_bytes(b"the previous checkpoint")
    monkeypatch.setattr(torch, "save", enospc)
    with pytest.raises(
        DiskFullError, match=rf"\[Errno 28\] No space left on device writing {path} \(about 4\.0 kB needed"
    ):
        AtomicCheckpointIO().save_checkpoint({"w": torch.zeros(1000)}, path)
    assert path.read_bytes() == b"the previous checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no partial temporary file


def test_a_full_disk_while_a_cache_is_built_names_the_bytes(tmp_path):
    def fills_the_disk(folder: Path) -> None:
        cache.check_free_space(folder, 65_546)
        (folder / "train.bin").write_bytes(b"x" * 1907)
        raise OSError("65546 requested and 1907 written")  # numpy's tofile: no errno, no file name

    final = tmp_path / "cache" / "corpus-char-0123"
    with pytest.raises(cache.CacheSpaceError, match=r"the partial cache was removed \(about 65\.5 kB needed"):
        cache.ensure_cache(final, fills_the_disk)
    assert not final.exists() and not list((tmp_path / "cache").glob(".corpus-char-0123.tmp-*"))


def test_a_full_disk_while_the_status_is_written_keeps_the_old_record(tmp_path, monkeypatch):
    write_status(tmp_path, RunStatus("interrupted", steps=3))
    monkeypatch.setattr(Path, "write_bytes", enospc)
    with pytest.raises(DiskFullError, match=rf"writing {tmp_path / 'status.json'} .*needed"):
        record_status(tmp_path, RunStatus("completed", steps=6))
    assert read_status(tmp_path).status == "interrupted"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_a_full_disk_while_metrics_are_written_leaves_the_last_whole_row(tmp_path, monkeypatch):
    writer = MetricsWriter(log_dir=str(tmp_path))
    writer.log_metrics({"train/loss": 3.0}, step=0)
    writer.save()
    before = (tmp_path / "metrics.csv").read_bytes()
    real_open = builtins.open

    def filling_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if "a" in mode:
            real_write = handle.write

            def write(text):
                real_write(text[: len(text) // 2])
                handle.flush()
                raise OSError(errno.ENOSPC, "No space left on device")

            handle.write = write
        return handle

    monkeypatch.setattr(builtins, "open", filling_open)
    writer.log_metrics({"train/loss": 2.0}, step=1)
    with pytest.raises(DiskFullError, match=r"No space left on device writing .*metrics\.csv \(about"):
        writer.save()
    monkeypatch.undo()
    assert (tmp_path / "metrics.csv").read_bytes() == before  # no half row


def test_a_full_disk_while_the_summary_is_written_exits_2_naming_out(tmp_path, monkeypatch, capsys):
    from helpers.sweeps import write_sweep

    sweep = write_sweep(tmp_path, {"gelu": [3.0, 3.1], "relu": [3.2, 3.3]})
    monkeypatch.setattr(summarize_command, "write_summary", enospc)
    with pytest.raises(SystemExit) as exit_:
        summarize_command.main([str(sweep), "--metric", "val/loss"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"cannot write the tables to {sweep}: No space left on device writing" in err and "--out DIR" in err


# --- read-only and odd places ----------------------------------------------------------------


@pytest.fixture
def read_only(monkeypatch):
    """Make a folder behave as on a read-only mount (the tests run as root, where permissions do not
    stop a write): creating, opening for writing or making a folder in it raises EROFS."""

    def make(folder: Path) -> None:
        def under(path) -> bool:
            return str(Path(os.fspath(path)).absolute()).startswith(str(folder))

        def refuse(path):
            raise OSError(errno.EROFS, "Read-only file system", str(path))

        real_open, real_mkstemp, real_mkdir = builtins.open, tempfile.mkstemp, os.mkdir

        def opener(file, mode="r", *args, **kwargs):
            if isinstance(file, (str, os.PathLike)) and under(file) and any(m in mode for m in "wax+"):
                refuse(file)
            return real_open(file, mode, *args, **kwargs)

        def mkstemp(*args, dir=None, **kwargs):
            if dir is not None and under(dir):
                refuse(dir)
            return real_mkstemp(*args, dir=dir, **kwargs)

        def mkdir(path, *args, **kwargs):
            if under(path):
                refuse(path)
            return real_mkdir(path, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", opener)
        monkeypatch.setattr(io, "open", opener)
        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
        monkeypatch.setattr(os, "mkdir", mkdir)

    return make


@pytest.mark.parametrize("command", [summarize_command, plot_command])
def test_the_analysis_of_a_read_only_sweep_names_an_output_option(tmp_path, read_only, capsys, command):
    from helpers.sweeps import write_sweep

    sweep = write_sweep(tmp_path, {"gelu": [3.0, 3.1], "relu": [3.2, 3.3]})
    read_only(sweep)
    with pytest.raises(SystemExit) as exit_:
        command.main([str(sweep), "--metric", "val/loss"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "cannot be written (Read-only file system)" in err and "elsewhere with --out DIR" in err
    assert "Traceback" not in err


def test_a_run_directory_name_longer_than_the_file_system_takes_is_named(tmp_path):
    long = tmp_path / ("x" * 300)
    assert "is 300 bytes long, more than the 255 a file name may have" in str(folder_problem(long))
    with pytest.raises(ConfigError, match=r"hydra\.run\.dir=.* cannot be written: its part x{24}\.\.\. is 300 bytes"):
        check_writable_folders({"log_dir": str(tmp_path)}, long)


@pytest.mark.parametrize("kind", ["a directory", "a named pipe (FIFO)", "a character device"])
def test_a_text_file_that_is_not_a_file_is_named_as_what_it_is(tmp_path, kind):
    (tmp_path / "val.txt").write_text("some text\n")
    train = {"a directory": tmp_path / "folder", "a named pipe (FIFO)": tmp_path / "fifo", "a character device": None}[
        kind
    ]
    if kind == "a directory":
        train.mkdir()
    elif kind.startswith("a named pipe"):
        os.mkfifo(train)  # opening it would block until a writer came: it is never opened
    else:
        train = Path("/dev/zero")
    dm = TextFiles(train_path=train, val_path=tmp_path / "val.txt", data_dir=tmp_path, cache_dir=tmp_path / "c")
    with pytest.raises(
        DataFormatError, match=rf"data\.train_path: {train} is {kind.replace('(', '.').replace(')', '.')}"
    ):
        dm.files()


def test_a_directory_as_a_parallel_file_is_named_as_one(tmp_path):
    (tmp_path / "train.de").mkdir()
    for name in ("train.en", "val.de", "val.en"):
        (tmp_path / name).write_text("ein hund\n")
    dm = ParallelFiles("train.de", "train.en", "val.de", "val.en", data_dir=tmp_path, cache_dir=tmp_path / "c")
    with pytest.raises(DataFormatError, match=r"data\.train_src: .*train\.de is a directory, not a text file"):
        dm.files()


def test_a_parallel_corpus_of_blank_lines_is_a_user_error(tmp_path):
    for name in ("train.de", "train.en", "val.de", "val.en"):
        (tmp_path / name).write_text("\n" * 50)
    dm = ParallelFiles(
        "train.de", "train.en", "val.de", "val.en", data_dir=tmp_path, cache_dir=tmp_path / "c", vocab_size=300
    )
    dm.prepare_data()
    with pytest.raises(UserError, match="every training pair has an empty side"):  # exit code 2, not 1
        dm.setup("fit")


# --- the records -----------------------------------------------------------------------------


def sweep_command(typed: list[str], swept: set[str]) -> SweepCommand:
    return SweepCommand(tuple(typed), frozenset(swept), frozenset())


@pytest.mark.parametrize(
    "record",
    [{"commands": []}, {"commands": [{"overrides": ["norm=pre"]}]}, {"commands": "norm"}, [1, 2]],
    ids=["no command", "no swept keys", "not a list", "not an object"],
)
def test_a_sweep_record_that_is_not_a_list_of_commands_is_refused(tmp_path, record):
    (tmp_path / "norm=pre").mkdir()  # a job of the sweep that ran there
    (tmp_path / "sweep.json").write_text(json.dumps(record))
    with pytest.raises(ConfigError, match=r"sweep\.json is not a list of the commands that ran"):
        check_compatible(tmp_path, sweep_command(["act=relu,gelu"], {"act"}))
    with pytest.raises(ConfigError):
        record_command(tmp_path, sweep_command(["act=relu,gelu"], {"act"}))
    assert json.loads((tmp_path / "sweep.json").read_text()) == record  # not rewritten


def test_an_unknown_status_is_named_as_such(tmp_path, capsys):
    from helpers.sweeps import write_sweep

    sweep = write_sweep(tmp_path, {"gelu": [3.0, 3.1], "relu": [3.2, 3.3]})
    job = sorted(p for p in sweep.iterdir() if p.is_dir())[-1]
    record = json.loads((job / "status.json").read_text())
    (job / "status.json").write_text(json.dumps({**record, "status": "finished-ish"}))
    assert "says status='finished-ish', which is not an outcome" in load_job(job).record["error"]
    summarize_command.main([str(sweep), "--metric", "val/loss", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert "status='finished-ish'" in out and "no status.json: still running, or killed" not in out


def test_numpy_short_writes_count_as_a_full_disk():
    from ablate.writes import is_disk_full

    assert is_disk_full(OSError("65546 requested and 1907 written"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
