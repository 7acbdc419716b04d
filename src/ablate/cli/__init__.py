"""Exit codes shared by every entry point: 0 done; 1 a crash (the traceback is printed); 2 a user
error (:class:`ablate.errors.UserError`, a command line Hydra cannot compose: one message, no
traceback); 130 interrupted (Ctrl-C, SIGTERM).

Before Hydra's ``main`` runs, :func:`entry_point` composes the command line itself
(:func:`check_command_line`): a misspelt key, an unknown option or an unparsable override is refused
with ablate's message (exit 2), never Hydra's advice to append the key with ``+``; then the entry
point's own ``check``, still before a run folder exists (no torch here: a refusal costs the
composition only). ``HYDRA_FULL_ERROR=1`` skips the pre-check and shows the traceback.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ablate.config.locations import conf_dir  # the conf/ folder the entry points' @hydra.main read
from ablate.errors import UserError

if TYPE_CHECKING:
    from omegaconf import DictConfig

EXIT_OK, EXIT_CRASHED, EXIT_USER_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130

_started = False
"""Set once a task function (or a sweep) starts: a later exit code 1 is not a composition error."""
_multirun = False  # the command line being checked is a sweep (-m)

F = TypeVar("F", bound=Callable[..., Any])


def mark_started() -> None:
    """The config composed: from here on, Hydra's exit code 1 means a crash, not a bad command line."""
    global _started
    _started = True


def report_user_error(err: BaseException) -> None:
    """Print a user error's message and exit 2 (re-raise it when ``HYDRA_FULL_ERROR`` is set).
    Raised as SystemExit, which Hydra's own error reporting lets through untouched."""
    if os.environ.get("HYDRA_FULL_ERROR"):
        raise err
    print(f"error: {err}\n(HYDRA_FULL_ERROR=1 shows the traceback)", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_USER_ERROR) from None


def task(fn: F) -> F:
    """Decorate a ``@hydra.main`` task function: user errors exit 2 with their message only."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        mark_started()
        from ablate.cli.console import quiet_known_noise  # here, not at import: a refusal stays fast

        quiet_known_noise()  # every entry point's console, not only train.py's (issue 35.9)
        cfg: Any = args[0] if args else None
        if hasattr(cfg, "get"):  # trust_checkpoint=true: this script may load checkpoints that run code
            from ablate.checkpoints import safe_load

            safe_load.trust_checkpoints(bool(cfg.get("trust_checkpoint", False)))
        try:
            return fn(*args, **kwargs)
        except UserError as err:
            report_user_error(err)
        except SystemExit as exit_:
            # the scripts' convention: ``raise SystemExit("message")`` is a refusal the user can fix
            if isinstance(exit_.code, str):
                print(f"error: {exit_.code}", file=sys.stderr, flush=True)
                raise SystemExit(EXIT_USER_ERROR) from None
            raise

    return wrapper  # type: ignore[return-value]


def _job_overrides(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The command lines to compose for a check: a single run's overrides, or each value of each swept
    key once with the first of every other (``a=1,2 b=x,y``: ``a=1 b=x``, ``a=2 b=x``, ``a=1 b=y``);
    sweeps that cannot be enumerated (``interval(...)``) are left to the sweeper."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    if not multirun:
        return [list(overrides)]
    choices: list[list[str]] = []
    for override in parsed:
        if not override.is_sweep_override():
            choices.append([str(override.input_line)])
            continue
        try:
            values = list(override.sweep_string_iterator())
        except Exception:  # interval(), tag(): the sweeper's to check
            continue
        choices.append([f"{override.get_key_element()}={v}" for v in values] or [str(override.input_line)])
    first = [c[0] for c in choices]
    jobs = [first]
    for i, values in enumerate(choices):
        jobs += [[*first[:i], v, *first[i + 1 :]] for v in values[1:]]
    return jobs


def _compose_with_hydra(config_name: str, overrides: list[str]) -> DictConfig:
    """Hydra's compose API on ``conf/``, the ``hydra`` node included."""
    from hydra import compose, initialize_config_dir

    from ablate.config.store import register

    register()  # the architecture groups (the schemas: the search-path plugin imports ablate.run.config)

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3", job_name=config_name):
        return compose(config_name, overrides, return_hydra_config=True)


