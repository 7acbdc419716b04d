"""Acceptance: the documented commands, as a user types them, in a fresh clone (issue 16.2).

What users type is what we test. Every command of the ```bash blocks of DOCUMENTS (README.md, then
docs/recipes.md: one reading order) is read here (line continuations joined, comments dropped) and
run verbatim, in reading order, in a fresh copy of the
working tree per chain (CHAINS: commands that build on each other share a clone; the chains are
independent, so pytest-xdist runs them side by side): a ``git clone`` of this checkout with its uncommitted changes copied over
(the code as it is on disk), in a temp folder with ``../shared`` beside it (a symlink to the shared
corpora next to this checkout), no ``ABLATE_*`` variables, no ``paths.*``/``hydra.*`` overrides the
user would not type, no stdin, W&B and the Hugging Face Hub offline, ``CI=true``.

- ``train.py`` commands (and ``bash scripts/run.sh python train.py``) get exactly one thing
  appended: ``debug=smoke`` (conf/debug/smoke.yaml: fewer steps, batches, learning rates and seeds;
  same paths, outputs, loggers and console). Commands that are already a debug preset, and the
  other entry points (summarize.py, plot.py, eval.py, ...), run verbatim.
- Placeholders (``<run>``, ``<sweep>``, ``<translation run>``) are filled from the run the relevant
  earlier command made.
- COMMANDS below maps every documented command to how it is checked: the exit code and the outputs
  the document promises. A command missing from it fails the tier, naming it and its document; so
  does an entry that no longer matches a documented command. Commands that cannot run here (GPUs,
  SLURM, the test suite itself, the 6-minute default run) are composed and validated as ``train.py``
  would before reading any data (``check_config``, ``training_layout``), with the reason in the
  table. Refusals run verbatim and must exit 2, leaving no run folder.

The environment: the clone's ``.venv`` is a folder of symlinks into this checkout's venv (no pip),
whose site-packages points the editable install at the clone's ``src`` (PYTHONPATH too), with the
stamp ``scripts/setup_env.sh`` looks for, so ``bash scripts/run.sh`` and ``bash scripts/test.sh``
set nothing up.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# the documents whose ```bash blocks the tier runs, in reading order: the README's recipes, then the longer ones
DOCUMENTS = ("README.md", "docs/recipes.md")
SHARED = REPO.parent / "shared"
SMOKE = "debug=smoke"
HANG_TIMEOUT = 1800  # a guard against a hung command, not a speed expectation


# --- the documents' commands ---------------------------------------------------------------------


def strip_comment(line: str) -> str:
    """``line`` without a shell comment: an unquoted ``#`` at the start or after whitespace."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def document_text(name: str) -> str:
    return (REPO / name).read_text()


def readme_commands(text: str) -> list[str]:
    """Every command of the ```bash blocks, in order: ``\\`` continuations joined, comments dropped,
    whitespace runs collapsed (outside quotes the shell does the same)."""
    commands: list[str] = []
    for block in re.findall(r"^```bash[ \t]*\n(.*?)^```", text, flags=re.S | re.M):
        pending = ""
        for raw in block.splitlines():
            line = strip_comment(raw)
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            command = " ".join((pending + line).split())
            pending = ""
            if command:
                commands.append(command)
        if pending.strip():
            commands.append(" ".join(pending.split()))
    return commands


# --- the fresh clone -----------------------------------------------------------------------------


def _git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _venv() -> Path:
    venv = (REPO / ".venv").resolve()
    return venv if (venv / "pyvenv.cfg").exists() else Path(sys.prefix).resolve()


