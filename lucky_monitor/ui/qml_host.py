"""Host the ``LuckyMonitor`` QML module in a ``QQuickWidget``.

The QML files live in a module directory ``LuckyMonitor/`` (with its
``qmldir``) under a *QML import root*: ``<repo>/qml`` in a checkout,
``lucky_monitor/qml`` inside an installed wheel. :func:`qml_dir` finds it;
:func:`make_quick_widget` adds it to a widget's import path, loads one
component with ``loadFromModule``, giving its ``required property
MonitorBackend backend`` as an initial property, and refuses to return a
widget whose QML failed to load or warned while loading.

The Python types QML uses are registered with ``@QmlElement`` under the URI
``LuckyMonitor.Backend`` (``MonitorBackend`` in :mod:`.backend`, the
``Palette`` singleton in :mod:`.palette`): importing those modules registers
them. The directory ``LuckyMonitor/Backend/`` holds that module's ``qmldir``
and the ``.qmltypes`` QML tooling reads (``scripts/gen_qmltypes.py`` writes
them).

The scene-graph backend is chosen once, before the first QML window
(:func:`choose_quick_backend`): Qt Quick's ``software`` renderer where
OpenGL would be rendered in software anyway (the ``offscreen`` platform,
Mesa's llvmpipe/softpipe under Xvfb or a VM without a GPU). There, two
``QQuickWidget`` panels rendered through software GL cost about a core
of CPU; the software renderer draws the same panels for a small part of
that and repaints only what changed. With a real GPU, Qt's default stays.
``QT_QUICK_BACKEND`` / ``QSG_RHI_BACKEND`` set by the user are obeyed.
:func:`frames_rendered` counts the frames a widget's scene graph rendered
(panels re-render only when a bound value changed).

Controls use the ``Fusion`` style (chosen here before the first QML load
unless ``QT_QUICK_CONTROLS_STYLE`` names another); the
components set their own dark palette, so they read the same whatever the
application palette is.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QColor, QGuiApplication, QOffscreenSurface, QOpenGLContext
from PySide6.QtQml import QQmlError
from PySide6.QtQuick import QQuickWindow, QSGRendererInterface
from PySide6.QtQuickControls2 import QQuickStyle
from PySide6.QtQuickWidgets import QQuickWidget
from PySide6.QtWidgets import QWidget

from ..protocol.errors import LuckyMonitorError
from . import palette as pal
from .backend import MonitorBackend  # registers LuckyMonitor.Backend/MonitorBackend
from .palette import Palette  # registers LuckyMonitor.Backend/Palette

#: The Python types QML imports from ``LuckyMonitor.Backend``.
QML_TYPES = (MonitorBackend, Palette)

__all__ = [
    "MODULE",
    "QML_TYPES",
    "QmlLoadError",
    "choose_quick_backend",
    "frames_rendered",
    "gl_renderer",
    "make_quick_widget",
    "qml_dir",
]

#: The QML module name (``import LuckyMonitor``).
MODULE = "LuckyMonitor"

_STYLE = "Fusion"
_style_chosen = False
_backend_chosen: str | None = None

#: GL renderers that draw on the CPU (Mesa llvmpipe/softpipe/swrast, lavapipe, Microsoft's GDI renderer).
_SOFTWARE_GL = re.compile(r"llvmpipe|softpipe|swrast|lavapipe|software|gdi generic", re.IGNORECASE)
_GL_RENDERER = 0x1F01


class QmlLoadError(LuckyMonitorError):
    """A QML component could not be found, failed to load, or warned while loading."""


def qml_dir() -> Path:
    """The QML import root that holds the ``LuckyMonitor`` module directory.

    Looks first inside the package (``lucky_monitor/qml``, where a wheel
    installs it), then at the repository checkout (``<repo>/qml``).

    Returns
    -------
    pathlib.Path
        A directory ``d`` with ``d / "LuckyMonitor" / "qmldir"``.

    Raises
    ------
    QmlLoadError
        Neither place holds the module.
    """
    package = Path(__file__).resolve().parents[1]
    candidates = (package / "qml", package.parent / "qml")
    for root in candidates:
        if (root / MODULE / "qmldir").is_file():
            return root
    tried = ", ".join(str(c) for c in candidates)
    raise QmlLoadError(f"QML module {MODULE} not found (looked in {tried})")


def _choose_style() -> None:
    """Select the Fusion controls style once, unless ``QT_QUICK_CONTROLS_STYLE`` names one."""
    global _style_chosen
    if _style_chosen:
        return
    _style_chosen = True
    if not os.environ.get("QT_QUICK_CONTROLS_STYLE"):
        QQuickStyle.setStyle(_STYLE)


def gl_renderer() -> str | None:
    """The ``GL_RENDERER`` string of an OpenGL context on this platform, ``None`` if none can be made.

    Needs a ``QGuiApplication``. Costs one short-lived context (tens of ms).
    """
    ctx = QOpenGLContext()
    if not ctx.create():
        return None
    surface = QOffscreenSurface()
    surface.setFormat(ctx.format())
    surface.create()
    try:
        if not surface.isValid() or not ctx.makeCurrent(surface):
            return None
        try:
            return str(ctx.functions().glGetString(_GL_RENDERER) or "") or None
        finally:
            ctx.doneCurrent()
    finally:
        surface.destroy()


def choose_quick_backend() -> str:
    """Choose Qt Quick's scene-graph backend once, before the first QML window exists.

    ``"software"`` (Qt Quick's raster renderer) when the platform has no
    GPU-backed OpenGL: the ``offscreen``/``minimal`` platforms, no OpenGL
    context at all, or a software GL renderer (llvmpipe, softpipe...).
    Otherwise Qt's default (``"default"``). A backend the user chose with
    ``QT_QUICK_BACKEND`` or ``QSG_RHI_BACKEND`` is left alone
    (``"env:<value>"``).

    Returns
    -------
    str
        What was chosen, for logs and tests; the same on every later call.
    """
    global _backend_chosen
    if _backend_chosen is not None:
        return _backend_chosen
    user = os.environ.get("QT_QUICK_BACKEND") or os.environ.get("QSG_RHI_BACKEND")
    if user:
        _backend_chosen = f"env:{user}"
        return _backend_chosen
    platform = QGuiApplication.platformName()
    software = platform in ("offscreen", "minimal", "vnc", "linuxfb")
    if not software:
        renderer = gl_renderer()
        software = renderer is None or bool(_SOFTWARE_GL.search(renderer))
    if software:
        QQuickWindow.setGraphicsApi(QSGRendererInterface.GraphicsApi.Software)
    _backend_chosen = "software" if software else "default"
    return _backend_chosen


def frames_rendered(widget: QQuickWidget) -> int:
    """How many frames ``widget``'s scene graph has rendered since :func:`make_quick_widget` made it."""
    return int(getattr(widget, "_lucky_frames", [0])[0])


def _messages(errors: list[QQmlError]) -> str:
    return "; ".join(e.toString() for e in errors)


def make_quick_widget(backend: MonitorBackend, component: str, parent: QWidget | None = None) -> QQuickWidget:
    """A ``QQuickWidget`` showing ``LuckyMonitor.<component>`` bound to ``backend``.

    Parameters
    ----------
    backend
        The component's required property ``backend``. The widget keeps a
        Python reference to it. It must outlive the loaded QML: if something
        else may delete it first (a Qt parent), unload the view first with
        ``widget.setSource(QUrl())``, or every binding warns about a null
        ``backend``.
    component
        ``"RpcPanel"`` or ``"DebugDraw"`` (a type of the module that declares
        ``required property MonitorBackend backend``).
    parent
        Optional parent widget.

    Returns
    -------
    PySide6.QtQuickWidgets.QQuickWidget
        Loaded, with resize mode ``SizeRootObjectToView``.

    Raises
    ------
    QmlLoadError
        The module or component is missing, the QML has errors, or the
        engine reported a warning while creating the component (an
        undefined property, a binding loop...).
    """
    _choose_style()
    choose_quick_backend()
    root = qml_dir()
    widget = QQuickWidget(parent)
    frames = [0]
    widget._lucky_frames = frames  # type: ignore[attr-defined]  # read by frames_rendered()

    def count() -> None:
        frames[0] += 1

    widget.quickWindow().afterRendering.connect(count)
    widget.setResizeMode(QQuickWidget.ResizeMode.SizeRootObjectToView)
    widget.setClearColor(QColor(pal.WINDOW))  # any area the scene has not drawn yet: the window's colour, not white
    engine = widget.engine()
    engine.addImportPath(str(root))
    widget.setInitialProperties({"backend": backend})
    widget._lucky_backend = backend  # type: ignore[attr-defined]  # keep it alive as long as the widget

    warnings: list[QQmlError] = []

    def collect(errs: list[QQmlError]) -> None:
        warnings.extend(errs)

    engine.warnings.connect(collect)
    try:
        widget.loadFromModule(MODULE, component)
    finally:
        engine.warnings.disconnect(collect)
    errors = list(widget.errors())
    problems = errors + warnings
    if widget.status() != QQuickWidget.Status.Ready or widget.rootObject() is None or problems:
        detail = _messages(problems) or f"status {widget.status().name}"
        widget.setSource(QUrl())
        widget.deleteLater()
        raise QmlLoadError(f"{MODULE}.{component}: {detail}")
    return widget
