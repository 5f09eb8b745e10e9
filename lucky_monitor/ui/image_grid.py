"""The monitor's per-env image grid: the session's display buffer on one :class:`ImageSurface`.

Per new image the work is one conversion of the display buffer into a
``QImage`` of the raster engine's native format (``RGB32``, or
``ARGB32_Premultiplied`` with alpha; Qt's SIMD converters, about 0.03 ms for
512×512) and one ``drawImage`` of it into the view. Measured with the
offscreen raster engine drawing a 512×512 grid into 700×700 pixels: the
native format draws in 0.18 ms (nearest) or 0.45 ms (smooth), where the
``RGB888`` image pyqtgraph's ``ImageItem`` draws over the buffer costs
0.80 / 1.41 ms, because Qt converts every pixel on every paint; one to one,
0.02 ms against 0.09 ms. :class:`ImageSurface` is the one place that choice
lives (it replaced ``pg.ImageItem``; no levels, LUT or ``makeARGB`` either).

The view's scene is not what paints a frame. A :class:`GridCanvas`, a plain
opaque widget laid over the viewport, draws the image and blits one cached
image of the overlay items (env labels, badges, selection frames), which it
renders again only when the scene or the view's transform changes; a new
frame repaints only the rectangle the image covers. The view keeps zoom,
pan, hover and clicks. Beside a running engine and trainer
(caches cold between frames) a new image then costs about 0.6 ms where a
repaint through the scene cost 0.9 ms.

Env labels are not items per env. One item draws the labels of the tiles in
view, only while a tile is at least ``label_min_px`` screen pixels wide and
high and at most ``max_labels`` tiles are in view; it is drawn into the
canvas's overlay on zoom, pan or a geometry change, never because a new
frame arrived.

Coordinates: the view's x and y are grid pixel column and row (the y axis is
inverted so row 0 is at the top). Hover and click map scene positions through
the ViewBox to grid pixels and :meth:`Tiler.env_at`.
"""

from __future__ import annotations

import dataclasses
import math
import time
import typing
from collections.abc import Callable, Mapping
from os import PathLike
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal

from lucky_monitor.core.session import DisplayOptions, ImageFrame, PixelReading, ViewRequest
from lucky_monitor.core.tiler import MAX_ENVS, FrameMeta, GridGeometry, Tiler, TilerError, source_format
from lucky_monitor.protocol.enums import ImageFormat
from lucky_monitor.protocol.errors import LuckyMonitorError
from lucky_monitor.ui import palette as pal
from lucky_monitor.ui.text_line import TextLine

#: Seconds between updates of the grid's counters line while frames stream in.
META_PERIOD_S = 0.2
#: The columns box's limit before a grid gives its own (one tile row of every env at most).
MAX_COLUMNS_ASKED = MAX_ENVS

__all__ = [
    "GridCanvas",
    "ImageGridError",
    "ImageGridWidget",
    "ImageSurface",
    "LayoutKey",
    "SingleEnvView",
    "array_to_qimage",
]

ALPHA_TIP = "show the alpha channel (blended over the background)"


class ImageGridError(LuckyMonitorError):
    """The image grid cannot do what was asked (nothing to save, a write failed, bad meta)."""


def array_to_qimage(image: np.ndarray) -> QtGui.QImage:
    """A ``QImage`` that owns a copy of ``image`` (``(h, w, 3)`` RGB or ``(h, w, 4)`` RGBA uint8).

    The pixels are first copied into a numpy buffer this function owns, and
    the returned image is detached from it (``QImage.copy``), so the result
    never refers to the caller's memory, read-only or not.

    Raises
    ------
    ImageGridError
        ``image`` is not a 3-D uint8 array with 3 or 4 channels.
    """
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] not in (3, 4):
        raise ImageGridError("image: expected an (h, w, 3|4) uint8 array")
    owned = np.array(image, dtype=np.uint8, order="C", copy=True)
    h, w, c = owned.shape
    fmt = QtGui.QImage.Format.Format_RGB888 if c == 3 else QtGui.QImage.Format.Format_RGBA8888
    wrapped = QtGui.QImage(owned.data, w, h, owned.strides[0], fmt)
    return wrapped.copy()  # deep copy owned by Qt; `owned` may go


def _save_png(image: np.ndarray, path: str | PathLike[str]) -> None:
    qimage = array_to_qimage(image)
    target = str(path)
    if not qimage.save(target, "PNG"):  # type: ignore[call-overload]  # the stub wants bytes; str works
        raise ImageGridError(f"cannot write PNG {target!r}")


def _meta_field(meta: Any, name: str, default: Any) -> Any:
    if meta is None:
        return default
    if isinstance(meta, Mapping):
        return meta.get(name, default)
    return getattr(meta, name, default)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ImageGridError(f"{name}: {value!r}, must be a non-negative integer")
    return int(value)


