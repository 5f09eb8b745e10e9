#!/usr/bin/env python3
"""Regenerate (or check) the QML type description of the Python-registered types.

Usage::

    python scripts/gen_qmltypes.py            # rewrite qml/LuckyMonitor/Backend/
    python scripts/gen_qmltypes.py --check    # exit 1 if the committed files are stale
    python scripts/gen_qmltypes.py --out DIR  # write (or check) another directory

The types QML imports as ``LuckyMonitor.Backend`` (``MonitorBackend``, the
``Palette`` singleton) are Python classes registered with ``@QmlElement``.
QML tooling (``pyside6-qmllint``, a QML language server) learns about them from
a ``.qmltypes`` file named by the ``typeinfo`` line of the module's ``qmldir``;
at run time the engine uses the registration and reads the ``qmldir`` only.

Qt for Python's ``pyside6-metaobjectdump`` describes a class by parsing its
source, which misses properties built by a helper (``MonitorBackend`` makes
its ~50 properties that way). This script describes the classes from their
run-time ``QMetaObject`` instead, in the same JSON format, and hands that to
``pyside6-qmltyperegistrar`` (the step ``pyside6-project build`` runs) to write
the ``.qmltypes``. So the description is exactly what QML sees at run time.

Exit status: 0 success (or fresh), 1 stale (``--check``), 2 the registrar failed,
3 the registrar was not found.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtCore import QMetaMethod

ROOT = Path(__file__).resolve().parent.parent
#: The modules that register QML types (each sets QML_IMPORT_NAME / QML_IMPORT_MAJOR_VERSION).
MODULES = ("lucky_monitor.ui.palette", "lucky_monitor.ui.backend")
URI = "LuckyMonitor.Backend"
MAJOR = 1
OUT = ROOT / "qml" / Path(*URI.split("."))
QMLTYPES = "backend.qmltypes"
QMLDIR_TEXT = (
    f"module {URI}\n"
    f"# Types registered from Python ({', '.join(MODULES)}); the engine reads only this file.\n"
    f"# {QMLTYPES} describes them for QML tooling; scripts/gen_qmltypes.py writes both.\n"
    f"typeinfo {QMLTYPES}\n"
    "# QtQuick provides the QML type of QColor (color).\n"
    "depends QtQuick\n"
)
#: qmltyperegistrar is given no Qt metatypes (they would tie the output to a Qt build);
#: QML tooling knows QObject anyway, so its notice about the missing base is expected.
_EXPECTED_NOTICE = "QObject is used as base type but cannot be found"


def find_registrar() -> str | None:
    """``pyside6-qmltyperegistrar`` beside the running interpreter, else on ``PATH``."""
    name = "pyside6-qmltyperegistrar"
    beside = Path(sys.executable).parent / (name + ".exe" if os.name == "nt" else name)
    if beside.is_file():
        return str(beside)
    return shutil.which(name)


def _is_singleton(uri: str, name: str) -> bool:
    from PySide6.QtCore import QObject
    from PySide6.QtQml import QQmlEngine, qmlTypeId

    engine = QQmlEngine()
    try:
        return isinstance(engine.singletonInstance(qmlTypeId(uri, MAJOR, 0, name)), QObject)
    finally:
        engine.deleteLater()


def _method(m: QMetaMethod) -> dict:
    types = [bytes(t).decode() for t in m.parameterTypes()]
    names = [bytes(n).decode() for n in m.parameterNames()]
    return {
        "access": "public",
        "name": bytes(m.name()).decode(),
        "arguments": [{"name": n or f"a{i + 1}", "type": t} for i, (n, t) in enumerate(zip(names, types, strict=True))],
        "returnType": m.typeName(),
    }


def describe_class(cls: type, uri: str) -> dict:
    """One class in ``moc --output-json`` form, from its run-time meta-object."""
    from PySide6.QtCore import QMetaMethod

    mo = cls.staticMetaObject  # type: ignore[attr-defined]
    infos = [{"name": "QML.Element", "value": "auto"}]
    if _is_singleton(uri, cls.__name__):
        infos.append({"name": "QML.Singleton", "value": "true"})
    props = []
    for i in range(mo.propertyOffset(), mo.propertyCount()):
        p = mo.property(i)
        entry: dict[str, object] = {"name": p.name(), "type": p.typeName(), "index": len(props), "read": p.name()}
        if p.isWritable():
            entry["write"] = "set" + p.name()[:1].upper() + p.name()[1:]
        if p.hasNotifySignal():
            entry["notify"] = bytes(p.notifySignal().name()).decode()
        if p.isConstant():
            entry["constant"] = True
        props.append(entry)
    signals, slots = [], []
    for i in range(mo.methodOffset(), mo.methodCount()):
        m = mo.method(i)
        if m.methodType() == QMetaMethod.MethodType.Signal:
            signals.append(_method(m))
        elif m.methodType() == QMetaMethod.MethodType.Slot:
            slots.append(_method(m))
    base = mo.superClass().className()
    data: dict[str, object] = {
        "className": cls.__name__,
        "qualifiedClassName": cls.__name__,
        "object": True,
        "superClasses": [{"access": "public", "name": base}],
        "classInfos": infos,
    }
    for key, value in (("properties", props), ("signals", signals), ("slots", slots)):
        if value:
            data[key] = value
    return data


def describe_module(module: ModuleType) -> dict:
    """The classes ``module`` registers with QML, as one ``metaobjectdump`` entry."""
    from PySide6.QtCore import QObject
    from PySide6.QtQml import qmlTypeId

    uri, major = module.QML_IMPORT_NAME, module.QML_IMPORT_MAJOR_VERSION
    if (uri, major) != (URI, MAJOR):
        raise SystemExit(f"{module.__name__} registers {uri} {major}, expected {URI} {MAJOR}")
    classes = [
        describe_class(obj, uri)
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, QObject)
        and obj.__module__ == module.__name__
        and qmlTypeId(uri, major, 0, obj.__name__) >= 0
    ]
    return {
        "classes": classes,
        "outputRevision": 68,
        "QML_IMPORT_NAME": uri,
        "QML_IMPORT_MAJOR_VERSION": major,
        "QML_IMPORT_MINOR_VERSION": 0,
        "inputFile": Path(module.__file__).resolve().relative_to(ROOT).as_posix(),
    }


def generate(registrar: str, dest: Path) -> None:
    """Write ``qmldir`` and the ``.qmltypes`` into the empty directory ``dest``."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    sys.path.insert(0, str(ROOT))
    from PySide6.QtCore import QCoreApplication

    app = QCoreApplication.instance() or QCoreApplication([])  # noqa: F841 - QQmlEngine needs one
    dump = [describe_module(importlib.import_module(name)) for name in MODULES]
    with tempfile.TemporaryDirectory(prefix="gen_qmltypes_") as tmp:
        json_file = Path(tmp) / "metatypes.json"
        json_file.write_text(json.dumps(dump, indent=4), encoding="utf-8")
        proc = subprocess.run(
            [
                registrar,
                "--generate-qmltypes",
                str(dest / QMLTYPES),
                "-o",
                str(Path(tmp) / "registrations.cpp"),
                "--import-name",
                URI,
                "--major-version",
                str(MAJOR),
                "--minor-version",
                "0",
                str(json_file),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    noise = [line for line in (proc.stdout + proc.stderr).splitlines() if line and _EXPECTED_NOTICE not in line]
    if proc.returncode != 0 or noise:
        raise RuntimeError("\n".join(noise) or f"qmltyperegistrar exited with {proc.returncode}")
    text = (dest / QMLTYPES).read_text(encoding="utf-8").replace("\r\n", "\n")
    (dest / QMLTYPES).write_text(text, encoding="utf-8")
    (dest / "qmldir").write_text(QMLDIR_TEXT, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files; change nothing")
    parser.add_argument("--out", type=Path, default=OUT, help="the module directory (default: %(default)s)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    registrar = find_registrar()
    if registrar is None:
        print("pyside6-qmltyperegistrar not found (install PySide6)", file=sys.stderr)
        return 3
    with tempfile.TemporaryDirectory(prefix="qmltypes_") as tmp:
        fresh = Path(tmp)
        try:
            generate(registrar, fresh)
        except RuntimeError as exc:
            print(f"qmltyperegistrar failed: {exc}", file=sys.stderr)
            return 2
        names = sorted(p.name for p in fresh.iterdir())
        if args.check:
            stale = False
            for name in names:
                new = (fresh / name).read_text(encoding="utf-8")
                old_path = out / name
                old = old_path.read_text(encoding="utf-8") if old_path.is_file() else ""
                if new != old:
                    stale = True
                    sys.stderr.writelines(
                        difflib.unified_diff(
                            old.splitlines(keepends=True),
                            new.splitlines(keepends=True),
                            f"committed/{name}",
                            f"generated/{name}",
                            n=1,
                        )
                    )
            if stale:
                print(f"{out} is stale; run scripts/gen_qmltypes.py", file=sys.stderr)
                return 1
            return 0
        out.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copyfile(fresh / name, out / name)
    print(f"wrote {', '.join(names)} in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
