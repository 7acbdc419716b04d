"""The one base class of errors that are the user's to fix (a bad option, missing data, a bad
checkpoint): their message names the problem and the fix, so every entry point prints it without a
traceback and exits with code 2 (:mod:`ablate.cli`). Anything else is a crash (exit 1, traceback)."""

from __future__ import annotations


class UserError(Exception):
    """An error whose message tells the user what to change; never a bug of ours."""


class ConfigError(UserError, ValueError):
    """An invalid configuration; the message says what to change."""
