"""The committed flatc output matches schema/hazel_rpc.fbs, and the generator is deterministic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_flatbuffers.py"
FLATC_MISSING = 3


def run(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode == FLATC_MISSING:
        pytest.skip(f"flatc unavailable: {proc.stderr.strip()}")
    return proc


@pytest.mark.timeout(150)
def test_committed_generated_code_is_fresh() -> None:
    proc = run("--check")
    assert proc.returncode == 0, f"lucky_monitor/_generated is stale:\n{proc.stderr}"


@pytest.mark.timeout(150)
def test_generator_is_deterministic_and_check_detects_drift(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    first = run("--out", str(out))
    assert first.returncode == 0, first.stderr
    snapshot = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert Path("hazel/rpc/Envelope.py") in snapshot
    # imports are rewritten to the package; nothing refers to a top-level `hazel`
    texts = [b.decode() for b in snapshot.values()]
    assert not any("from hazel." in t or "import hazel" in t for t in texts)
    assert any("from lucky_monitor._generated.hazel.rpc.Vec3 import Vec3" in t for t in texts)

    again = run("--out", str(out))
    assert again.returncode == 0 and "already up to date" in again.stdout
    assert {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == snapshot
    assert run("--out", str(out), "--check").returncode == 0

    envelope = out / "hazel" / "rpc" / "Envelope.py"
    envelope.write_text(envelope.read_text() + "# edited\n")
    stale = out / "hazel" / "rpc" / "Removed.py"
    stale.write_text("")
    proc = run("--out", str(out), "--check")
    assert proc.returncode == 1
    assert "differs: hazel/rpc/Envelope.py" in proc.stderr
    assert "stale extra file: hazel/rpc/Removed.py" in proc.stderr

    assert run("--out", str(out)).returncode == 0
    assert not stale.exists()
    assert envelope.read_bytes() == snapshot[Path("hazel/rpc/Envelope.py")]
