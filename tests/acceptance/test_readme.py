"""The acceptance tier's table against the README (readme_suite.py): every command of the README's
bash blocks is checked by one chain, and the table names no command the README no longer has. The
commands themselves run in test_readme_<chain>.py."""

from __future__ import annotations

import pytest

from helpers.readme_suite import CHAINS, COMMANDS, COMMANDS_IN_README, readme_commands

pytestmark = pytest.mark.acceptance


def test_the_parser():
    text = (
        "```bash\npython a.py x=1 \\\n    y='#2'   # note\n# only a comment\n\npython b.py  # c\n```\n"
        "```python\nnot_bash()\n```\n```bash\nOMP=1 python c.py '+k=[a,b]' \\\n  z=3\n```\n"
    )
    assert readme_commands(text) == ["python a.py x=1 y='#2'", "python b.py", "OMP=1 python c.py '+k=[a,b]' z=3"]


def test_every_readme_command_is_checked():
    missing = [c for c in COMMANDS_IN_README if c not in COMMANDS]
    assert not missing, (
        f"README.md has commands the acceptance tier does not cover: {missing}. Add each to COMMANDS in "
        "tests/helpers/readme_suite.py (run it, or compose it with the reason it cannot run here)."
    )


def test_every_table_entry_is_a_readme_command():
    stale = [c for c in COMMANDS if c not in COMMANDS_IN_README]
    assert not stale, f"tests/helpers/readme_suite.py lists commands the README no longer has: {stale}"


def test_every_entry_names_a_chain_with_a_test_file():
    from pathlib import Path

    here = Path(__file__).parent
    assert {e.chain for e in COMMANDS.values()} == set(CHAINS)
    assert all((here / f"test_readme_{chain}.py").is_file() for chain in CHAINS)
