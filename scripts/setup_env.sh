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
# Bytecode for every installed module, compiled on every core after pip (pip compiles on one core:
# half of the set-up's time). Leaving it to Python's first import is no good where
# PYTHONDONTWRITEBYTECODE is set (as in CI): every process would then compile torch and Lightning
# again, and start about 3x slower (measured: 38-46 s instead of 14-17 s for `import lightning`).
# A few files are not Python 3.11 (torch's py312 test helpers) and fail to compile, as under pip.
.venv/bin/python -m pip install -q --no-compile "torch==2.13.0"
.venv/bin/python -m pip install -q --no-compile -c requirements/constraints.txt -e ".[test]"
site_packages="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
.venv/bin/python -m compileall -qq -j 0 "$site_packages" || true
rm -f .venv/.installed-*
touch "$stamp"
