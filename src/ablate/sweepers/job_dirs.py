"""Where a sweep's jobs live, and which sweeps may share a directory. A job's directory is named by
its overrides minus the command's constants (the seed always stays), in characters Hydra's override
grammar leaves alone; a directory an earlier version named is found by its recorded overrides and
kept. Commands sharing a sweep directory are kept apart: a job directory holding *another* job gets
the full name, and a command whose swept keys (the seed aside) neither contain nor are contained in
an earlier one's is another study, refused before any job starts. Every command is recorded in
``<sweep dir>/sweep.json``; the name reaches each job as ``hydra.sweep.subdir``, so any launcher
puts it there."""

from __future__ import annotations

import fcntl
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf

from ablate import cli
from ablate.compat import sweeper_params_overrides
from ablate.config.dotted import override_key
from ablate.config.resolvers import RUN_CONTROL_KEYS, job_name, legacy_job_dirname
from ablate.errors import ConfigError
from ablate.tracking.naming import is_swept
from ablate.writes import inside, write_text_atomically

SWEEP_RECORD = "sweep.json"
Signature = tuple[int, int, int] | None  # a file's (inode, size, mtime in ns); None: no such file
# this process's sweep: every job directory it launched, in order, with its status.json and
# metrics.csv as they were before the job ran, so that the sweep's table tells what it did to each
LAUNCHED: dict[Path, tuple[Signature, Signature]] = {}


def signature(path: Path) -> Signature:
    """A file's (inode, size, mtime in ns): a rewrite changes it."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def job_signature(job_dir: Path) -> tuple[Signature, Signature]:
    """The job's record (``status.json``) and metrics (``csv/metrics.csv``), as they are now."""
    return signature(job_dir / "status.json"), signature(job_dir / "csv" / "metrics.csv")


ALWAYS_NAMED = frozenset({"seed"})  # in every job's name, constant or not
REPLICATES = frozenset({"seed"})  # more seeds are more of the same study, not another axis


@dataclass(frozen=True)
class SweepCommand:
    """A command launching into a sweep directory: its overrides as typed, swept keys and constants."""

    overrides: tuple[str, ...]
    swept: frozenset[str]
    constants: frozenset[str]

    @classmethod
    def from_config(cls, config: DictConfig, sweeper: Any | None = None) -> SweepCommand:
        typed = [str(o) for o in OmegaConf.to_container(config.hydra.overrides.task, resolve=False) or []]
        excluded = excluded_keys(config)
        params = sweeper_params_overrides(sweeper) if getattr(sweeper, "params", None) else []
        swept: set[str] = set()
        constants: set[str] = set()
        try:
            parsed = OverridesParser.create().parse_overrides([*params, *typed])
        except HydraException:  # Hydra composed it, so this does not happen; name nothing constant
            return cls(tuple(typed), frozenset(override_key(o) for o in typed), frozenset())
        by_key = {o.key_or_group: o for o in parsed}  # the command line wins over params, as in Hydra
        for key, override in by_key.items():
            if key in excluded:
                continue
            if is_swept(override):
                swept.add(key)
            elif override.input_line in typed:  # as the basic sweeper writes it into each job's overrides
                constants.add(_as_job_override(override).lstrip("+"))
        return cls(tuple(typed), frozenset(swept), frozenset(constants))

    def to_json(self) -> dict[str, Any]:
        return {
            "overrides": list(self.overrides),
            "swept": sorted(self.swept),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }


def _as_job_override(override: Any) -> str:
    try:
        return f"{override.get_key_element()}={override.get_value_element_as_str()}"
    except HydraException:  # a deletion (~key) and the like: as typed
        return str(override.input_line)


def excluded_keys(config: DictConfig) -> frozenset[str]:
    """Keys never in a job's name nor in a sweep's identity: run control."""
    keys = OmegaConf.select(config, "hydra.job.config.override_dirname.exclude_keys", default=None) or []
    return frozenset(str(k) for k in keys) | frozenset(RUN_CONTROL_KEYS)


def full_name(job_overrides: Iterable[str], excluded: frozenset[str]) -> str:
    """Every override of the job (run control left out)."""
    return job_name(o for o in job_overrides if override_key(o) not in excluded)


def short_name(job_overrides: Iterable[str], command: SweepCommand, excluded: frozenset[str]) -> str:
    """The job's overrides without the command's constants (the seed kept)."""
    return job_name(_varying(job_overrides, command, excluded))


def _varying(job_overrides: Iterable[str], command: SweepCommand, excluded: frozenset[str]) -> list[str]:
    return [
        o
        for o in job_overrides
        if override_key(o) not in excluded
        and (o.lstrip("+") not in command.constants or override_key(o) in ALWAYS_NAMED)
    ]


def legacy_names(job_overrides: Sequence[str], command: SweepCommand, excluded: frozenset[str]) -> list[str]:
    """The names an earlier version gave the job's directory, kept so such a sweep resumes where it is."""
    every = [o for o in job_overrides if override_key(o) not in excluded]
    varying = _varying(job_overrides, command, excluded)
    return [legacy_job_dirname(",".join(sorted(o))) for o in (varying, every)]


def _identity(overrides: Iterable[str], excluded: frozenset[str]) -> frozenset[str]:
    return frozenset(o.lstrip("+") for o in overrides if override_key(o) not in excluded)


def recorded_overrides(job_dir: Path) -> list[str] | None:
    """The overrides of the job a directory holds (its ``status.json``, else Hydra's saved ones), or None."""
    status = job_dir / "status.json"
    try:
        if status.is_file():
            return [str(o) for o in json.loads(status.read_text(encoding="utf-8")).get("overrides") or []]
        saved = job_dir / ".hydra" / "overrides.yaml"
        if saved.is_file():
            return [str(o) for o in yaml.safe_load(saved.read_text(encoding="utf-8")) or []]
    except (OSError, ValueError, yaml.YAMLError, AttributeError):
        return None
    return None


