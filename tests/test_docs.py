"""The documents a user reads: the README's axis table against the table of axes, its length and line widths,
no history in it, and every relative link of the README and docs/ pointing at a file and heading
that exist. (The documents' commands are the acceptance tier's: tests/helpers/readme_suite.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ablate.nn.axes import AXES

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SOURCES = [README, *sorted((REPO / "docs").glob("*.md"))]
MAX_LINE = 200  # characters: a README line a reader can see whole
MAX_README_LINES = 230  # "at most about 200 lines" (issue 42.8), with room for a few small edits
MAX_ANALYSIS_LINES = 500  # issue 51: the reference; the simulations live in benchmarks/verdicts/README.md

FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*?\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", flags=re.M)


def prose(text: str) -> str:
    """``text`` without its fenced code blocks."""
    return FENCE.sub("", text)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, code ticks dropped, every character that is not a
    letter, digit, ``_``, ``-`` or space dropped, spaces made hyphens."""
    text = heading.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(prose(path.read_text())):
        base = anchor(heading)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def axis_rows(readme: str) -> dict[str, str]:
    """The README's axis table (the one headed ``| axis |``): its first cell (`` `pos` ``,
    `` `norm.layer` ``) -> the whole row."""
    lines = readme.splitlines()
    start = next((n for n, line in enumerate(lines) if line.startswith("| axis |")), len(lines))
    rows = {}
    for line in lines[start + 2 :]:
        match = re.match(r"^\| `([\w.]+)` \|", line)
        if not match:
            break
        rows[match.group(1)] = line
    return rows


def test_the_anchor_rule():
    assert anchor("W&B, TensorBoard, MLflow") == "wb-tensorboard-mlflow"
    assert anchor("Is the difference real? A tuned, multi-seed comparison") == (
        "is-the-difference-real-a-tuned-multi-seed-comparison"
    )
    assert anchor("plot.py: learning-rate curves, log axes, heat maps and `--x`") == (
        "plotpy-learning-rate-curves-log-axes-heat-maps-and---x"
    )


def test_the_readme_axis_table_names_only_what_the_table_of_axes_has():
    """The README's rows are the table's (``AXES``): each row's axis, the options it cites and the
    module of its code are the axis' own, so no row names an option or an axis that is gone. A new
    option (or axis) needs no README edit: `python train.py --help` lists every option from the table;
    a row cites the papers of those the README discusses."""
    by_label = {axis.label: axis for axis in AXES}
    rows = axis_rows(README.read_text())
    assert rows, "README.md has no axis table"
    for label, row in rows.items():
        assert label in by_label, f"README.md's axis table has a row for `{label}`, no axis of AXES"
        axis = by_label[label]
        _, options, code = (cell.strip() for cell in row.strip("|").split("|"))
        named = re.findall(r"`(\w+)`", options)  # `rope`; not a key (`pos.base`) nor a pair (`init=deepnet`)
        unknown = sorted(set(named) - set(axis.options()))
        assert not unknown, f"README.md's `{label}` row names {unknown}, not options of {axis.key}"
        assert axis.default in named, f"README.md's `{label}` row omits the default `{axis.default}`"
        assert code == f"`nn/{axis.module}.py`", f"README.md's `{label}` row: {code}"


def test_the_readme_is_short_and_its_lines_fit():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: move details to docs/"
    long = [(n, len(line)) for n, line in enumerate(lines, 1) if len(line) > MAX_LINE]
    assert not long, f"README.md lines over {MAX_LINE} characters (line, length): {long}"


def test_the_readme_tells_no_history():
    """What the tool does now, not what it once did wrong: history lives in git and the issues."""
    history = re.compile(r"\b(?:it printed|used to|it was|before this|issue \d+|since then)\b", flags=re.I)
    found = [line for line in prose(README.read_text()).splitlines() if history.search(line)]
    assert not found, found


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(source: Path):
    broken = []
    for target in LINK.findall(prose(source.read_text())):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, fragment = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target}: no heading #{fragment} in {file.relative_to(REPO)}")
    assert not broken, f"{source.relative_to(REPO)}: {broken}"


def test_the_first_code_block_runs_as_typed_in_a_fresh_clone():
    """A new user types the README's first command before reading the set-up below it: plain
    ``python train.py`` there failed with "No module named 'hydra'" (issue 52 item 8)."""
    first = FENCE.search(README.read_text())
    assert first is not None
    commands = [line.split("#", 1)[0].strip() for line in first.group(0).splitlines()[1:-1]]
    assert all(c.startswith("bash scripts/run.sh ") for c in commands if "python" in c.split()), commands


def test_the_job_folder_the_readme_names_is_the_one_a_sweep_makes():
    """The README's example folder of ``-m norm=pre,post pos=rope,learned seed=1,2,3``, against the
    naming code (the axes in AXES order: ``pos`` before ``norm``; the README had them the other way)."""
    from ablate.sweepers.job_dirs import SweepCommand, short_name

    found = re.search(r"named by what varies[^(]*\(`([^`]+)`\)", README.read_text())
    assert found, "the README names a job folder"
    typed = ("norm=pre,post", "pos=rope,learned", "seed=1,2,3")
    command = SweepCommand(typed, frozenset({"norm", "pos", "seed"}), frozenset())
    excluded = frozenset({"paths.log_dir", "logger", "sweep_name", "tags"})
    assert found.group(1) == short_name(["norm=pre", "pos=rope", "seed=1"], command, excluded)


def test_the_analysis_reference_stays_short():
    """docs/analysis.md is what a reader of a verdict table needs (1,150 lines when it also held the
    simulations of the verdicts and the sequential design, issue 51); the lab's numbers live beside
    the code that makes them (benchmarks/verdicts/README.md), LR tuning and cost in docs of their own."""
    lines = len((REPO / "docs" / "analysis.md").read_text().splitlines())
    assert lines <= MAX_ANALYSIS_LINES, f"docs/analysis.md has {lines} lines (at most {MAX_ANALYSIS_LINES})"
