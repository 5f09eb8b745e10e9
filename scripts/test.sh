#!/usr/bin/env bash
# Set up .venv if needed, then run every check: ruff (lint and format), the import contracts, mypy,
# the QML type description's freshness and qmllint, and the whole pytest suite
# (GUI tests run offscreen; no display needed).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
echo "== ruff" >&2
ruff check lucky_monitor tests benchmarks scripts
ruff format --check lucky_monitor tests benchmarks scripts
echo "== import contracts" >&2
lint-imports
echo "== mypy" >&2
mypy
echo "== QML types and qmllint" >&2
python scripts/gen_qmltypes.py --check
python scripts/qmllint.py
echo "== pytest" >&2
exec python -m pytest "$@"