def job_directory(
    sweep_dir: Path, job_overrides: Sequence[str], command: SweepCommand, excluded: frozenset[str]
) -> str:
    """The name of the job's directory under ``sweep_dir`` (see the module docstring)."""
    identity = _identity(job_overrides, excluded)
    full = full_name(job_overrides, excluded)
    short = short_name(job_overrides, command, excluded)
    for earlier in [*legacy_names(job_overrides, command, excluded), *([full] if full != short else [])]:
        if (sweep_dir / earlier).is_dir():
            held = recorded_overrides(sweep_dir / earlier)
            if held is not None and _identity(held, excluded) == identity:
                return earlier  # named before: resume or skip it where it is
    held = recorded_overrides(sweep_dir / short) if (sweep_dir / short).is_dir() else None
    if held is not None and _identity(held, excluded) != identity:
        return full  # another command's job holds the short name
    return short


def told_apart(names: Sequence[str], identities: Sequence[frozenset[str]]) -> list[str]:
    """``names``, each shared by jobs of different overrides suffixed with a hash of the job's overrides."""
    holders: dict[str, set[frozenset[str]]] = {}
    for name, identity in zip(names, identities):
        holders.setdefault(name, set()).add(identity)
    return [
        name
        if len(holders[name]) == 1
        else f"{name}-{hashlib.sha1(chr(10).join(sorted(identity)).encode()).hexdigest()[:8]}"
        for name, identity in zip(names, identities)
    ]


def quote(value: str) -> str:
    """A value for Hydra's override grammar: single-quoted, backslash and quote escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _earlier_commands(sweep_dir: Path) -> list[dict[str, Any]]:
    """The commands ``sweep.json`` records; anything else would let another sweep's axes in unchecked: refused."""
    path = inside(sweep_dir / SWEEP_RECORD, sweep_dir)
    if not path.exists():
        return []
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} is damaged ({err}); move it away to start the sweep directory afresh") from None
    commands = record.get("commands") if isinstance(record, dict) else None
    if not isinstance(commands, list) or not commands or not all(_is_command(c) for c in commands):
        raise ConfigError(
            f"{path} is not a list of the commands that ran in {sweep_dir} (it holds {json.dumps(record)[:120]}), so "
            "this command cannot be checked against them: move it away only if the folder holds no other sweep"
        )
    return commands


def _is_command(record: Any) -> bool:
    """A command as :meth:`SweepCommand.to_json` writes it: its overrides and swept keys, lists of strings."""
    return isinstance(record, dict) and all(
        isinstance(record.get(key), list) and all(isinstance(v, str) for v in record[key])
        for key in ("overrides", "swept")
    )


def check_compatible(sweep_dir: Path, command: SweepCommand) -> None:
    """Refuse a command whose swept keys neither contain nor are contained in an earlier command's."""
    axes = command.swept - REPLICATES
    for record in _earlier_commands(sweep_dir):
        swept = frozenset(record.get("swept") or []) - REPLICATES
        if not (swept <= axes or axes <= swept):
            raise ConfigError(
                f"{sweep_dir} holds another sweep (over {', '.join(sorted(swept)) or 'nothing'}: "
                f"{' '.join(record.get('overrides') or [])}); this command sweeps "
                f"{', '.join(sorted(axes)) or 'nothing'}, and its jobs would mix with that one's. "
                "Give it its own sweep_name (or hydra.sweep.dir)."
            )


def record_command(sweep_dir: Path, command: SweepCommand) -> None:
    """Add the command to ``sweep.json`` (checked again under a lock: two commands may start at once)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(inside(sweep_dir / ".sweep.lock", sweep_dir), "a+") as lock:  # nothing written through a link out
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        check_compatible(sweep_dir, command)
        earlier = _earlier_commands(sweep_dir)
        if not any(list(r.get("overrides") or []) == list(command.overrides) for r in earlier):
            record = {"commands": [*earlier, command.to_json()]}
            write_text_atomically(sweep_dir / SWEEP_RECORD, json.dumps(record, indent=2))


class NamedJobs(Launcher):
    """Wraps the sweep's launcher: records the command, gives every job its directory (``hydra.sweep.subdir``)."""

    def __init__(self, launcher: Launcher, config: DictConfig, sweeper: Any | None = None) -> None:
        self.launcher = launcher
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.command = SweepCommand.from_config(config, sweeper)
        self.excluded = excluded_keys(config)
        self._recorded = False

    def setup(self, **kwargs: Any) -> None:
        self.launcher.setup(**kwargs)

    def check(self) -> None:
        """:func:`check_compatible`, before anything is written to the sweep directory."""
        try:
            check_compatible(self.sweep_dir, self.command)
        except ConfigError as err:  # printed, exit 2 (ablate.cli): no job has started
            cli.report_user_error(err)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        if not self._recorded:  # the jobs were checked: from here on the sweep runs
            try:
                record_command(self.sweep_dir, self.command)
            except ConfigError as err:
                cli.report_user_error(err)
            self._recorded = True
        names = [job_directory(self.sweep_dir, o, self.command, self.excluded) for o in job_overrides]
        names = told_apart(names, [_identity(o, self.excluded) for o in job_overrides])
        for name in names:
            LAUNCHED.setdefault(self.sweep_dir / name, job_signature(self.sweep_dir / name))
        named = [[*o, f"hydra.sweep.subdir={quote(name)}"] for o, name in zip(job_overrides, names)]
        return self.launcher.launch(named, initial_job_idx)