def _clone_venv(clone: Path) -> None:
    """``<clone>/.venv``: symlinks into the checkout's venv, except site-packages' editable-install
    path file, which points at the clone's ``src``; plus the stamp of ``scripts/setup_env.sh``."""
    real, venv = _venv(), clone / ".venv"
    venv.mkdir()
    for entry in real.iterdir():
        if entry.name in ("lib", "lib64") or entry.name.startswith(".installed-"):
            continue
        (venv / entry.name).symlink_to(entry)
    for site in real.glob("lib/python3*/site-packages"):
        mine = venv / site.relative_to(real)
        mine.mkdir(parents=True)
        for entry in site.iterdir():
            if entry.name.startswith("__editable__") and entry.name.endswith(".pth"):
                (mine / entry.name).write_text(f"{clone / 'src'}\n")
            else:
                (mine / entry.name).symlink_to(entry)
    if (real / "lib64").exists():
        (venv / "lib64").symlink_to("lib")
    stamp = hashlib.sha256(
        (clone / "pyproject.toml").read_bytes() + (clone / "requirements" / "constraints.txt").read_bytes()
    ).hexdigest()[:16]
    (venv / f".installed-{stamp}").touch()


def make_clone(parent: Path) -> Path:
    clone = parent / "ablate"
    _git("clone", "-q", str(REPO), str(clone), cwd=parent)
    for rel in _git("ls-files", "-z", "-com", "--exclude-standard").split("\0"):
        if not rel:
            continue
        src, dst = REPO / rel, clone / rel
        if src.is_file() or src.is_symlink():
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.is_symlink() or dst.exists():
                dst.unlink()
            shutil.copy2(src, dst, follow_symlinks=False)
        elif dst.is_file():
            dst.unlink()  # deleted in the working tree
    (parent / "shared").symlink_to(SHARED.resolve())
    _clone_venv(clone)
    return clone


def user_env(clone: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ABLATE_", "PYTEST_", "WANDB_", "HYDRA_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")
    }
    env.update(
        PATH=f"{clone / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(clone / "src"),
        VIRTUAL_ENV=str(clone / ".venv"),
        WANDB_MODE="offline",
        HF_HUB_OFFLINE="1",
        CI="true",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


@dataclass
class Result:
    command: str
    returncode: int
    output: str

    def tail(self, n: int = 4000) -> str:
        return f"$ {self.command}\n(exit {self.returncode})\n{self.output[-n:]}"


class Session:
    """The clone, and what earlier commands made (their runs, sweeps and outputs)."""

    def __init__(self, clone: Path) -> None:
        self.clone, self.env = clone, user_env(clone)
        self.made: dict[str, Path] = {}
        self.results: dict[str, Result] = {}  # kept for later commands (the composition of those that cannot run)

    def run(self, command: str, expect: int = 0) -> Result:
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=self.clone,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=HANG_TIMEOUT,
        )
        result = Result(command, proc.returncode, proc.stdout)
        assert result.returncode == expect, f"expected exit {expect}:\n{result.tail()}"
        return result

    # where things are
    def dirs(self, pattern: str) -> set[Path]:
        return {p for p in self.clone.glob(pattern) if p.is_dir()}

    def new_dir(self, pattern: str, before: set[Path]) -> Path:
        new = sorted(self.dirs(pattern) - before, key=lambda p: p.stat().st_mtime)
        assert new, f"no new {pattern} directory"
        return new[-1]


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Session:
    if not (SHARED / "data" / "tinyshakespeare" / "input.txt").exists():
        pytest.skip(f"the shared corpora are not at {SHARED / 'data'}")
    s = Session(make_clone(tmp_path_factory.mktemp("acceptance")))
    where = s.run('python -c "import ablate, hydra_plugins.ablate_sweepers as p; print(ablate.__file__, p.__file__)"')
    assert where.output.split() == [
        str(s.clone / "src/ablate/__init__.py"),
        str(s.clone / "src/hydra_plugins/ablate_sweepers/__init__.py"),
    ], where.tail()
    return s


# --- what a run or sweep promises ---------------------------------------------------------------


def status(job: Path) -> dict:
    path = job / "status.json"
    assert path.is_file(), f"{job}: no status.json"
    return json.loads(path.read_text())


def check_run(job: Path, *, wandb: bool = True, best: bool = True) -> dict:
    """A finished single run or job: status completed, metrics.csv, checkpoints, the W&B run."""
    st = status(job)
    assert st["status"] == "completed", f"{job}: {st}"
    assert (job / "csv" / "metrics.csv").is_file(), job
    assert (job / ".hydra" / "config.yaml").is_file(), job
    assert (job / "checkpoints" / "last.ckpt").is_file(), job
    if best:
        assert (job / "checkpoints" / "best.ckpt").is_file(), job
    assert any((job / "wandb").glob("offline-run-*")) == wandb, f"{job}: W&B run expected: {wandb}"
    return st