class _EnvLabels(QtWidgets.QGraphicsItem):
    """Env index labels of the tiles in view, drawn at a fixed screen size.

    One item for the whole grid. Its bounding rect is the part of the grid in
    view, and only while tiles are big enough on screen and few enough in
    view; otherwise it is empty and the item costs nothing. The
    :class:`GridCanvas` draws it into its cached overlay, so a new frame
    (which repaints the image under it) only blits that; zoom, pan and
    geometry changes draw it again.
    """

    def __init__(self, min_tile_px: int, max_labels: int) -> None:
        super().__init__()
        self._tiler: Tiler | GridGeometry | None = None
        self._rect = QtCore.QRectF()
        self._min_tile_px = min_tile_px
        self._max_labels = max_labels
        self._texts: dict[int, QtGui.QStaticText] = {}
        self._font = QtGui.QFont()
        self._font.setPixelSize(11)
        self._bg = QtGui.QColor(0, 0, 0, 160)
        self._fg = QtGui.QColor(255, 255, 255)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
        self.setAcceptHoverEvents(False)
        #: labels drawn by the last paint, their boxes in device pixels, and paints so far (diagnostics)
        self.last_drawn = 0
        self.last_boxes: list[tuple[int, QtCore.QRectF]] = []
        self.paints = 0

    def set_tiler(self, tiler: Tiler | GridGeometry | None) -> None:
        self._tiler = tiler
        self._texts.clear()
        self._set_rect(QtCore.QRectF())

    def _set_rect(self, rect: QtCore.QRectF) -> None:
        if rect != self._rect:
            self.prepareGeometryChange()
            self._rect = rect
        self.update()

    def set_view(self, view_rect: QtCore.QRectF, pixel_w: float, pixel_h: float) -> None:
        """Follow the view: ``view_rect`` in grid pixels, ``pixel_*`` grid pixels per screen pixel."""
        t = self._tiler
        rect = QtCore.QRectF()
        if t is not None and pixel_w > 0 and pixel_h > 0:
            big = t.width / pixel_w >= self._min_tile_px and t.height / pixel_h >= self._min_tile_px
            r = view_rect.normalized().intersected(QtCore.QRectF(0, 0, t.grid_width, t.grid_height))
            if big and not r.isEmpty():
                c0, c1, r0, r1 = self._tile_span(t, r)
                if (c1 - c0 + 1) * (r1 - r0 + 1) <= self._max_labels:
                    rect = r
        self._set_rect(rect)

    @staticmethod
    def _tile_span(t: Tiler | GridGeometry, r: QtCore.QRectF) -> tuple[int, int, int, int]:
        pitch_x, pitch_y = t.width + t.gap, t.height + t.gap
        c0 = max(0, int(r.left() // pitch_x))
        c1 = min(t.columns - 1, int(r.right() // pitch_x))
        r0 = max(0, int(r.top() // pitch_y))
        r1 = min(t.rows - 1, int(r.bottom() // pitch_y))
        return c0, c1, r0, r1

    def boundingRect(self) -> QtCore.QRectF:
        return QtCore.QRectF(self._rect)

    def paint(self, painter: QtGui.QPainter, option: Any, widget: Any = None) -> None:
        self.paints += 1
        self.last_drawn = 0
        self.last_boxes = []
        t, r = self._tiler, self._rect
        if t is None or r.isEmpty():
            return
        tr = painter.worldTransform()
        c0, c1, r0, r1 = self._tile_span(t, r)
        pitch_x, pitch_y = t.width + t.gap, t.height + t.gap
        painter.save()
        painter.resetTransform()
        painter.setFont(self._font)
        painter.setPen(self._fg)
        drawn = 0
        for row in range(r0, r1 + 1):
            for col in range(c0, c1 + 1):
                env = row * t.columns + col
                if env >= t.num_envs:
                    break
                text = self._texts.get(env)
                if text is None:
                    text = QtGui.QStaticText(str(env))
                    text.prepare(QtGui.QTransform(), self._font)
                    self._texts[env] = text
                # the tile's bottom-left corner (kept inside the view for tiles cut by its edge): clear of
                # an index the engine may draw into the image's top-left, so the two can be compared
                corner = tr.map(QtCore.QPointF(max(col * pitch_x, r.left()), min(row * pitch_y + t.height, r.bottom())))
                size = text.size()
                y = corner.y() - size.height() - 2
                if y < tr.map(QtCore.QPointF(0, max(row * pitch_y, r.top()))).y():
                    continue  # too little of the tile in view to hold its label
                if corner.x() + size.width() + 4 > tr.map(QtCore.QPointF(col * pitch_x + t.width, 0)).x():
                    continue  # too narrow a part: the label would run into the next tile's, "4" + "5" reading "45"
                box = QtCore.QRectF(corner.x(), y, size.width() + 4, size.height() + 2)
                painter.fillRect(box, self._bg)
                painter.drawStaticText(QtCore.QPointF(corner.x() + 2, y + 1), text)
                self.last_boxes.append((env, box))
                drawn += 1
        painter.restore()
        self.last_drawn = drawn


def _set_pen(item: QtWidgets.QGraphicsRectItem, colour: str, width: float, style: Qt.PenStyle) -> None:
    """A cosmetic pen (``width`` device pixels at any zoom) on ``item``, set only when it differs (it repaints)."""
    pen = QtGui.QPen(QtGui.QColor(colour), width)
    pen.setCosmetic(True)
    pen.setStyle(style)
    if item.pen() != pen:
        item.setPen(pen)


class ImageSurface(QtWidgets.QGraphicsObject):
    """Pixels on screen: an ``(h, w, 3|4)`` uint8 RGB(A) array drawn into a rectangle of the view.

    :meth:`set_image` converts the array once into :attr:`qimage` (the raster
    engine's native format, so a paint is a plain blit or scale) and asks
    for one repaint; nothing is converted while painting. The array is kept
    as :attr:`image` (not copied) for the views that read it back.
    """

    def __init__(self) -> None:
        super().__init__()
        self.image: np.ndarray | None = None
        self.qimage: QtGui.QImage | None = None
        self._rect = QtCore.QRectF()
        #: Called after every change, for a :class:`GridCanvas` that paints this surface instead of the scene.
        self.changed: Callable[[], None] | None = None

    def set_image(self, image: np.ndarray, part: tuple[int, int, int, int] | None = None) -> None:
        """Show ``image``; the rectangle defaults to one view unit per pixel until :meth:`set_rect`.

        ``part`` ``(y0, y1, x0, x1)``: only those pixels of ``image`` are new (a grid copied where the
        view is); where the converted image already has ``image``'s size and format, only they are
        converted into it, the rest keeps what it showed. A 4096-env grid of 64x64 tiles zoomed onto
        a few of them had been converted whole for each new image: 47 ms for 53 MiB.
        """
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] not in (3, 4):
            raise ImageGridError("image: expected an (h, w, 3|4) uint8 array")
        if not image.flags.c_contiguous:
            image = np.ascontiguousarray(image)
        h, w, c = image.shape
        src_fmt = QtGui.QImage.Format.Format_RGB888 if c == 3 else QtGui.QImage.Format.Format_RGBA8888
        out_fmt = QtGui.QImage.Format.Format_RGB32 if c == 3 else QtGui.QImage.Format.Format_ARGB32_Premultiplied
        wrapped = QtGui.QImage(image.data, w, h, image.strides[0], src_fmt)
        q = self.qimage
        if part is not None and q is not None and (q.width(), q.height(), q.format()) == (w, h, out_fmt):
            y0, y1, x0, x1 = part
            if y1 > y0 and x1 > x0:
                painter = QtGui.QPainter(q)
                painter.setCompositionMode(QtGui.QPainter.CompositionMode.CompositionMode_Source)
                painter.drawImage(QtCore.QPoint(x0, y0), wrapped, QtCore.QRect(x0, y0, x1 - x0, y1 - y0))
                painter.end()
        else:
            self.qimage = wrapped.convertToFormat(out_fmt)  # a new image Qt owns: `image` may change after this
        self.image = image
        if self._rect.isNull():
            self.set_rect(QtCore.QRectF(0, 0, w, h))
        self._changed()

    def set_rect(self, rect: QtCore.QRectF) -> None:
        """Draw the image into ``rect`` (view coordinates)."""
        if rect != self._rect:
            self.prepareGeometryChange()
            self._rect = QtCore.QRectF(rect)
            self._changed()

    def clear(self) -> None:
        """Show nothing."""
        self.image = None
        self.qimage = None
        self.prepareGeometryChange()
        self._rect = QtCore.QRectF()
        self._changed()

    def _changed(self) -> None:
        if self.changed is not None:
            self.changed()  # a GridCanvas paints it (hidden in the scene)
        else:
            self.update()

    @property
    def rect(self) -> QtCore.QRectF:
        """Where the image is drawn, in view coordinates (empty: nowhere)."""
        return QtCore.QRectF(self._rect)

    def boundingRect(self) -> QtCore.QRectF:
        return QtCore.QRectF(self._rect)

    def paint(self, painter: QtGui.QPainter, option: Any, widget: Any = None) -> None:
        if self.qimage is not None and not self._rect.isEmpty():
            painter.drawImage(self._rect, self.qimage)


class LayoutKey:
    """What makes two grid layouts show differently, derived once per layout object.

    The session hands over one :class:`GridGeometry` object per layout (it
    alternates two buffers of one geometry), so a layout seen last time
    costs an identity check, not eight attribute reads.
    """

    def __init__(self) -> None:
        self._layout: GridGeometry | None = None
        self._key: tuple[int, ...] = ()

    def __call__(self, t: GridGeometry) -> tuple[int, ...]:
        if t is not self._layout:
            self._layout = t
            self._key = (t.num_envs, t.height, t.width, t.channels, t.columns, t.grid_width, t.grid_height)
            self._key += (int(t.shows_alpha),)
        return self._key


#: Runs of drawn overlay rows at most this many rows apart (three empty rows between) are blended as one
#: band: one ``drawImage`` less costs about what blending a few rows of transparent pixels does.
OVERLAY_MERGE_ROWS = 4


def _inner_rect(r: QtCore.QRectF) -> QtCore.QRect:
    """The device pixels wholly inside ``r`` (empty if none)."""
    x0, y0 = math.ceil(r.left()), math.ceil(r.top())
    x1, y1 = math.floor(r.right()), math.floor(r.bottom())
    return QtCore.QRect(x0, y0, max(0, x1 - x0), max(0, y1 - y0))


def _drawn_bands(pixels: np.ndarray, ratio: float = 1.0) -> list[tuple[QtCore.QRectF, QtCore.QRect]]:
    """Where ``pixels`` (``(h, w)`` ARGB, device pixels) holds drawn pixels: ``(target, source)`` rectangles.

    One rectangle per run of rows that hold a drawn pixel (runs at most
    :data:`OVERLAY_MERGE_ROWS` rows apart make one), from the run's leftmost
    to its rightmost drawn column: labels along a row of tiles make one
    rectangle, as high as the labels. ``source`` is in device pixels,
    ``target`` in logical units (device pixels over ``ratio``).
    """
    drawn_px = pixels != 0
    rows = np.flatnonzero(drawn_px.any(axis=1))
    out: list[tuple[QtCore.QRectF, QtCore.QRect]] = []
    if not rows.size:
        return out
    breaks = np.flatnonzero(np.diff(rows) > OVERLAY_MERGE_ROWS)
    starts = [int(rows[0]), *rows[breaks + 1].tolist()]
    ends = [*rows[breaks].tolist(), int(rows[-1])]
    for y0, y_last in zip(starts, ends, strict=True):
        y1 = y_last + 1
        drawn = np.flatnonzero(drawn_px[y0:y1].any(axis=0))
        source = QtCore.QRect(int(drawn[0]), y0, int(drawn[-1]) + 1 - int(drawn[0]), y1 - y0)
        target = QtCore.QRectF(source.x() / ratio, y0 / ratio, source.width() / ratio, (y1 - y0) / ratio)
        out.append((target, source))
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class _Placed:
    """Where a :class:`GridCanvas` paints its image: the transform and rectangle, and the device pixels they cover."""

    transform: QtGui.QTransform
    rect: QtCore.QRectF
    #: device pixels wholly inside the image (none where the transform rotates or shears it; a blit: its pixels)
    inner: QtCore.QRect
    #: device pixels the image touches
    outer: QtCore.QRect
    #: the image's size in pixels when these were worked out
    size: QtCore.QSize
    #: where to draw the image unscaled (a blit) when it covers its own size in device pixels to within half
    #: a pixel (the same pixels a scaled draw would show); ``None`` where it must be scaled
    blit: QtCore.QPoint | None

    @classmethod
    def of(cls, transform: QtGui.QTransform, rect: QtCore.QRectF, size: QtCore.QSize) -> _Placed:
        mapped = transform.mapRect(rect)
        axis_aligned = transform.isAffine() and not transform.isRotating()
        inner = _inner_rect(mapped) if axis_aligned else QtCore.QRect()
        blit = None
        outer = mapped.toAlignedRect()
        if axis_aligned and abs(mapped.width() - size.width()) < 0.5 and abs(mapped.height() - size.height()) < 0.5:
            blit = QtCore.QPoint(round(mapped.left()), round(mapped.top()))
            inner = QtCore.QRect(blit, size)  # exactly the pixels the blit covers
            outer = outer.united(inner)
        return cls(QtGui.QTransform(transform), QtCore.QRectF(rect), inner, outer, QtCore.QSize(size), blit)


class GridCanvas(QtWidgets.QWidget):
    """What the grid's view shows, painted by one plain widget laid over the view's viewport.

    The view (a ``QGraphicsView`` with pyqtgraph's ``ViewBox``) keeps the
    geometry and the interaction: zoom, pan, hover, clicks reach it through
    this widget (transparent for mouse events), and its items keep their
    state. Its painting is replaced: this widget is opaque and covers the
    viewport, so Qt never repaints the viewport under it. A new image then
    costs one ``drawImage`` and a blit of the cached overlays where they
    drew, where a repaint through the scene also walks its items and their
    Python ``paint``/``boundingRect`` overrides: measured beside a running
    engine and trainer (each image painted after a sleep, caches cold), about
    0.6 ms an image against 0.9 ms through the scene for 64 tiles of 64×64.
    While the image stays where it was painted, a new one repaints only the
    pixels it covers (the background and the overlay around it keep the last
    paint's pixels); nothing is filled beneath an opaque image, and the
    overlay is blended only in the bands of rows it drew in. In the demo
    window beside its engine and trainer (64 tiles of 64×64 at 50 Hz) that
    took a paint from 0.37-0.40 ms to 0.32 ms of CPU.

    The overlay items (env labels, badges, selection frames) are rendered
    into one transparent image, again only when the scene changes or the
    view's transform does: never for a new image. Where they drew nothing
    (tiles too small for labels, nothing selected or flagged), nothing is
    blended over a frame.

    Parameters
    ----------
    view : pyqtgraph.GraphicsView
        The view whose viewport this covers.
    surface : ImageSurface
        The image, hidden in the scene and drawn here.
    overlays : callable
        Returns the items drawn over the image (visible ones only are drawn, by ``zValue``).
    """

    def __init__(
        self,
        view: pg.GraphicsView,
        surface: ImageSurface,
        overlays: Callable[[], list[QtWidgets.QGraphicsItem]],
    ) -> None:
        viewport = view.viewport()
        super().__init__(viewport)
        self._view = view
        self._surface = surface
        self._overlays = overlays
        self._overlay: QtGui.QImage | None = None
        self._overlay_key: tuple[float, ...] | None = None
        self._overlay_drawn = False
        self._overlay_bands: list[tuple[QtCore.QRectF, QtCore.QRect]] = []
        # Where the last paint put the image: a new image repaints that place alone.
        self._placed: _Placed | None = None
        #: overlay renders and paints so far (diagnostics and tests)
        self.overlay_renders = 0
        self.paints = 0
        #: paints that drew the image unscaled (its device size its own), of :attr:`paints`
        self.blits = 0
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent, True)
        self.setAttribute(Qt.WidgetAttribute.WA_NoSystemBackground, True)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents, True)
        surface.setVisible(False)  # painted here: the scene never repaints for a new image
        surface.changed = self._image_changed
        view.scene().changed.connect(self.invalidate)
        viewport.installEventFilter(self)
        self.setGeometry(viewport.rect())
        self.show()

    def _image_changed(self) -> None:
        """Repaint for a new image: only the pixels it covers while its place on the canvas is as last painted.

        The rest of the canvas (background, overlay outside the image) keeps
        the pixels of the last paint. A zoom, a pan or a resize repaints the
        whole canvas (the view's scene changes, or :meth:`eventFilter` sees
        the resize); a paint that finds the image moved since the last one
        asks for a whole repaint as well.
        """
        placed = self._placed
        if placed is not None and self._surface.qimage is not None and placed.rect == self._surface.rect:
            # a blit covers its pixels exactly: nothing around them to fill with the background again
            self.update(placed.outer if placed.blit is None else placed.inner)
        else:
            self.update()

    def invalidate(self, *_: object) -> None:
        """Render the overlays again at the next paint (the scene or the view changed)."""
        self._overlay_key = None
        self.update()

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:
        if event.type() == QtCore.QEvent.Type.Resize and watched is self.parent():
            self.setGeometry(self._view.viewport().rect())
            self.invalidate()
        return False

    def paintEvent(self, event: QtGui.QPaintEvent) -> None:
        self.paints += 1
        vt = self._view.viewportTransform()
        key = (vt.m11(), vt.m12(), vt.m21(), vt.m22(), vt.dx(), vt.dy(), self.width(), self.height())
        if key != self._overlay_key:
            self._render_overlay(vt)
            self._overlay_key = key
        s = self._surface
        image, rect = s.qimage, s.rect
        area = event.rect()
        painter = QtGui.QPainter(self)
        if image is None or rect.isEmpty():
            self._placed = None
            painter.fillRect(area, self._view.backgroundBrush())
        else:
            transform = s.deviceTransform(vt)
            placed = self._placed
            size = image.size()
            if placed is None or placed.transform != transform or placed.rect != rect or placed.size != size:
                placed = self._placed = _Placed.of(transform, rect, size)
                if area != self.rect():
                    self.update()  # the image moved since the last paint: this one covers its new place only
            opaque = not image.hasAlphaChannel()
            if not (opaque and placed.inner.contains(area)):
                background = QtGui.QRegion(area)
                if opaque:
                    background -= placed.inner  # opaque pixels need no fill beneath them
                for part in background:  # type: ignore[attr-defined]  # a QRegion iterates its rectangles
                    painter.fillRect(part, self._view.backgroundBrush())
            if placed.blit is not None:
                painter.drawImage(placed.blit, image)  # a row copy; scaled by ~1, Qt resampled every pixel
                self.blits += 1
            else:
                painter.setTransform(transform)
                painter.drawImage(rect, image)
                painter.resetTransform()
        if self._overlay_drawn and self._overlay is not None:
            for target, source in self._overlay_bands:  # blend only the bands the overlay drew in
                painter.drawImage(target, self._overlay, source)
        painter.end()

    def _render_overlay(self, vt: QtGui.QTransform) -> None:
        self._overlay_drawn = False
        items = sorted((i for i in self._overlays() if i.isVisible()), key=lambda i: i.zValue())
        ratio = self.devicePixelRatioF()
        size = QtCore.QSize(round(self.width() * ratio), round(self.height() * ratio))
        if not items or size.isEmpty():
            return
        if self._overlay is None or self._overlay.size() != size:
            self._overlay = QtGui.QImage(size, QtGui.QImage.Format.Format_ARGB32_Premultiplied)
        overlay = self._overlay
        overlay.setDevicePixelRatio(ratio)
        overlay.fill(Qt.GlobalColor.transparent)
        painter = QtGui.QPainter(overlay)
        option = QtWidgets.QStyleOptionGraphicsItem()
        for item in items:
            painter.setTransform(item.deviceTransform(vt))
            item.paint(painter, option, None)
        painter.end()
        self.overlay_renders += 1
        # Items that drew nothing (labels of tiles too small, no badges) cost no blend per frame; where they
        # drew, only the bands of rows they touched are blended.
        pixels = np.frombuffer(overlay.constBits(), np.uint32, count=overlay.bytesPerLine() // 4 * overlay.height())
        pixels = pixels.reshape(overlay.height(), overlay.bytesPerLine() // 4)[:, : overlay.width()]
        self._overlay_bands = _drawn_bands(pixels, ratio)
        self._overlay_drawn = bool(self._overlay_bands)

    @property
    def overlay_shown(self) -> bool:
        """Whether the overlay has anything to show (and is blended over each frame)."""
        return self._overlay_drawn


class _Badges(QtWidgets.QGraphicsItem):
    """Image-check findings on the grid: a red frame around each flagged tile and its kinds' initials.

    One item for the whole grid, repainted only when the flags change (once a
    second at most, from the session's image checks). Frames and letters are
    drawn in device pixels, so they stay visible at any zoom; at most
    :attr:`MAX_BADGES` tiles are drawn.
    """

    MAX_BADGES = 256
    LETTERS: typing.ClassVar[dict[str, str]] = {"constant": "C", "duplicate": "D", "frozen": "F"}

    def __init__(self) -> None:
        super().__init__()
        self._tiler: Tiler | GridGeometry | None = None
        self._flags: dict[int, tuple[str, ...]] = {}
        self._font = QtGui.QFont()
        self._font.setPixelSize(11)
        self._font.setBold(True)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
        self.last_drawn = 0

    def set_tiler(self, tiler: Tiler | GridGeometry | None) -> None:
        self.prepareGeometryChange()
        self._tiler = tiler
        self.update()

    def set_flags(self, flags: Mapping[int, tuple[str, ...]]) -> bool:
        """Show ``flags`` (env -> kinds); return whether anything changed."""
        new = dict(flags)
        if new == self._flags:
            return False
        self._flags = new
        self.update()
        return True

    @property
    def shown(self) -> dict[int, tuple[str, ...]]:
        """The flags shown now (env -> kinds)."""
        return dict(self._flags)

    def boundingRect(self) -> QtCore.QRectF:
        t = self._tiler
        if t is None:
            return QtCore.QRectF()
        return QtCore.QRectF(0, 0, t.grid_width, t.grid_height)

    def paint(self, painter: QtGui.QPainter, option: Any, widget: Any = None) -> None:
        t = self._tiler
        self.last_drawn = 0
        if t is None or not self._flags:
            return
        tr = painter.worldTransform()
        painter.save()
        painter.resetTransform()
        frame_pen = QtGui.QPen(QtGui.QColor(pal.BAD), 2)
        text_pen = QtGui.QPen(QtGui.QColor(pal.BRIGHT_TEXT))
        painter.setFont(self._font)
        bg = QtGui.QColor(pal.BAD)
        drawn = 0
        for env, kinds in sorted(self._flags.items())[: self.MAX_BADGES]:
            if not 0 <= env < t.num_envs:
                continue
            x0, y0 = t.tile_origin(env)
            r = tr.mapRect(QtCore.QRectF(x0, y0, t.width, t.height))
            painter.setPen(frame_pen)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRect(r)
            text = "".join(self.LETTERS.get(k, "?") for k in kinds)
            box = QtCore.QRectF(r.right() - 8 * len(text) - 6, r.top(), 8 * len(text) + 6, 15)
            painter.fillRect(box, bg)
            painter.setPen(text_pen)
            painter.drawText(box, int(Qt.AlignmentFlag.AlignCenter), text)
            drawn += 1
        painter.restore()
        self.last_drawn = drawn


class SingleEnvView(QtWidgets.QWidget):
    """One env's tile at native resolution (one image pixel per device pixel).

    A separate window fed by :class:`ImageGridWidget` with each frame while it
    is visible. It shows the tile as the grid does (after flips and swaps).
    """

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowFlag(Qt.WindowType.Window, True)
        self.setWindowTitle("env")
        self.env: int | None = None
        self.title = QtWidgets.QLabel("no env selected")
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.ci.setContentsMargins(0, 0, 0, 0)
        self.view_box: pg.ViewBox = self.graphics.addViewBox(lockAspect=True, invertY=True, enableMenu=False)
        self.view_box.setMouseEnabled(False, False)
        self.view_box.disableAutoRange()
        self.image_item = ImageSurface()
        self.view_box.addItem(self.image_item)
        self.view_box.sigResized.connect(self.set_native_scale)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.title)
        layout.addWidget(self.graphics, 1)
        self.title.setToolTip("Esc or Ctrl+W closes this window")

    def keyPressEvent(self, event: QtGui.QKeyEvent) -> None:
        # Closable from the keyboard too: without a window manager (a bare X server) it has no close button.
        if event.key() == Qt.Key.Key_Escape or event.matches(QtGui.QKeySequence.StandardKey.Close):
            self.close()
            return
        super().keyPressEvent(event)

    def set_image(self, env: int, tile: np.ndarray) -> None:
        """Show ``tile`` (``(h, w, 3|4)`` uint8) as env ``env``."""
        shape_changed = self.image_item.image is None or self.image_item.image.shape != tile.shape
        self.image_item.set_image(tile)
        if shape_changed:
            self.image_item.set_rect(QtCore.QRectF(0, 0, tile.shape[1], tile.shape[0]))
        if env != self.env:
            self.env = env
            self.title.setText(f"env {env}  {tile.shape[1]}x{tile.shape[0]}")
            self.setWindowTitle(f"env {env}")
        if shape_changed:
            self.set_native_scale()

    def set_native_scale(self, *_: object) -> None:
        """Range the view so one image pixel covers one device pixel, centred."""
        image = self.image_item.image
        if image is None:
            return
        dpr = self.devicePixelRatioF() or 1.0
        vw, vh = max(1.0, self.view_box.width() * dpr), max(1.0, self.view_box.height() * dpr)
        cx, cy = image.shape[1] / 2, image.shape[0] / 2
        self.view_box.setRange(
            xRange=(cx - vw / 2, cx + vw / 2), yRange=(cy - vh / 2, cy + vh / 2), padding=0, update=True
        )


class ImageGridWidget(QtWidgets.QWidget):
    """Per-env camera images tiled into one zoomable, clickable picture.

    Parameters
    ----------
    parent : QWidget, optional
    gap : int, optional
        Pixels between tiles (see :class:`Tiler`).
    gap_value : int or (int, int, int), optional
        Gap colour.
    label_min_px : int, optional
        Env labels are drawn only when a tile is at least this many screen
        pixels wide and high.
    max_labels : int, optional
        Env labels are drawn only when at most this many tiles are in view.

    Signals
    -------
    env_selected(int)
        An env was selected (clicked, or :meth:`select_env`).
    hover_changed(str)
        The hover readout changed, e.g. ``"env 12  x 30 y 41  rgb(255, 0, 0)"``
        (``""`` off the tiles).
    """

    env_selected = Signal(int)
    hover_changed = Signal(str)

    #: The status line's counters refresh at most this often (torn counts and geometry at once); the window
    #: sets it to its panels' period in force, so a budget that slows the panels slows these counters too.
    META_PERIOD_S = META_PERIOD_S
    display_changed = Signal(object)  # DisplayOptions, after a control change
    view_changed = Signal(object)  # ViewRequest: the part of the grid in view and its screen scale

    def __init__(
        self,
        parent: QtWidgets.QWidget | None = None,
        *,
        gap: int = 2,
        gap_value: int | tuple[int, int, int] = 40,
        label_min_px: int = 32,
        max_labels: int = 1024,
    ) -> None:
        super().__init__(parent)
        Tiler(1, 1, 1, 3, gap=gap, gap_value=gap_value)  # validates both (TilerError) before any frame
        self._gap = gap
        self._gap_value = gap_value
        # Automatic columns fit the view's shape (width over height, 3 digits) while the grid is fitted;
        # a zoom or pan by the user keeps the layout until "fit".
        self._aspect: float | None = None
        self._fitted = True
        # What is shown: the local front grid (set_frame), or a session's layout (show_image).
        self.tiler: Tiler | GridGeometry | None = None
        self._back: Tiler | None = None  # same geometry; copy_frame fills it, present swaps
        self._back_ready = False
        self._images: np.ndarray | None = None
        self._has_frame = False
        self._src_format = "auto"
        self._bottom_up = False
        self._selected: int | None = None
        self._hover: tuple[float, float] | None = None
        self._hover_text = ""
        self._meta: tuple[int, ...] | None = None
        self._meta_shown_at = 0.0
        self._meta_forms: tuple[str, ...] | None = None  # the counters' line, longest form first
        self._colour_slots: dict[int, int] = {}  # selected env -> colour slot, as the window last said
        #: The amber note before the counters: the image shown is old (see set_stale); None: it is not.
        self.stale_text: str | None = None
        self._needs_fit = False
        self._single: SingleEnvView | None = None
        self._frame: ImageFrame | None = None  # set by show_image (a session's grid)
        self._geometry: tuple[int, ...] | None = None
        self._layout_key = LayoutKey()
        self._display_rect: tuple[float, ...] | None = None  # where the session's grid was last placed
        self._selection: tuple[int, ...] = ()
        self._extra_highlights: list[QtWidgets.QGraphicsRectItem] = []
        self._last_view: ViewRequest | None = None
        self._needs_meta = True  # the status line's counters: at once after a geometry change ...
        self._meta_due = 0.0  # ... else at most every META_PERIOD_S
        #: Showing a session's grid: where exact bytes come from (hover readouts, 1:1 view, saved PNGs).
        self.pixel_reader: Callable[[int, int, int], PixelReading | None] | None = None
        self.snapshot_source: Callable[[int | None], np.ndarray | None] | None = None

        # --- view
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.ci.setContentsMargins(0, 0, 0, 0)
        # The session's buffer is as large as the screen shows it (or the tiles are shown larger than
        # their pixels): nearest, so drawing is a blit and each zoomed pixel stays a crisp square.
        self.graphics.setRenderHint(QtGui.QPainter.RenderHint.SmoothPixmapTransform, False)
        self.view_box: pg.ViewBox = self.graphics.addViewBox(lockAspect=True, invertY=True)
        self.view_box.disableAutoRange()
        self.image_item = ImageSurface()
        self.view_box.addItem(self.image_item)
        self.labels = _EnvLabels(label_min_px, max_labels)
        self.labels.setZValue(10)
        self.view_box.addItem(self.labels, ignoreBounds=True)
        # The primary selection's frame: solid, in its env's colour (set with the selection, _place_highlight).
        self.highlight = QtWidgets.QGraphicsRectItem()
        self.highlight.setBrush(Qt.BrushStyle.NoBrush)
        self.highlight.setZValue(20)
        self.highlight.setVisible(False)
        self.view_box.addItem(self.highlight, ignoreBounds=True)
        self.badges = _Badges()
        self.badges.setZValue(15)
        self.view_box.addItem(self.badges, ignoreBounds=True)
        self.view_box.sigRangeChanged.connect(self._update_labels)
        self.view_box.sigRangeChanged.connect(self._rehover)
        self.view_box.sigResized.connect(self._update_labels)
        self.view_box.sigResized.connect(self._on_view_resized)
        self.view_box.sigRangeChangedManually.connect(self._on_user_zoom)
        #: paints the view (image and overlays) in place of the scene: see GridCanvas
        self.canvas = GridCanvas(
            self.graphics,
            self.image_item,
            lambda: [self.labels, self.badges, self.highlight, *self._extra_highlights],
        )
        scene = self.graphics.scene()
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        scene.sigMouseClicked.connect(self._on_mouse_clicked)
        self.graphics.viewport().installEventFilter(self)

        # --- controls
        self.columns_spin = QtWidgets.QSpinBox()
        # Any count until the first grid says its limit: a count asked for before the first image (`--columns`,
        # the saved one) was clamped to 0 ("auto") and lost.
        self.columns_spin.setRange(0, MAX_COLUMNS_ASKED)
        self.columns_spin.setSpecialValueText("auto")
        self.columns_spin.setToolTip("tiles per row (auto: the count that shows the tiles largest in the view)")
        self.flip_check = QtWidgets.QCheckBox("flip")
        self.flip_check.setToolTip("flip every image upside down (on top of the header's bottom-up flag)")
        self.channel_combo = QtWidgets.QComboBox()
        self.channel_combo.addItems(["as-is", "swap R↔B"])
        self.alpha_check = QtWidgets.QCheckBox("alpha")
        self.alpha_check.setToolTip(ALPHA_TIP)
        self.reset_button = QtWidgets.QPushButton("fit")
        self.reset_button.setToolTip("fit the whole grid in the view (Ctrl+0)")
        self.single_button = QtWidgets.QPushButton("1:1")
        self.single_button.setToolTip("the selected env at its own pixel size (Ctrl+1, or double-click a tile)")
        self.columns_spin.valueChanged.connect(self._on_columns_changed)
        self.flip_check.toggled.connect(self._retile)
        self.channel_combo.currentIndexChanged.connect(self._retile)
        self.alpha_check.toggled.connect(self._on_alpha_toggled)
        self.reset_button.clicked.connect(self.reset_zoom)
        self.single_button.clicked.connect(self.open_single_env_view)

        controls = QtWidgets.QHBoxLayout()
        controls.addWidget(QtWidgets.QLabel("columns"))
        controls.addWidget(self.columns_spin)
        controls.addWidget(self.flip_check)
        self.channel_combo.setToolTip("channel order: as the header says, or red and blue swapped")
        controls.addWidget(self.channel_combo)
        controls.addWidget(self.alpha_check)
        controls.addStretch(1)
        controls.addWidget(self.reset_button)
        controls.addWidget(self.single_button)

        # Plain text (errors are shown as they are); a new counter repaints the line, never the window's layout.
        self.status_label = TextLine("no images", tooltip_is_text=True)
        self.hover_label = TextLine(tooltip_is_text=True)  # shorter forms where the dock is narrow
        for label in (self.status_label, self.hover_label):
            # A minimum of its own, so the text's width is not the layout's minimum: counters that gain
            # digits or a long readout must not widen the window (past a 1280 px screen). Cut, not wrapped,
            # when the dock is narrower (the status line elided); the status line's whole text is its tooltip.
            label.setMinimumWidth(1)
        status = QtWidgets.QHBoxLayout()
        status.addWidget(self.status_label, 1)
        status.addWidget(self.hover_label)

        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(controls)
        layout.addWidget(self.graphics, 1)
        layout.addLayout(status)

    # ------------------------------------------------------------ frames
    def display_options(self) -> DisplayOptions:
        """The controls' current values as plain :class:`DisplayOptions`."""
        return DisplayOptions(
            columns=self.columns_spin.value() or None,
            flip_rows=self.flip_check.isChecked(),
            swap_rb=self.channel_combo.currentIndex() == 1,
            show_alpha=self.alpha_check.isChecked(),
            view_aspect=self._aspect,
        )

    def show_image(self, image: ImageFrame, torn: int = 0) -> None:
        """Show a session's grid (one ``setImage``; no copy) and its counters.

        The grid and its layout belong to the session and stay valid until
        its next step that brings a new image; the widget keeps no copy.
        A change of geometry (envs, image size, columns, alpha) re-fits the view.
        """
        t = image.layout
        key = self._layout_key(t)
        self._frame = image
        self.tiler = t
        self._back = None
        self._images = None
        self._has_frame = True
        self._src_format = image.src_format
        self._bottom_up = image.bottom_up
        if key != self._geometry:
            new_envs = self._geometry is None or self._geometry[0] != t.num_envs
            self._geometry = key
            self._sync_columns_spin()
            self._sync_alpha(t.channels)
            self.labels.set_tiler(t)
            self.badges.set_tiler(t)
            self._update_labels()
            if new_envs:
                self._selection = tuple(e for e in self._selection if e < t.num_envs)
                if self._selected is not None and self._selected >= t.num_envs:
                    self._selected = None
            self._needs_fit = True
            self._needs_meta = True
        rect = image.display_rect()
        if rect != self._display_rect:
            self._display_rect = rect
            self.image_item.set_rect(QtCore.QRectF(*rect))
        self._show()
        # The counters' line is text: re-laid out on every change, so at most a few times a second.
        now = time.monotonic()
        if self._needs_meta or now >= self._meta_due:
            self._needs_meta = False
            self._meta_due = now + self.META_PERIOD_S
            self.set_meta(image.image_seq, image.image_frame_seq, torn)

    def clear_image(self, text: str = "no images") -> None:
        """Show nothing (detached, or an engine without an image region) and say why."""
        self._frame = None
        self._geometry = None
        self._display_rect = None
        self._needs_meta = True
        self.tiler = None
        self._back = None
        self._has_frame = False
        self.image_item.clear()
        self.labels.set_tiler(None)
        self.badges.set_tiler(None)
        self.highlight.setVisible(False)
        for item in self._extra_highlights:
            item.setVisible(False)
        self._meta = None
        self.stale_text = None
        self._status(text)

    def set_frame(self, images: np.ndarray, meta: FrameMeta | Mapping[str, Any] | Any | None = None) -> None:
        """Show one batch of images: :meth:`copy_frame` then :meth:`present`.

        Parameters
        ----------
        images : numpy.ndarray
            ``(n, h, w, c)`` uint8 (``c`` 1, 3 or 4), or ``(n, h, w)`` gray. A
            new shape re-plans the grid; the same shape reuses it. The array
            is kept (not copied) so that control changes can re-tile it; pass
            a buffer you own, not a view of a live mapping.
        meta : FrameMeta or mapping or object, optional
            ``src_format`` and ``bottom_up`` decide decoding; ``image_seq``,
            ``image_frame_seq`` and ``torn`` (when all present) update the
            status line. Missing fields keep their defaults.

        Raises
        ------
        TilerError
            The images cannot be tiled (wrong type, dtype, shape or format).
        ImageGridError
            A status counter in ``meta`` is not a non-negative integer.
        """
        self.copy_frame(images, meta)
        self._images = images
        self.present(meta)

    def copy_frame(self, images: np.ndarray, meta: FrameMeta | Mapping[str, Any] | Any | None = None) -> None:
        """Tile ``images`` into the back grid without showing them or keeping a reference.

        This is the only read of ``images``, so it can run as a seqlock image
        sink straight over a read-only mapping: call :meth:`present` once the
        copy is known to be consistent. The grids are double-buffered, so a
        torn copy that is never presented is never shown either: the front
        grid keeps the last good frame. Control changes made after a
        ``copy_frame`` apply from the next frame.

        Parameters and errors are those of :meth:`set_frame` (``meta`` is read
        for ``src_format`` and ``bottom_up`` only).
        """
        if not isinstance(images, np.ndarray) or images.ndim not in (3, 4) or images.dtype != np.uint8:
            raise TilerError("images: expected an (n, h, w[, c]) uint8 numpy array")
        n, h, w = images.shape[:3]
        c = images.shape[3] if images.ndim == 4 else 1
        src_format = _meta_field(meta, "src_format", "auto")
        source_format(src_format)  # raises TilerError for a name that is no format
        t = self.tiler
        if t is None or (t.num_envs, t.height, t.width, t.channels) != (n, h, w, c):
            t = self._configure(n, h, w, c)
        self._src_format = src_format
        self._bottom_up = bool(_meta_field(meta, "bottom_up", False))
        self._images = None
        assert self._back is not None
        self._tile(self._back, images)
        self._back_ready = True
        self._has_frame = True

    def present(self, meta: FrameMeta | Mapping[str, Any] | Any | None = None) -> None:
        """Show the grid as last tiled (one ``setImage``) and update the status line from ``meta``.

        Raises
        ------
        ImageGridError
            A status counter in ``meta`` is not a non-negative integer.
        """
        if self._back_ready and self._back is not None and self.tiler is not None:
            self.tiler, self._back = self._back, self.tiler
            self._back_ready = False
        self._show()
        seq = _meta_field(meta, "image_seq", None)
        frame_seq = _meta_field(meta, "image_frame_seq", None)
        torn = _meta_field(meta, "torn", None)
        if seq is not None and frame_seq is not None and torn is not None:
            self.set_meta(seq, frame_seq, torn)

    def _tile(self, t: Tiler, images: np.ndarray) -> np.ndarray:
        return t.tile(
            images,
            src_format=self._src_format,
            flip_rows=self._bottom_up != self.flip_check.isChecked(),
            swap_rb=self.channel_combo.currentIndex() == 1,
            show_alpha=self.alpha_check.isChecked(),
        )

    def _show(self) -> None:
        t = self.tiler
        if t is None or not self._has_frame:
            return
        frame = self._frame
        grid = frame.grid if frame is not None else t.grid  # type: ignore[union-attr]
        self.image_item.set_image(grid, frame.copied_part() if frame is not None else None)
        if frame is None:
            self.image_item.set_rect(QtCore.QRectF(0, 0, grid.shape[1], grid.shape[0]))
            self._display_rect = None  # placed here, not by show_image
        if self._needs_fit:
            self._needs_fit = False
            self._place_highlight()
            self.reset_zoom()
        if self._single is not None and self._single.isVisible():
            env = self._selected if self._selected is not None else 0
            tile = self._exact_tile(env)
            if tile is not None:
                self._single.set_image(env, tile)
        if self._hover is not None:
            self._set_hover_text(self.readout_at(*self._hover))

    def _retile(self, *_: object) -> None:
        """Apply a control change: re-tile the kept batch (if any) and show it.

        Showing a session's grid, the widget only says what changed
        (``display_changed``); the session copies the images again.
        """
        self.display_changed.emit(self.display_options())
        if self._frame is not None:
            return
        t = self.tiler
        if not isinstance(t, Tiler) or not self._has_frame:
            return
        if self._images is not None:
            self._tile(t, self._images)
        self._show()

    def _configure(self, n: int, h: int, w: int, c: int) -> Tiler:
        wanted = self.columns_spin.value() or None
        fit = self._aspect
        try:
            tiler = Tiler(n, h, w, c, columns=wanted, gap=self._gap, gap_value=self._gap_value, aspect=fit)
        except TilerError:
            if wanted is None:
                raise
            tiler = Tiler(n, h, w, c, gap=self._gap, gap_value=self._gap_value, aspect=fit)
        self.tiler = tiler
        self._back = Tiler(
            n, h, w, c, columns=tiler.columns_setting, gap=self._gap, gap_value=self._gap_value, aspect=fit
        )
        self._back_ready = False
        self._sync_columns_spin()
        self._sync_alpha(c)
        self.labels.set_tiler(tiler)
        self.badges.set_tiler(tiler)
        self._update_labels()
        self._selection = tuple(e for e in self._selection if e < n)
        if self._selected is not None and self._selected >= n:
            self._selected = None
        self._needs_fit = True
        self._has_frame = False
        return tiler

    def _sync_alpha(self, channels: int) -> None:
        """The alpha box does something only for 4-channel images: greyed out, and saying why, for others."""
        has_alpha = channels == 4
        self.alpha_check.setEnabled(has_alpha)
        plural = "" if channels == 1 else "s"
        self.alpha_check.setToolTip(
            ALPHA_TIP if has_alpha else f"the images have no alpha channel ({channels} channel{plural})"
        )

    def _sync_columns_spin(self) -> None:
        t = self.tiler
        if t is None:
            return
        blocker = QtCore.QSignalBlocker(self.columns_spin)
        self.columns_spin.setRange(0, t.max_columns())
        self.columns_spin.setValue(t.columns_setting or 0)
        del blocker

    def _on_alpha_toggled(self, checked: bool) -> None:
        if self._frame is not None:
            self._retile()
            return
        try:
            self._retile()
        except TilerError as err:  # an RGBA grid over the size limit: stay RGB
            blocker = QtCore.QSignalBlocker(self.alpha_check)
            self.alpha_check.setChecked(not checked)
            del blocker
            self._status(str(err))
            self._meta = None

    def _on_columns_changed(self, value: int) -> None:
        t = self.tiler
        if self._frame is not None:
            self.display_changed.emit(self.display_options())
            return
        if not isinstance(t, Tiler):
            return
        try:
            t.columns = value or None
            if self._back is not None:
                self._back.columns = value or None
        except TilerError as err:  # over the size limit with the current channels
            self._sync_columns_spin()
            self._status(str(err))
            self._meta = None
            return
        self._relaid(t)
        self.reset_zoom()
        self._update_labels()

    def _relaid(self, t: Tiler) -> None:
        """Show the local grid in its new layout (labels, badges, selection, tiles)."""
        self.labels.set_tiler(t)
        self.badges.set_tiler(t)
        self._place_highlight()
        self._retile()

    def _update_labels(self, *_: object) -> None:
        px = self.view_box.viewPixelSize()
        rect = self.view_box.viewRect()
        self.labels.set_view(rect, px[0], px[1])
        if px[0] > 0 and px[1] > 0:
            view = ViewRequest(rect.left(), rect.top(), rect.right(), rect.bottom(), 1.0 / max(px[0], px[1]))
            if view != self._last_view:
                self._last_view = view
                self.view_changed.emit(view)

    @property
    def view_request(self) -> ViewRequest | None:
        """The part of the grid in view and its screen scale, as last told to ``view_changed``."""
        return self._last_view

    # ------------------------------------------------------------ status
    def set_meta(self, image_seq: int, image_frame_seq: int, torn: int) -> None:
        """Update the status line: image sequence counters and torn copies skipped.

        Raises
        ------
        ImageGridError
            A value is not a non-negative integer.
        """
        counts = (_count("image_seq", image_seq), _count("image_frame_seq", image_frame_seq), _count("torn", torn))
        t = self.tiler
        geometry = (t.num_envs, t.width, t.height) if t is not None else ()
        if counts + geometry == self._meta:
            return
        now = time.monotonic()
        same_shape = self._meta is not None and self._meta[2:] == counts[2:] + geometry
        if same_shape and now - self._meta_shown_at < self.META_PERIOD_S:
            return  # a counter that moves every frame is read at 5 Hz: a repaint per frame is waste
        self._meta_shown_at = now
        self._meta = counts + geometry
        text = f"image_seq {counts[0]}  image_frame_seq {counts[1]}  torn copies skipped {counts[2]}"
        if t is not None:
            text = f"{t.num_envs} envs {t.width}x{t.height}  {text}"
        # Shorter forms for a narrow dock, or beside the hover readout: the counts stay whole.
        medium = f"image_seq {counts[0]}  image_frame_seq {counts[1]}  torn {counts[2]}"
        self._meta_forms = (text, medium, f"image_seq {counts[0]}  torn {counts[2]}")
        self._render_meta()

    def set_stale(self, text: str | None) -> None:
        """Say, in amber before the counters, that the image shown is old (``None``: it is not).

        The window's words (``no new image for 12 s (the Camera service is off)``):
        a grid that kept its last images looked live with the engine's camera off.
        """
        if text != self.stale_text:
            self.stale_text = text
            self._render_meta()

    def _render_meta(self) -> None:
        forms = self._meta_forms
        if forms is None:
            return
        stale = self.stale_text
        if stale is not None:
            forms = (*(f"{stale}  ·  {f}" for f in forms), stale)  # the note is what must show
        self.status_label.setText(*forms)
        style = f"color: {pal.WARN};" if stale is not None else ""
        if self.status_label.styleSheet() != style:
            self.status_label.setStyleSheet(style)

    def _status(self, text: str) -> None:
        self._meta_forms = None
        if self.status_label.styleSheet():
            self.status_label.setStyleSheet("")
        self.status_label.setText(text)  # its tooltip follows: the whole line, when it is cut

    # ------------------------------------------------------------ view
    #: Margin around a fitted grid, a fraction of its size on each side.
    FIT_PADDING = 0.02

    def reset_zoom(self) -> None:
        """Fit the whole grid in the view (at exactly one screen pixel per pixel where only the margin is in the way).

        A grid that fits at full size but not with its margin is shown at full
        size, centred, without the margin: a shrink by a few percent would
        blur every tile and cost a resampling per frame.
        """
        t = self.tiler
        self._fitted = True
        if t is None:
            return
        gw, gh = t.grid_width, t.grid_height
        vw, vh = self.view_box.width(), self.view_box.height()
        pad = 1.0 + 2.0 * self.FIT_PADDING
        if vw > 0 and vh > 0 and min(vw / gw, vh / gh) >= 1.0 > min(vw / (gw * pad), vh / (gh * pad)):
            cx, cy = gw / 2, gh / 2
            self.view_box.setRange(xRange=(cx - vw / 2, cx + vw / 2), yRange=(cy - vh / 2, cy + vh / 2), padding=0)
            return
        z = min(vw / (gw * pad), vh / (gh * pad)) if vw > 0 and vh > 0 else 0.0
        pitch = t.width + t.gap
        if 0.0 < z < 1.0 and pitch * z >= 2.0 and t.height == t.width:
            # Shown smaller than their pixels, the tiles are shrunk by the session to a whole number of screen
            # pixels a tile (plus a one-pixel gap). Fit at the zoom where a tile's pitch is exactly that
            # number, so the shrunk grid lands on the screen pixel for pixel: drawn as a blit, not scaled
            # again by a few percent (which repeated a row or column of pixels every few dozen).
            z = math.floor(pitch * z + 1e-6) / pitch
        elif z > 1.0:
            # Shown larger than their pixels, the tiles are scaled by Qt (nearest). At the view's exact size a
            # pitch fell between two screen pixels and alternated (104 and 105 px for 7 envs of 64x64). Fit at
            # the zoom that puts the columns' pitch on whole pixels, and the rows' too where one zoom does both
            # at most 5 % smaller (a multiple of 1/gcd of the two pitches; square tiles: always).
            pitch_y = t.height + t.gap
            z_x = math.floor(pitch * z + 1e-6) / pitch
            g = math.gcd(pitch, pitch_y)
            z_xy = math.floor(g * z + 1e-6) / g
            z = z_xy if z_xy >= 0.95 * z_x and z_xy >= 1.0 else z_x
        else:
            self.view_box.setRange(QtCore.QRectF(0, 0, gw, gh), padding=self.FIT_PADDING)
            return
        cx, cy = gw / 2, gh / 2
        hw, hh = vw / (2 * z), vh / (2 * z)
        self.view_box.setRange(xRange=(cx - hw, cx + hw), yRange=(cy - hh, cy + hh), padding=0)

    def _view_aspect(self) -> float | None:
        """The view's width over height to 3 digits (``None`` before it is laid out)."""
        vw, vh = self.view_box.width(), self.view_box.height()
        if vw < 16 or vh < 16:
            return None
        return float(f"{vw / vh:.3g}")

    def _on_user_zoom(self, *_: object) -> None:
        self._fitted = False

    def _on_view_resized(self, *_: object) -> None:
        """Keep a fitted grid fitted; with automatic columns, re-plan them for the view's new shape."""
        if not self._fitted:
            return
        aspect = self._view_aspect()
        if aspect != self._aspect:
            self._aspect = aspect
            if not isinstance(self.tiler, Tiler):  # a session's grid, or none yet: the session re-plans
                self.display_changed.emit(self.display_options())  # (a new layout re-fits when it comes)
            elif self.tiler.columns_setting is None:
                t, before = self.tiler, self.tiler.columns
                t.aspect = aspect
                if self._back is not None:
                    self._back.aspect = aspect
                if t.columns != before:
                    self._relaid(t)
        self.reset_zoom()

    def env_at_scene(self, pos: QtCore.QPointF) -> tuple[int, int, int] | None:
        """``(env, px, py)`` under a scene position, or ``None`` off the tiles."""
        if self.tiler is None:
            return None
        p = self.view_box.mapSceneToView(pos)
        return self.tiler.env_at(p.x(), p.y())

    def readout_at(self, x: float, y: float) -> str:
        """Hover readout for grid pixel ``(x, y)``: ``"env 12  x 30 y 41  rgb(255, 0, 0)"``.

        ``x`` and ``y`` in the text are inside the env's tile as displayed;
        the colour is the displayed pixel (``rgba(...)`` when alpha is shown).
        Empty off the tiles.
        """
        t = self.tiler
        if t is None or not self._has_frame:
            return ""
        hit = t.env_at(x, y)
        if hit is None:
            return ""
        env, px, py = hit
        changes = []
        if self.flip_check.isChecked():
            changes.append("rows flipped")
        if self.channel_combo.currentIndex() == 1:
            changes.append("R↔B swapped")
        note = f"  ({', '.join(changes)} for display)" if changes else ""
        if self._frame is not None:
            # A session's grid: read the segment's exact bytes, never the (possibly downscaled) display buffer.
            reading = self.pixel_reader(env, px, py) if self.pixel_reader is not None else None
            if reading is None:
                return f"env {env}  x {px} y {py}"
            kind = (ImageFormat.RGBA if len(reading.shown) == 4 else ImageFormat.RGB).label
            # Rows shown flipped: the row as stored too, where the value was read (y 6 read the ground at row 57).
            at = f"y {py}" if reading.row is None else f"y {py} (stored row {reading.row})"
            text = f"env {env}  x {px} {at}  shown {kind}({', '.join(str(v) for v in reading.shown)})"
            if (reading.format, reading.stored) != (kind, reading.shown):
                text += f"  stored {reading.format}({', '.join(str(v) for v in reading.stored)})"
            return text + note
        x0, y0 = t.tile_origin(env)
        pixel = t.grid[y0 + py, x0 + px].tolist()  # type: ignore[union-attr]
        kind = (ImageFormat.RGBA if len(pixel) == 4 else ImageFormat.RGB).label
        return f"env {env}  x {px} y {py}  shown {kind}({', '.join(str(v) for v in pixel)})" + note

    def _set_hover_text(self, text: str) -> None:
        if text == self._hover_text:
            return
        self._hover_text = text
        # Narrow (at 1280x800 with swap on it read "… (R↔B swap"): without the display note, then without the
        # stored value; the whole readout in the tooltip.
        forms = [text]
        for cut in ("  (", "  stored "):
            head = forms[-1].split(cut)[0]
            if head != forms[-1]:
                forms.append(head)
        self.hover_label.setText(*forms)
        self.hover_changed.emit(text)

    def _on_mouse_moved(self, pos: QtCore.QPointF) -> None:
        if not self.view_box.sceneBoundingRect().contains(pos):
            self._hover = None
            self._set_hover_text("")
            return
        p = self.view_box.mapSceneToView(pos)
        self._hover = (p.x(), p.y())
        self._set_hover_text(self.readout_at(p.x(), p.y()))

    def _rehover(self, *_: object) -> None:
        """The view moved under a resting pointer (a pan, a zoom, a fit): read the pixel now under it.

        After a drag-pan the readout named the pixel grabbed, not the one under the pointer, until it moved.
        """
        if self._hover is None:
            return
        viewport = self.graphics.viewport()
        at = viewport.mapFromGlobal(QtGui.QCursor.pos())
        if not viewport.rect().contains(at):
            return
        self._on_mouse_moved(self.graphics.mapToScene(at))

    def _on_mouse_clicked(self, event: Any) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        hit = self.env_at_scene(event.scenePos())
        if hit is None:
            return
        self.select_env(hit[0])
        if event.double():
            self.open_single_env_view()

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:
        if event.type() == QtCore.QEvent.Type.Leave and watched is self.graphics.viewport():
            self._hover = None
            self._set_hover_text("")
        return super().eventFilter(watched, event)

    # ------------------------------------------------------------ selection
    @property
    def selected_env(self) -> int | None:
        """The selected env, or ``None``."""
        return self._selected

    def select_env(self, env: int | None) -> None:
        """Select ``env`` (highlight it, follow it in the 1:1 view) and emit ``env_selected``.

        ``None`` clears the selection.

        Raises
        ------
        TilerError
            ``env`` is out of range, or no images were shown yet.
        """
        if env is None:
            self._selected = None
            self._selection = ()
            self._place_highlight()
            return
        if self.tiler is None:
            raise TilerError("env: no images shown yet")
        self.tiler.tile_origin(env)  # validates
        self._selected = int(env)
        self._selection = (*(e for e in self._selection if e != self._selected), self._selected)
        if not QtWidgets.QApplication.keyboardModifiers() & Qt.KeyboardModifier.ControlModifier:
            self._selection = (self._selected,)
        self._place_highlight()
        if self._single is not None and self._single.isVisible():
            tile = self._exact_tile(self._selected)
            if tile is not None:
                self._single.set_image(self._selected, tile)
        self.env_selected.emit(self._selected)

    @property
    def selection(self) -> tuple[int, ...]:
        """Every highlighted env (the primary selection last)."""
        return self._selection

    def set_selection(self, envs: tuple[int, ...] | list[int], colour_slots: Mapping[int, int] | None = None) -> None:
        """Highlight every env in ``envs`` (out-of-range ones are dropped); the last is the primary.

        ``colour_slots``: each env's colour slot (``History.colour_slot``: the curves' and the Inspector's);
        an env without one is coloured by its place in ``envs``.
        """
        t = self.tiler
        limit = t.num_envs if t is not None else 1 << 31
        self._selection = tuple(int(e) for e in envs if 0 <= int(e) < limit)
        self._selected = self._selection[-1] if self._selection else None
        self._colour_slots = dict(colour_slots or {})
        self._place_highlight()

    def set_badges(self, flags: Mapping[int, tuple[str, ...]]) -> None:
        """Mark tiles flagged by the session's image checks (env -> kinds: constant, duplicate, frozen)."""
        if self.badges.set_flags(flags):
            self.badges.setToolTip(
                "image checks: "
                + "; ".join(f"env {e}: {', '.join(k)}" for e, k in sorted(flags.items())[:20])
                + ("; …" if len(flags) > 20 else "")
            )

    def _place_highlight(self) -> None:
        """Frame every selected env in its colour (:func:`~lucky_monitor.ui.palette.env_colour` of its place in
        the selection: its curve's in the plots): the primary solid, the others dashed."""
        t, env = self.tiler, self._selected
        slots = {e: self._colour_slots.get(e, i) for i, e in enumerate(self._selection)}
        others = [e for e in self._selection if e != env]
        while len(self._extra_highlights) < len(others):
            item = QtWidgets.QGraphicsRectItem()
            item.setBrush(Qt.BrushStyle.NoBrush)
            item.setZValue(19)
            self.view_box.addItem(item, ignoreBounds=True)
            self._extra_highlights.append(item)
        for i, item in enumerate(self._extra_highlights):
            if t is None or i >= len(others):
                item.setVisible(False)
                continue
            x0, y0 = t.tile_origin(others[i])
            item.setRect(QtCore.QRectF(x0, y0, t.width, t.height))
            _set_pen(item, pal.env_colour(slots[others[i]]), 1.5, Qt.PenStyle.DashLine)
            item.setVisible(True)
        if t is None or env is None:
            self.highlight.setVisible(False)
            return
        x0, y0 = t.tile_origin(env)
        self.highlight.setRect(QtCore.QRectF(x0, y0, t.width, t.height))
        _set_pen(self.highlight, pal.env_colour(slots.get(env, 0)), 2.0, Qt.PenStyle.SolidLine)
        self.highlight.setVisible(True)

    # ------------------------------------------------------------ single env view
    def open_single_env_view(self) -> SingleEnvView:
        """Show (creating once) the 1:1 view of the selected env (env 0 if none)."""
        first = self._single is None
        if self._single is None:
            self._single = SingleEnvView(self)
        view = self._single
        t = self.tiler
        if t is not None and self._has_frame:
            env = self._selected if self._selected is not None else 0
            tile = self._exact_tile(env)
            if tile is not None:
                view.set_image(env, tile)
            view.resize(min(t.width + 16, 1200), min(t.height + 48, 900))
        view.show()
        if first:  # over the grid's centre (without a window manager it opened at 0,0, over the menu bar)
            centre = self.mapToGlobal(self.rect().center())
            view.move(centre.x() - view.width() // 2, centre.y() - view.height() // 2)
        view.raise_()
        view.activateWindow()  # the keyboard too: without a window manager Esc still went to the main window
        return view

    @property
    def single_env_view(self) -> SingleEnvView | None:
        """The 1:1 view, once opened."""
        return self._single

    # ------------------------------------------------------------ saving
    def save_grid_png(self, path: str | PathLike[str]) -> None:
        """Write the grid as shown (after flips, swaps and alpha choice) to a PNG file.

        Raises
        ------
        ImageGridError
            No images shown yet, or the file cannot be written.
        """
        if self.tiler is None or not self._has_frame:
            raise ImageGridError("no images shown yet")
        if self._frame is not None:
            grid = self.snapshot_source(None) if self.snapshot_source is not None else None
            if grid is None:
                raise ImageGridError("no consistent copy of the images could be taken (the engine kept writing)")
            _save_png(grid, path)
            return
        _save_png(self.tiler.grid, path)  # type: ignore[union-attr]

    def save_env_png(self, env: int, path: str | PathLike[str]) -> None:
        """Write one env's tile as shown to a PNG file.

        Raises
        ------
        TilerError
            ``env`` is out of range.
        ImageGridError
            No images shown yet, or the file cannot be written.
        """
        if self.tiler is None or not self._has_frame:
            raise ImageGridError("no images shown yet")
        self.tiler.tile_origin(env)  # validates env
        tile = self._exact_tile(env)
        if tile is None:
            raise ImageGridError("no consistent copy of the images could be taken (the engine kept writing)")
        _save_png(tile, path)

    def _exact_tile(self, env: int) -> np.ndarray | None:
        """``env``'s tile as displayed at full resolution: the session's exact bytes, or the local grid."""
        if self._frame is not None:
            return self.snapshot_source(env) if self.snapshot_source is not None else None
        assert isinstance(self.tiler, Tiler)
        return self.tiler.tile_view(env)
