"""The acceptance tier's table against the documents (readme_suite.py: DOCUMENTS, the README, then
docs/recipes.md): every command of their bash blocks is checked by one chain, and the table names no
command the documents no longer have. The commands themselves run in test_readme_<chain>.py."""

from __future__ import annotations

import pytest

from helpers.readme_suite import CHAINS, COMMAND_DOCUMENT, COMMANDS, COMMANDS_IN_DOCS, DOCUMENTS, readme_commands

pytestmark = pytest.mark.acceptance


def test_the_parser():
    text = (
        "```bash\npython a.py x=1 \\\n    y='#2'   # note\n# only a comment\n\npython b.py  # c\n```\n"
        "```python\nnot_bash()\n```\n```bash\nOMP=1 python c.py '+k=[a,b]' \\\n  z=3\n```\n"
    )
    assert readme_commands(text) == ["python a.py x=1 y='#2'", "python b.py", "OMP=1 python c.py '+k=[a,b]' z=3"]


def test_every_documented_command_is_checked():
    missing = [f"{COMMAND_DOCUMENT[c]}: {c}" for c in COMMANDS_IN_DOCS if c not in COMMANDS]
    assert not missing, (
        f"the documents have commands the acceptance tier does not cover: {missing}. Add each to COMMANDS in "
        "tests/helpers/readme_suite.py (run it, or compose it with the reason it cannot run here)."
    )


def test_every_table_entry_is_a_documented_command():
    stale = [c for c in COMMANDS if c not in COMMANDS_IN_DOCS]
    assert not stale, f"tests/helpers/readme_suite.py lists commands that no document {DOCUMENTS} has: {stale}"


def test_the_documents_are_read_in_order_and_linked_from_the_readme():
    """The README first; every further document exists, has bash blocks, and the README links it."""
    from helpers.readme_suite import REPO

    assert DOCUMENTS[0] == "README.md"
    readme = (REPO / "README.md").read_text()
    for name in DOCUMENTS[1:]:
        assert readme_commands((REPO / name).read_text()), f"{name} has no bash block: drop it from DOCUMENTS"
        assert f"]({name}" in readme, f"README.md does not link {name}"


def test_every_entry_names_a_chain_with_a_test_file():
    from pathlib import Path

    here = Path(__file__).parent
    assert {e.chain for e in COMMANDS.values()} == set(CHAINS)
    assert all((here / f"test_readme_{chain}.py").is_file() for chain in CHAINS)