def sweep_jobs(sweep: Path) -> list[Path]:
    return sorted(p.parent for p in sweep.glob("*/status.json"))


def check_sweep(sweep: Path, n_jobs: int, result: Result) -> list[Path]:
    jobs = sweep_jobs(sweep)
    assert len(jobs) == n_jobs, f"{sweep}: {len(jobs)} jobs, expected {n_jobs}\n{result.tail()}"
    for job in jobs:
        check_run(job)
    return jobs


def smoke(command: str) -> str:
    return f"{command} {SMOKE}"


# --- how each command is checked ----------------------------------------------------------------

Check = Callable[[Session, str], None]


def single_run(**expect) -> Check:
    """A ``train.py`` single run with ``debug=smoke``: a new logs/runs/<timestamp> that completed."""

    def check(s: Session, command: str) -> None:
        before = s.dirs("logs/runs/*")
        result = s.run(smoke(command))
        run = s.new_dir("logs/runs/*", before)
        st = check_run(run, wandb=expect.pop("wandb", True), best=expect.pop("best", True))
        for axis, value in expect.items():
            assert st["axes"][axis] == value, st["axes"]
        assert "run completed" in result.output and str(run) in result.output, result.tail()
        s.made[command] = run

    return check


def reported_sweep(s: Session, result: Result) -> Path:
    """The directory the end-of-sweep report names (``sweep <dir>: <counts>``)."""
    found = re.findall(r"^sweep (\S+): ", result.output, flags=re.M)
    assert found, f"no end-of-sweep report\n{result.tail()}"
    return s.clone / found[-1]


def sweep(
    n_jobs: int, name: str | None = None, prefix: str | None = None, new: bool = True, relabelled: int = 0
) -> Check:
    """A ``train.py -m`` sweep with ``debug=smoke``: every job completed, in logs/multirun/<name> (else
    ``<swept keys>-<hash>``, new unless ``new=False``: the identity of an earlier sweep); ``relabelled``
    finished jobs given the command's new tags instead of being trained again."""

    def check(s: Session, command: str) -> None:
        before = s.dirs("logs/multirun/*")
        result = s.run(smoke(command))
        where = reported_sweep(s, result)
        if name:
            assert where == s.clone / "logs" / "multirun" / name, where
        if prefix:
            assert where.name.startswith(prefix), where
        if new:
            assert where not in before, f"{where} existed before this command\n{result.tail()}"
        check_sweep(where, n_jobs, result)
        assert f"{n_jobs} completed" in result.output or not new, result.tail()
        if relabelled:
            assert f"{relabelled} relabelled" in result.output, result.tail()
            assert result.output.count("nothing was trained") == relabelled, result.tail()
        assert "wandb sync" in result.output, result.tail()  # the upload command of the offline runs
        s.made[command] = where
        s.made["<sweep>"] = where

    return check


def tuned_sweep(name: str, variants: int, seeds: int) -> Check:
    """``tune=lr``: stage 1 (one selection seed per LR), stage 2 (each variant's LR, all seeds)."""

    def check(s: Session, command: str) -> None:
        result = s.run(smoke(command))
        where = s.clone / "logs" / "multirun" / name
        selection = json.loads((where / "lr_tuning.json").read_text())
        assert selection, where
        jobs = sweep_jobs(where)
        verdict_seeds = {
            f"seed={seed}" for seed in selection["seeds"]
        }  # stage 1 runs on other seeds (nested: s + 1000)
        verdict = [j for j in jobs if verdict_seeds & set(status(j).get("overrides") or [])]
        assert len(verdict) == variants * seeds, f"{len(verdict)} stage-2 jobs:\n{result.tail()}"
        for job in jobs:
            check_run(job)
        assert "LR tuning, stage 2" in result.output, result.tail()
        s.made[command] = where

    return check


