"""The command line of a resume: ``python train.py hydra.run.dir=<run dir> ckpt_path=last`` continues
that run as it was trained, so the run's own overrides (``<run dir>/.hydra/overrides.yaml``, written
when it started) are read in before Hydra composes the config. What is typed beside them wins for its
key and must agree with the run, or be named in ``resume_allow_changes``; a typed deletion comes
after the stored overrides, so ``~callbacks.x`` removes a stored ``+callbacks.x...``
(:func:`ablate.config.identity.check_same_run` compares the two after composition).

Light on purpose (no torch, no Hydra runtime): it runs on ``sys.argv`` before anything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

# not the run's settings: where and how this command runs, and what it allows
RUN_CONTROL = ("ckpt_path", "overwrite", "resume_allow_changes", "hydra.")
MULTIRUN_FLAGS = ("-m", "--multirun")


def override_key(override: str) -> str:
    """``+a.b=1`` -> ``a.b``; ``~a`` -> ``a``."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def resumed_run_dir(overrides: Sequence[str]) -> Path | None:
    """The directory a single-run command line resumes (``hydra.run.dir=<dir>`` with
    ``ckpt_path=last``), or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:  # the command-line check names what does not parse
        return None
    values = {o.key_or_group: o.value() for o in parsed if not o.is_delete()}
    run_dir = values.get("hydra.run.dir")
    if values.get("ckpt_path") != "last" or not isinstance(run_dir, str) or "${" in run_dir:
        return None
    return Path(run_dir)


def stored_overrides(run_dir: Path) -> list[str] | None:
    """The overrides the run in ``run_dir`` was started with (None: no readable record of them)."""
    try:
        stored = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return [str(o) for o in stored] if isinstance(stored, list) else None


def with_stored_overrides(argv: Sequence[str]) -> list[str]:
    """``argv`` (``sys.argv[1:]``) with the resumed run's overrides before the typed ones: those whose
    key is not typed, run control aside. Anything else (a sweep, a new run, a run without a record of
    its overrides) is returned as it is."""
    argv = list(argv)
    if any(a in MULTIRUN_FLAGS for a in argv):
        return argv
    typed = [a for a in argv if not a.startswith("-")]
    run_dir = resumed_run_dir(typed)
    stored = stored_overrides(run_dir) if run_dir is not None else None
    if not stored:
        return argv
    keys = {override_key(o) for o in typed}
    added = [o for o in stored if override_key(o) not in keys and not override_key(o).startswith(RUN_CONTROL)]
    if not added:
        return argv
    print(f"resuming {run_dir} with its own overrides: {' '.join(added)}", flush=True)
    first = next(i for i, a in enumerate(argv) if not a.startswith("-"))
    return [*argv[:first], *added, *argv[first:]]
