#!/usr/bin/env python3
"""Lint every QML file of the project with ``pyside6-qmllint``; fail on any warning.

Usage::

    python scripts/qmllint.py              # lint qml/**/*.qml
    python scripts/qmllint.py FILE.qml...  # lint these files only

qmllint runs with the QML import root ``qml/`` on its import path, so it finds
the ``LuckyMonitor`` module and ``LuckyMonitor.Backend``, whose ``qmldir``
names the ``.qmltypes`` describing the Python-registered types
(``scripts/gen_qmltypes.py`` keeps it fresh). Any warning (unqualified access,
a missing property or type, an incompatible binding...) fails.

Exit status: 0 clean, 1 warnings, 3 ``pyside6-qmllint`` not found.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QML_ROOT = ROOT / "qml"


def find_qmllint() -> str | None:
    """``pyside6-qmllint`` beside the running interpreter, else on ``PATH``."""
    name = "pyside6-qmllint"
    beside = Path(sys.executable).parent / (name + ".exe" if os.name == "nt" else name)
    if beside.is_file():
        return str(beside)
    return shutil.which(name)


def qml_files() -> list[Path]:
    """Every ``.qml`` file under ``qml/``, sorted."""
    return sorted(QML_ROOT.rglob("*.qml"))


def lint(qmllint: str, files: list[Path]) -> tuple[int, str]:
    """Run qmllint on ``files``; return its exit status and its output."""
    cmd = [qmllint, "-I", str(QML_ROOT), "--max-warnings", "0", *(str(f) for f in files)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="QML files (default: every file under qml/)")
    args = parser.parse_args(argv)
    qmllint = find_qmllint()
    if qmllint is None:
        print("pyside6-qmllint not found (install PySide6)", file=sys.stderr)
        return 3
    files = [f.resolve() for f in args.files] or qml_files()
    status, output = lint(qmllint, files)
    warned = any(line.startswith(("Warning:", "Error:", "Critical:")) for line in output.splitlines())
    if status != 0 or warned:
        print(output, file=sys.stderr)
        print(f"qmllint: warnings in {len(files)} QML file(s)", file=sys.stderr)
        return 1
    print(f"qmllint: {len(files)} QML files clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