def _compose(config_name: str, overrides: list[str], runtime: bool = False) -> DictConfig:
    """The config ``@hydra.main`` would give the task; with ``runtime``, Hydra's runtime config is
    set, so that ``${hydra:...}`` interpolations resolve as in a job."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    cfg = _compose_with_hydra(config_name, overrides)
    if runtime:
        HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def _config_sweeps(config_name: str, overrides: list[str]) -> bool:
    """Whether the command line is a sweep without ``-m``: a preset that sets ``hydra.mode: MULTIRUN``
    (``tune=lr``, ``hparams_search=...``), read from the config composed without the swept values."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    parsed = OverridesParser.create().parse_overrides(overrides)
    fixed = [str(o.input_line) for o in parsed if not o.is_sweep_override()]
    if len(fixed) == len(parsed):
        return False  # nothing to sweep over on the command line: one job to check either way
    return bool(_compose_with_hydra(config_name, fixed).hydra.get("mode") == RunMode.MULTIRUN)


def check_command_line(
    config_name: str, argv: list[str], check: Callable[[DictConfig, list[str]], None] | None = None
) -> None:
    """Compose ``argv`` as Hydra would and refuse it (exit 2) when it does not compose or ``check(cfg,
    overrides)`` raises a :class:`UserError`; ``--help``, ``--cfg``, ``--info`` & co. are left to Hydra."""
    from hydra.errors import HydraException
    from omegaconf.errors import MissingMandatoryValue

    from ablate.cli.unknown_key import composition_error_message
    from ablate.compat import hydra_args_parser

    try:
        args = hydra_args_parser().parse_args(argv)
    except SystemExit:  # argparse's own error: Hydra prints it
        return
    hydra_itself = ("help", "hydra_help", "cfg", "info", "shell_completion", "config_path", "config_name", "config_dir")
    if any(getattr(args, name) for name in (*hydra_itself, "experimental_rerun")):
        return
    global _multirun
    try:
        _multirun = bool(args.multirun) or _config_sweeps(config_name, list(args.overrides))
        jobs = _job_overrides(list(args.overrides), _multirun)
        cfg = _compose(config_name, jobs[0], runtime=True)
        if check is not None:  # first: a script's own check names its missing argument with an example
            try:
                check(cfg, jobs[0])
            except MissingMandatoryValue:  # a value the check reads is unset: named just below
                pass
        check_no_missing_value(cfg)
        for job in jobs[1:]:
            check_no_missing_value(_compose(config_name, job))
    except HydraException as err:
        print(f"error: {composition_error_message(err, conf_dir())}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_USER_ERROR) from None
    except UserError as err:
        report_user_error(err)
    except Exception:  # not the user's error: the job's own checks meet it again and report it
        pass
    finally:
        from hydra.core.hydra_config import HydraConfig

        HydraConfig.instance().cfg = None  # @hydra.main sets its own


def check_no_missing_value(cfg: DictConfig) -> None:
    """Refuse a config with a mandatory value unset (``???``), naming the key and the option that needs it."""
    from omegaconf import OmegaConf

    missing = sorted(str(key) for key in OmegaConf.missing_keys(cfg) if not str(key).startswith("hydra."))
    if not missing:
        return
    from hydra.core.hydra_config import HydraConfig

    # set for the first job composed (``runtime``); the options each group chose
    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}

    def needed_by(key: str) -> str:
        group = key.split(".")[0]
        return f" ({group}={choices[group]} needs it)" if choices.get(group) else ""

    raise UserError(
        "no value given for "
        + ", ".join(f"{key}{needed_by(key)}" for key in missing)
        + ": set it on the command line, e.g. "
        + " ".join(f"{key}=..." for key in missing)
    )


def run_dir() -> str | None:
    """While a command line is checked: the folder of its single run (``hydra.run.dir``), or None for a sweep."""
    from hydra.core.hydra_config import HydraConfig

    if _multirun or not HydraConfig.initialized():
        return None
    return str(HydraConfig.get().run.dir)


def entry_point(
    main: Callable[[], Any],
    config_name: str | None = None,
    check: Callable[[DictConfig, list[str]], None] | None = None,
) -> None:
    """Call a ``@hydra.main`` function with the documented exit codes; with ``config_name`` (its
    ``@hydra.main`` config), check the command line first (:func:`check_command_line`)."""
    if config_name is not None and not os.environ.get("HYDRA_FULL_ERROR"):
        check_command_line(config_name, sys.argv[1:], check)
    try:
        main()
    except SystemExit as exit_:
        if exit_.code == EXIT_CRASHED and not _started:  # Hydra reported a composition error
            from ablate.cli.unknown_key import unknown_key_hint

            hint = unknown_key_hint(exit_.__context__)  # Hydra's message names the key, not what would work
            if hint:
                print(hint, file=sys.stderr, flush=True)
            raise SystemExit(EXIT_USER_ERROR) from None
        raise
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
