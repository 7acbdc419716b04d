#!/usr/bin/env bash
# Create .venv and install the pinned dependencies; a no-op when they are already installed.
# torch first and pinned (2.13.0: the CPU wheel here), then everything else through the
# constraints file, so a fresh machine resolves exactly the versions CI tested.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
stamp_src="$(cat pyproject.toml requirements/constraints.txt | sha256sum | cut -c1-16)"
stamp=".venv/.installed-$stamp_src"
if [ -f "$stamp" ]; then exit 0; fi
echo "setting up .venv (first run only)..." >&2
[ -x .venv/bin/python ] || "$python" -m venv .venv
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
# --no-compile: Python compiles a module's bytecode on its first import instead, for only the modules
# that are imported (a fraction of torch, transformers, scipy...): the set-up takes half the time
.venv/bin/python -m pip install -q --no-compile "torch==2.13.0"
.venv/bin/python -m pip install -q --no-compile -c requirements/constraints.txt -e ".[test]"
rm -f .venv/.installed-*
touch "$stamp"
