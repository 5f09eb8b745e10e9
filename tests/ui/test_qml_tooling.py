"""QML tooling: the committed type description is fresh, qmllint is clean, and the palette is one.

``scripts/gen_qmltypes.py`` describes the Python types registered for QML
(``LuckyMonitor.Backend``) in a ``.qmltypes`` file; ``scripts/qmllint.py`` lints
every QML file against it. Both run in ``scripts/test.sh`` too.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QColor

from lucky_monitor.ui import palette
from lucky_monitor.ui.qml_host import qml_dir

ROOT = Path(__file__).resolve().parents[2]
GEN = ROOT / "scripts" / "gen_qmltypes.py"
LINT = ROOT / "scripts" / "qmllint.py"
TOOL_MISSING = 3


def run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )
    if proc.returncode == TOOL_MISSING:
        pytest.skip(f"Qt for Python tool unavailable: {proc.stderr.strip()}")
    return proc


@pytest.mark.timeout(150)
def test_committed_qmltypes_are_fresh() -> None:
    proc = run(GEN, "--check")
    assert proc.returncode == 0, f"qml/LuckyMonitor/Backend is stale:\n{proc.stderr}"


@pytest.mark.timeout(150)
def test_qmltypes_describe_the_backend_and_check_detects_drift(tmp_path: Path) -> None:
    out = tmp_path / "Backend"
    assert run(GEN, "--out", str(out)).returncode == 0
    qmldir = (out / "qmldir").read_text()
    assert qmldir.startswith("module LuckyMonitor.Backend\n") and "typeinfo backend.qmltypes" in qmldir
    types = (out / "backend.qmltypes").read_text()
    assert '"LuckyMonitor.Backend/MonitorBackend 1.0"' in types
    assert '"LuckyMonitor.Backend/Palette 1.0"' in types and "isSingleton: true" in types
    for name in ("lastDrawResultKind", "simModeResultKind", "stateColor", "drawLine", "drawChanged"):
        assert f'name: "{name}"' in types, name
    assert str(ROOT) not in types  # no machine paths in a committed file
    assert run(GEN, "--out", str(out), "--check").returncode == 0
    (out / "backend.qmltypes").write_text(types.replace('name: "drawLine"', 'name: "drawLines"'))
    proc = run(GEN, "--out", str(out), "--check")
    assert proc.returncode == 1 and "drawLine" in proc.stderr


@pytest.mark.timeout(150)
def test_qmllint_is_clean() -> None:
    proc = run(LINT)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.timeout(150)
def test_qmllint_knows_the_python_types(tmp_path: Path) -> None:
    """A member MonitorBackend lacks, or an unqualified access, fails the lint."""
    bad = tmp_path / "Bad.qml"
    bad.write_text(
        "import QtQuick\n"
        "import LuckyMonitor.Backend\n"
        "Item {\n"
        "    required property MonitorBackend backend\n"
        "    property string kind: backend.lastDrawResultKind\n"
        "    property string typo: backend.lastDrawResultKnd\n"
        "    property color good: Palette.good\n"
        "    Text { text: backend.lastDrawResult }\n"
        "}\n"
    )
    proc = run(LINT, str(bad))
    assert proc.returncode == 1
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 2, proc.stderr
    assert 'Bad.qml:6:35: Member "lastDrawResultKnd" not found on type "MonitorBackend"' in warnings[0]
    assert "Bad.qml:8:18: Unqualified access" in warnings[1]


def test_palette_singleton_holds_every_colour_once() -> None:
    props = {name for name in dir(palette.Palette) if name in palette.COLOURS}
    assert props == set(palette.COLOURS)
    mo = palette.Palette.staticMetaObject
    names = {mo.property(i).name() for i in range(mo.propertyOffset(), mo.propertyCount())}
    assert names == set(palette.COLOURS)
    p = palette.Palette()
    for name, hex_ in palette.COLOURS.items():
        assert re.fullmatch(r"#[0-9a-f]{6}", hex_), name
        assert p.property(name) == QColor(hex_), name
    assert palette.rgba("#5a8cff", 70) == (90, 140, 255, 70)


def test_qml_writes_no_colour_and_no_result_prefix_test() -> None:
    files = sorted(qml_dir().rglob("*.qml"))
    assert files
    for f in files:
        text = f.read_text()
        assert not re.search(r"#[0-9a-fA-F]{3,8}\b", text), f"{f.name} writes a colour; use Palette/Theme"
        assert "startsWith" not in text, f"{f.name} classifies text by prefix; use a result kind"