def analysis(sweep_name: str, *files: str, says: tuple[str, ...] = ()) -> Check:
    """summarize.py / plot.py / compute_multiplier.py, verbatim: exit 0, its files, its table."""

    def check(s: Session, command: str) -> None:
        result = s.run(command)
        where = s.clone / "logs" / "multirun" / sweep_name
        for name in files:
            path = where / name
            assert path.exists() and (path.is_file() or any(path.iterdir())), f"{path} missing\n{result.tail()}"
        for text in says:
            assert text in result.output, f"{text!r} not printed\n{result.tail()}"

    return check


def declared_table(sweep_name: str) -> Check:
    """``summarize.py <sweep> --plan`` after the documented tuning command: it analyses what that
    command declared (issue 43), and prints the table the document shows: its columns (the crossed
    seed/text SE columns need the held-out blocks that the smoke preset's 2 test batches do not
    reach) and its rows."""

    def check(s: Session, command: str) -> None:
        result = s.run(command)
        assert "Declared plan (ledger entry" in result.output, result.tail()
        assert "Every row is exploratory" not in result.output, result.tail()
        shown = "\n".join(document_text(name) for name in DOCUMENTS)
        header = next(line for line in shown.splitlines() if line.startswith("| norm | lr | tuned LR |"))
        # the documented table was recorded under selection=shared (the rate an axis: an lr column);
        # under nested, the default, each variant is one row and its rates are in the tuned LR cell
        printed = next(
            line for line in result.output.splitlines() if line.startswith("| norm |") and "tuned LR" in line
        )
        skip = ("seed SE", "text SE", "lr")
        wanted = [c.strip() for c in header.strip("|").split("|") if c.strip() not in skip]
        assert [c.strip() for c in printed.strip("|").split("|") if c.strip() not in skip] == wanted
        for norm in ("post", "pre", "deepnorm"):
            assert f"| {norm} |" in result.output, result.tail()
        assert (s.clone / "logs" / "multirun" / sweep_name / "summary.md").is_file()

    return check


def verbatim(*says: str, made: str | None = None) -> Check:
    def check(s: Session, command: str) -> None:
        before = s.dirs(f"{made}/*") if made else set()
        result = s.run(command)
        for text in says:
            assert text in result.output, f"{text!r} not printed\n{result.tail()}"
        if made:
            check_run(s.new_dir(f"{made}/*", before), wandb=False, best=False)

    return check


def refused(*says: str) -> Check:
    """A refusal, typed verbatim: exit 2, its message without a traceback, and no run or sweep folder
    left behind (the README: a refusal leaves nothing behind)."""

    def check(s: Session, command: str) -> None:
        pattern = ("logs/runs/*", "logs/debug/runs/*", "logs/multirun/*")
        before = set().union(*(s.dirs(p) for p in pattern))
        result = s.run(command, expect=2)
        for text in says:
            assert text in result.output, f"{text!r} not printed\n{result.tail()}"
        assert "Traceback" not in result.output, result.tail()
        left = set().union(*(s.dirs(p) for p in pattern)) - before
        assert not left, f"the refusal left {sorted(map(str, left))}\n{result.tail()}"

    return check


def check_default_run(s: Session, command: str) -> None:
    """The default experiment through scripts/run.sh (setup_env's stamp is in place: no pip), with the
    smoke preset; the 6-minute run itself is composed and validated by ``composes``."""
    single_run()(s, command)
    s.made["<default run>"] = s.made[command]
    composes()(s, command)


def check_test_script(s: Session, command: str) -> None:
    """Not run (it would run this tier again): the script sets up nothing and collects the tests."""
    result = s.run(f"{command} --collect-only -q tests/test_tiers.py")
    assert "setting up .venv" not in result.output and "tests/test_tiers.py: 4" in result.output, result.tail()


