# Sourced by scripts/demo.sh and scripts/test.sh: make .venv (Python >= 3.11)
# and install lucky-monitor with its test extras into it, once per change of
# pyproject.toml.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${LUCKY_VENV:-$ROOT/.venv}"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      PY="$cand"; break
    fi
  done
fi
[ -n "$PY" ] || { echo "lucky-monitor needs Python >= 3.11 on PATH" >&2; exit 2; }
if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV with $PY" >&2
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.lucky-monitor-installed"
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
  echo "== installing lucky-monitor and its test tools into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]"
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
