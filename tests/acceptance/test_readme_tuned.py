"""The README's commands of the "tuned" chain, verbatim in their own fresh clone: the tuned multi-seed comparisons and their verdicts; evaluating a translation checkpoint."""

from __future__ import annotations

import pytest

from helpers.readme_suite import Session, chain_commands, check_command, session

pytestmark = pytest.mark.acceptance

__all__ = ["session"]  # the fixture: one clone for this file's commands


@pytest.mark.parametrize("command", chain_commands("tuned"), ids=lambda c: c[:80])
def test_readme_command(session: Session, command: str):
    check_command(session, command)