def resume(more_steps: bool) -> Check:
    """``hydra.run.dir=logs/runs/<run> ckpt_path=last``: <run> is the default experiment's run, resumed by
    its directory alone (its own overrides are read in) plus the smoke preset. That run is completed,
    so with the same settings nothing is trained or rewritten (completed is final); with more steps
    allowed it trains on from its last step."""

    def check(s: Session, command: str) -> None:
        run = s.made["<default run>"]
        before = status(run)
        stamp = (run / "status.json").stat().st_mtime_ns
        result = s.run(smoke(with_run(command, run, s)))
        st = check_run(run)
        assert "val/loss" in st["metrics"], f"the resumed run's status.json lost its metrics: {st['metrics']}"
        if more_steps:
            assert st["resumed_from"] == str(run / "checkpoints" / "last.ckpt"), st
            assert st["steps"] > before["steps"], (before["steps"], st)
            assert "run completed" in result.output, result.tail()
        else:
            assert "already completed" in result.output and "nothing was trained or rewritten" in result.output
            assert st == before and (run / "status.json").stat().st_mtime_ns == stamp, (
                "a completed run's record changed"
            )

    return check


def rerun_skips(s: Session, command: str) -> None:
    """The same multirun command again: every finished job is skipped, nothing is retrained."""
    where = s.made[command]
    stamps = {job: (job / "status.json").stat().st_mtime_ns for job in sweep_jobs(where)}
    result = s.run(smoke(command))
    assert result.output.count("skipped:") == len(stamps) == 4, result.tail()
    assert {job: (job / "status.json").stat().st_mtime_ns for job in sweep_jobs(where)} == stamps


def first_or_rerun(s: Session, command: str) -> None:
    if command in s.made:
        rerun_skips(s, command)
    else:
        sweep(4, prefix="norm+pos-")(s, command)


COMPOSE = r"""
import json, sys
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from ablate.config import resolvers
from ablate.run.plan import check_config, training_layout
resolvers.register()
with initialize_config_dir(config_dir=sys.argv[2], version_base="1.3"):
    for index, overrides in enumerate(json.loads(sys.argv[1])):
        jobs = [[]]
        for o in OverridesParser.create().parse_overrides(overrides):  # a sweep: every job of it
            values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
            jobs = [job + [f"{o.get_key_element()}={v}"] for job in jobs for v in values]
        for job in jobs:
            cfg = compose(config_name="train", overrides=job, return_hydra_config=True)
            check_config(cfg)
            print(json.dumps({"command": index, "job": job, "layout": training_layout(cfg),
                              "launcher": cfg.hydra.launcher.get("_target_"), "trainer": cfg.trainer.get("accelerator")}))
"""


def train_overrides(command: str) -> list[str]:
    words = command.split()
    return [w for w in words[words.index("train.py") + 1 :] if not w.startswith("-")]


def composed(s: Session, command: str) -> list[dict]:
    """The jobs of ``command``, composed and validated; all the commands that need it at once, in one
    process (on the first call)."""
    todo = [
        c
        for c in COMMANDS_IN_DOCS
        if c in COMMANDS and "train.py" in c.split() and COMMANDS[c].how.startswith(("compose", "run + compose"))
    ]
    if "composed" not in s.results:
        arg = json.dumps([train_overrides(c) for c in todo])
        s.results["composed"] = s.run(f"python -c {_quote(COMPOSE)} {_quote(arg)} {s.clone / 'conf'}")
    result = s.results["composed"]
    jobs = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    mine = [job for job in jobs if job["command"] == todo.index(command)]
    assert mine, f"{command}: not composed\n{result.tail()}"
    return mine


def composes(launcher: str | None = None, accelerator: str | None = None, world: int | None = None) -> Check:
    """Cannot run here: composed (every job of a sweep) and validated as train.py does before reading data."""

    def check(s: Session, command: str) -> None:
        for job in composed(s, command):
            if launcher:
                assert launcher in job["launcher"], job
            if accelerator:
                assert job["trainer"] == accelerator, job
            if world:
                assert job["layout"][0] == world, job

    return check


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def wandb_workspace(s: Session, command: str) -> None:
    """<sweep>: the sweep the W&B command just before made; offline, the spec is written and the push
    command printed."""
    where = s.made["<sweep>"]
    result = s.run(command.replace("logs/multirun/<sweep>", str(where.relative_to(s.clone))))
    spec = where / "wandb_workspace.json"
    assert spec.is_file() and json.loads(spec.read_text()), result.tail()
    assert "wandb_workspace.py --push" in result.output or "wandb sync" in result.output, result.tail()


