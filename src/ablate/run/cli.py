"""Exit codes shared by every entry point (train.py, eval.py, generate.py, translate.py, scripts/):

====  ===========================================================================================
0     done
1     a crash (a bug, or a failure we did not foresee): the traceback is printed
2     a user error (:class:`ablate.errors.UserError`: bad option or key, missing or bad data, bad
      checkpoint, a command-line Hydra cannot compose): one message, no traceback
130   interrupted (Ctrl-C, SIGTERM)
====  ===========================================================================================

Hydra prints its own composition errors (an unknown option such as ``pos=bogus``, a bad override)
and exits with 1; :func:`entry_point` turns that into 2 when it happened before the task function
(or a sweep) started. ``HYDRA_FULL_ERROR=1`` shows the traceback of a user error.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from ablate.errors import UserError
from ablate.run import safe_load

EXIT_OK, EXIT_CRASHED, EXIT_USER_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130

_started = False
"""Set once a task function (or a sweep) starts: a later exit code 1 is not a composition error."""

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
        from ablate.run.console import quiet_known_noise  # here, not at import: a refusal stays fast

        quiet_known_noise()  # every entry point's console, not only train.py's (issue 35.9)
        cfg: Any = args[0] if args else None
        if hasattr(cfg, "get"):  # trust_checkpoint=true: this script may load checkpoints that run code
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


def entry_point(main: Callable[[], Any]) -> None:
    """Call a ``@hydra.main`` function with the documented exit codes."""
    try:
        main()
    except SystemExit as exit_:
        if exit_.code == EXIT_CRASHED and not _started:  # Hydra reported a composition error
            from ablate.config.unknown_key import unknown_key_hint

            hint = unknown_key_hint(exit_.__context__)  # Hydra's message names the key, not what would work
            if hint:
                print(hint, file=sys.stderr, flush=True)
            raise SystemExit(EXIT_USER_ERROR) from None
        raise
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