def lm_run(s: Session) -> Path:
    """<run>: the newest language-model run of the documented commands (`logger=[wandb,tensorboard]`)."""
    return s.made["python train.py logger=[wandb,tensorboard]"]


def with_run(command: str, run: Path, s: Session, placeholder: str = "<run>") -> str:
    return command.replace(f"logs/runs/{placeholder}", str(run.relative_to(s.clone)))


def eval_lm(s: Session, command: str) -> None:
    """<rope run>: the README's `python train.py pos=rope`; a number per length, 256 past training (issue 35.4)."""
    result = s.run(with_run(command, s.made["python train.py pos=rope"], s, "<rope run>"))
    for length in (128, 256):
        assert f"seq_len={length}: loss = " in result.output, result.tail()


def translation_run(s: Session) -> Path:
    """<translation run>: no documented command trains one; the Multi30k task (docs/results.md:
    `python train.py experiment=multi30k_small`), smoke-sized: a 1+1-layer d=64 model, 1,000 training
    pairs, 20 validation/test pairs (eval.py reads the data config from the checkpoint), no val/bleu."""
    if "<translation run>" not in s.made:
        before = s.dirs("logs/runs/*")
        s.run(
            smoke(
                "python train.py task=translation model.encoder_layers=1 model.decoder_layers=1 model.d_model=64 "
                "model.d_ff=128 data.max_train_pairs=1000 data.max_eval_pairs=20 task.val_bleu_samples=0"
            )
        )
        s.made["<translation run>"] = s.new_dir("logs/runs/*", before)
    return s.made["<translation run>"]


def eval_translation(s: Session, command: str) -> None:
    result = s.run(with_run(command, translation_run(s), s, "<translation run>"))
    assert "BLEU = " in result.output and '"sentences": 20' in result.output, result.tail()


def generate(s: Session, command: str) -> None:
    result = s.run(with_run(command, lm_run(s), s))
    assert "ROMEO:" in result.output, result.tail()


def export_hf(s: Session, command: str) -> None:
    result = s.run(with_run(command, lm_run(s), s))
    out = s.clone / "exports" / "my_model"
    assert (out / "config.json").is_file() and any(out.glob("*.safetensors")), result.tail()
    assert any(out.glob("tokenizer*")), f"no tokenizer in {out}\n{result.tail()}"


def average_checkpoints(s: Session, command: str) -> None:
    """<run>: a run that kept its last checkpoints, as the recipe's next sentence requires
    (callbacks.checkpoint_keep.keep_last_n=5), a step checkpoint every step so that 6 steps leave 5."""
    before = s.dirs("logs/runs/*")
    s.run(
        smoke(
            "python train.py callbacks.checkpoint_keep.keep_last_n=5 callbacks.checkpoint_last.every_n_train_steps=1 "
            "trainer.max_steps=6"
        )
    )
    run = s.new_dir("logs/runs/*", before)
    result = s.run(with_run(command, run, s))
    assert (run / "checkpoints" / "averaged.ckpt").is_file(), result.tail()


def tensorboard_run(s: Session, command: str) -> None:
    single_run()(s, command)
    run = s.made[command]
    assert any(run.rglob("events.out.tfevents.*")), f"no TensorBoard events under {run}"


@dataclass(frozen=True)
class Entry:
    check: Check
    how: str  # "run" (train.py + debug=smoke), "verbatim", or "compose: <why it cannot run here>"
    chain: str = "runs"  # the fresh clone that runs it, with the earlier commands of its chain (CHAINS)


COMMANDS: dict[str, Entry] = {
    # ---- README.md
    # headline
    "bash scripts/run.sh python train.py -m norm=pre,post pos=sinusoidal,learned": Entry(
        sweep(4, prefix="norm+pos-"), "run", chain="sweeps"
    ),
    # quickstart: the smoke run, the default experiment, the tests
    "bash scripts/run.sh python train.py model=tiny trainer.max_steps=200 trainer.val_check_interval=100 logger=csv": Entry(
        single_run(wandb=False, best=False), "run (the preset's 6 s cap may end it before step 100's validation)"
    ),
    "bash scripts/run.sh python train.py": Entry(
        check_default_run, "run + compose: the default experiment takes ~6 min; run with the preset, composed as typed"
    ),
    "bash scripts/test.sh": Entry(
        check_test_script, "compose: it would run this tier again; the script runs and collects the tests"
    ),
    # without a network: a Hub corpus refused within seconds
    "HF_HUB_OFFLINE=1 python train.py data=wikitext2": Entry(
        refused("cannot be loaded: HF_HUB_OFFLINE=1 is set", "Local alternative: put train.txt"),
        "verbatim (a refusal: exit 2)",
    ),
    # one run
    "python train.py pos=rope": Entry(single_run(pos="rope"), "run"),
    "python train.py experiment=nanogpt_shakespeare_char": Entry(single_run(), "run"),
    "python train.py debug=fdr": Entry(verbatim("run completed", made="logs/debug/runs"), "verbatim (a debug preset)"),
    # a sweep and its table
    "python train.py -m norm=pre,post pos=rope,learned seed=1,2,3 data.splits=blocks sweep_name=norm-pos": Entry(
        sweep(12, "norm-pos"), "run", chain="sweeps"
    ),
    "python scripts/summarize.py logs/multirun/norm-pos": Entry(
        analysis("norm-pos", "summary.csv", "summary.md"), "verbatim", chain="sweeps"
    ),
    "python scripts/summarize.py logs/multirun/norm-pos --metric test/loss --baseline norm=pre,pos=learned": Entry(
        analysis("norm-pos", "summary.csv", "summary.md", says=("verdict", "baseline")), "verbatim", chain="sweeps"
    ),
    "python scripts/plot.py logs/multirun/norm-pos": Entry(analysis("norm-pos", "figures"), "verbatim", chain="sweeps"),
    # resume: a run by its folder; a sweep by its command typed again (the second skips every finished job)
    "python train.py hydra.run.dir=logs/runs/<run> ckpt_path=last": Entry(resume(more_steps=False), "run"),
    "python train.py hydra.run.dir=logs/runs/<run> ckpt_path=last trainer.max_steps=3000 "
    "'+resume_allow_changes=[trainer.max_steps]'": Entry(
        resume(more_steps=True), "run (the preset's 6 s cap, not 3,000 steps)"
    ),
    "python train.py -m norm=pre,post pos=rope,learned": Entry(first_or_rerun, "run", chain="sweeps"),
    "python train.py -m norm=pre,post sweep_name=norm-study": Entry(sweep(2, "norm-study"), "run", chain="sweeps"),
    # multi-GPU and SLURM
    "python train.py trainer=gpu model=gpt2_small data.seq_len=1024 data.batch_size=16 model.compile=true": Entry(
        composes(accelerator="gpu"), "compose: needs a GPU"
    ),
    "python train.py trainer=ddp trainer.devices=4": Entry(composes(world=4), "compose: needs 4 GPUs"),
    "python train.py -m hydra/launcher=slurm hydra.launcher.partition=gpu norm=pre,post trainer=ddp trainer.devices=4 "
    "ckpt_path=last": Entry(composes(launcher="SlurmLauncher", world=4), "compose: needs SLURM and GPUs"),
    # when something is refused
    "python train.py norm=prenorm": Entry(
        refused("norm=prenorm is not an option of norm (did you mean norm=pre?)"), "verbatim (a refusal: exit 2)"
    ),
    "python train.py trainer.max_step=10": Entry(
        refused("trainer.max_step is not a key of trainer (did you mean trainer.max_steps?)"),
        "verbatim (a refusal: exit 2)",
    ),
    # ---- docs/recipes.md
    # runs
    "python train.py model.n_layers=2 trainer.max_steps=200 trainer.val_check_interval=100 logger=csv seed=2": Entry(
        single_run(wandb=False, best=False), "run (the preset's 6 s cap ends it before step 100's validation)"
    ),
    # sweeps
    "OMP_NUM_THREADS=1 python train.py -m hydra/launcher=joblib hydra.launcher.n_jobs=2 norm=pre,post seed=1,2": Entry(
        sweep(4, prefix="norm+seed-"), "run", chain="sweeps"
    ),
    # is the difference real? a tuned, multi-seed comparison
    "python train.py experiment=depth_stability_cpu model.n_layers=12 norm=post,pre,deepnorm seed=1,2,3 tune=lr "
    "data.splits=blocks hydra.sweeper.baseline=\"'norm=pre'\" hydra.sweeper.margin=0.02 "
    "hydra.sweeper.margin_basis=\"'1% of the loss: our smallest effect of interest, set before any run'\" "
    "hydra.sweep.dir=logs/multirun/depth12": Entry(tuned_sweep("depth12", variants=3, seeds=3), "run", chain="tuned"),
    "python scripts/summarize.py logs/multirun/depth12 --plan": Entry(
        declared_table("depth12"), "verbatim", chain="tuned"
    ),
    "python scripts/summarize.py logs/multirun/depth12 --metric val/loss --baseline norm=pre --basis flops": Entry(
        analysis("depth12", "summary.csv", says=("baseline",)), "verbatim", chain="tuned"
    ),
    "python train.py experiment=shazeer2020_glu_ladder_cpu tune=lr hydra.sweep.dir=logs/multirun/glu": Entry(
        tuned_sweep("glu", variants=6, seeds=2), "run", chain="tuned"
    ),
    "python scripts/compute_multiplier.py logs/multirun/glu --baseline act=relu": Entry(
        analysis("glu", says=("multiplier",)), "verbatim", chain="tuned"
    ),
    # W&B, TensorBoard, MLflow
    # the joblib sweep above is the same sweep (a launcher and tags are not part of a sweep's identity):
    # in reading order its 4 finished jobs are not trained again but relabelled: their W&B runs get `baseline`
    "python train.py -m norm=pre,post seed=1,2 tags=[baseline]": Entry(
        sweep(4, prefix="norm+seed-", new=False, relabelled=4), "run", chain="sweeps"
    ),
    "python train.py logger=[wandb,tensorboard]": Entry(tensorboard_run, "run"),
    "python scripts/wandb_workspace.py logs/multirun/<sweep>": Entry(wandb_workspace, "verbatim", chain="sweeps"),
    # evaluate, sample, export
    "python eval.py ckpt_path=logs/runs/<rope run>/checkpoints/best.ckpt seq_lens=[128,256]": Entry(
        eval_lm, "verbatim"
    ),
    "python eval.py ckpt_path=logs/runs/<translation run>/checkpoints/best.ckpt beam_size=5": Entry(
        eval_translation, "verbatim", chain="tuned"
    ),
    'python generate.py ckpt_path=logs/runs/<run>/checkpoints/last.ckpt prompt="ROMEO:" max_new_tokens=300': Entry(
        generate, "verbatim"
    ),
    "python scripts/export_hf.py ckpt_path=logs/runs/<run>/checkpoints/last.ckpt out=exports/my_model": Entry(
        export_hf, "verbatim"
    ),
    "python scripts/average_checkpoints.py ckpt_dir=logs/runs/<run>/checkpoints last_n=5 "
    "out=logs/runs/<run>/checkpoints/averaged.ckpt": Entry(average_checkpoints, "verbatim"),
}

COMMAND_DOCUMENT: dict[str, str] = {}  # each documented command -> the first document that has it
for _name in DOCUMENTS:
    for _command in readme_commands(document_text(_name)):
        COMMAND_DOCUMENT.setdefault(_command, _name)
COMMANDS_IN_DOCS = [c for name in DOCUMENTS for c in readme_commands(document_text(name))]

# Each chain is one test file (test_readme_<chain>.py) with its own clone: the sweeps and their tables;
# the tuned comparisons and the translation checkpoint; single runs, resumes and what takes a checkpoint.
CHAINS = ("sweeps", "tuned", "runs")


def chain_commands(chain: str) -> list[str]:
    """The documented commands of ``chain``, in reading order (a repeated command once per occurrence)."""
    return [c for c in COMMANDS_IN_DOCS if c in COMMANDS and COMMANDS[c].chain == chain]


def check_command(session: Session, command: str) -> None:
    COMMANDS[command].check(session, command)
