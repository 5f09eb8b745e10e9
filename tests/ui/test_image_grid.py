"""ImageGridWidget: pixels on screen, selection, hover, controls, PNGs, and a repaint soak."""

from __future__ import annotations

import dataclasses
import itertools
import math
import weakref

import numpy as np
import pytest
from PySide6 import QtCore, QtGui, QtWidgets

from lucky_monitor.core.session import DisplayOptions
from lucky_monitor.core.tiler import FrameMeta, Tiler, TilerError
from lucky_monitor.ui import palette as pal
from lucky_monitor.ui.image_grid import ImageGridError, ImageGridWidget, array_to_qimage
from tests.ui.ticks import image_frame, pixel_reader


def tile_center_on_viewport(widget: ImageGridWidget, env: int) -> QtCore.QPoint:
    t = widget.tiler
    x0, y0 = t.tile_origin(env)
    scene = widget.view_box.mapViewToScene(QtCore.QPointF(x0 + t.width / 2, y0 + t.height / 2))
    return widget.graphics.mapFromScene(scene)


def settle(widget: ImageGridWidget) -> None:
    """Let queued layout/index updates run once, then paint the view now."""
    QtWidgets.QApplication.processEvents()
    widget.graphics.viewport().repaint()


def viewport_rgb(widget: ImageGridWidget, point: QtCore.QPoint) -> tuple[int, int, int]:
    settle(widget)
    image = widget.graphics.viewport().grab().toImage()
    c = image.pixelColor(point)
    return c.red(), c.green(), c.blue()


def qimage_to_array(image: QtGui.QImage) -> np.ndarray:
    """Pixels of a QImage as (h, w, 3) RGB or (h, w, 4) RGBA uint8 (a copy)."""
    alpha = image.hasAlphaChannel()
    fmt = QtGui.QImage.Format.Format_RGBA8888 if alpha else QtGui.QImage.Format.Format_RGB888
    image = image.convertToFormat(fmt)
    c = 4 if alpha else 3
    raw = np.frombuffer(image.constBits(), np.uint8, count=image.bytesPerLine() * image.height())
    return (
        raw.reshape(image.height(), image.bytesPerLine())[:, : image.width() * c]
        .reshape(image.height(), image.width(), c)
        .copy()
    )


def test_set_frame_is_one_tile_and_one_set_image_wrapping_the_grid(grid_widget, monkeypatch):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (16, 32, 32, 3), dtype=np.uint8)
    grid_widget.set_frame(images)
    calls = {"tile": 0, "setImage": 0}
    tile, set_image = Tiler.tile, grid_widget.image_item.set_image

    def counting_tile(self, *a, **k):
        calls["tile"] += 1
        return tile(self, *a, **k)

    def counting_set_image(*a, **k):
        calls["setImage"] += 1
        return set_image(*a, **k)

    monkeypatch.setattr(Tiler, "tile", counting_tile)  # either buffer of the double-buffered grid
    monkeypatch.setattr(grid_widget.image_item, "set_image", counting_set_image)
    for _ in range(5):
        grid_widget.set_frame(images)
    assert calls == {"tile": 5, "setImage": 5}

    settle(grid_widget)
    # The grid is shown in place and converted once into the raster engine's native format,
    # so a paint is a blit: the QImage is Qt's own (never the grid's memory), pixel for pixel the grid.
    assert grid_widget.image_item.image.ctypes.data == grid_widget.tiler.grid.ctypes.data
    qimage = grid_widget.image_item.qimage
    assert qimage.format() == QtGui.QImage.Format.Format_RGB32
    bits = np.frombuffer(qimage.constBits(), np.uint8)
    assert bits.__array_interface__["data"][0] != grid_widget.tiler.grid.ctypes.data
    argb = bits.reshape(qimage.height(), qimage.bytesPerLine() // 4, 4)[:, : qimage.width()]
    np.testing.assert_array_equal(argb[..., 2::-1], grid_widget.tiler.grid)  # B,G,R,255 in memory


def test_copy_frame_then_present_keeps_no_reference(grid_widget, solid_images, monkeypatch):
    images = solid_images(6, 10, 12).copy()
    images.flags.writeable = False  # like a read-only view of the mapping
    calls = []
    set_image = grid_widget.image_item.set_image
    monkeypatch.setattr(grid_widget.image_item, "set_image", lambda *a, **k: (calls.append(1), set_image(*a, **k)))
    grid_widget.copy_frame(images, FrameMeta(src_format="rgb"))
    assert calls == []  # copied, not shown yet
    expected = images[4].copy()
    ref = weakref.ref(images)
    del images
    assert ref() is None, "copy_frame must not keep the source"
    grid_widget.present(FrameMeta(image_seq=8, image_frame_seq=4, torn=1))
    assert calls == [1]
    np.testing.assert_array_equal(grid_widget.tiler.tile_view(4), expected)
    assert grid_widget.status_label.text().endswith("torn copies skipped 1")
    assert viewport_rgb(grid_widget, tile_center_on_viewport(grid_widget, 4)) == tuple(solid_images(6, 1, 1)[4, 0, 0])


def test_set_frame_shows_each_env_in_its_tile(grid_widget, solid_images):
    images = solid_images(12, 24, 32)
    grid_widget.set_frame(images)
    for env in (0, 5, 11):
        assert viewport_rgb(grid_widget, tile_center_on_viewport(grid_widget, env)) == tuple(images[env, 0, 0])
    # BGR source, then the swap control undoes it
    grid_widget.set_frame(images, FrameMeta(src_format="bgr"))
    assert viewport_rgb(grid_widget, tile_center_on_viewport(grid_widget, 5)) == tuple(images[5, 0, 0, ::-1])
    grid_widget.channel_combo.setCurrentIndex(1)
    assert viewport_rgb(grid_widget, tile_center_on_viewport(grid_widget, 5)) == tuple(images[5, 0, 0])


def test_row_zero_is_at_the_top_and_flip_controls_work(grid_widget):
    images = np.zeros((4, 20, 20, 3), np.uint8)
    images[:, :10] = (250, 0, 0)  # top half red
    images[:, 10:] = (0, 0, 250)  # bottom half blue
    grid_widget.set_frame(images)
    buffers = {id(grid_widget.tiler), id(grid_widget._back)}

    def colour_at(y):
        scene = grid_widget.view_box.mapViewToScene(QtCore.QPointF(5.5, y))
        return viewport_rgb(grid_widget, grid_widget.graphics.mapFromScene(scene))

    assert colour_at(3.5) == (250, 0, 0) and colour_at(16.5) == (0, 0, 250)
    grid_widget.flip_check.setChecked(True)
    assert colour_at(3.5) == (0, 0, 250) and colour_at(16.5) == (250, 0, 0)
    # bottom-up storage flagged by the frame source and the flip toggle cancel out
    grid_widget.set_frame(images, {"bottom_up": True})
    assert colour_at(3.5) == (250, 0, 0)
    assert id(grid_widget.tiler) in buffers  # same shape: no new grid, only the two buffers swap


def test_click_selects_the_env_under_the_mouse(grid_widget, solid_images, qtbot):
    grid_widget.set_frame(solid_images(9, 16, 16))
    viewport = grid_widget.graphics.viewport()
    for env in (4, 8, 0):
        qtbot.wait(300)  # keep consecutive clicks from being taken as a double click
        with qtbot.waitSignal(grid_widget.env_selected, timeout=2000) as blocker:
            qtbot.mouseClick(viewport, QtCore.Qt.MouseButton.LeftButton, pos=tile_center_on_viewport(grid_widget, env))
        assert blocker.args == [env]
        assert grid_widget.selected_env == env
        x0, y0 = grid_widget.tiler.tile_origin(env)
        assert grid_widget.highlight.isVisible()
        assert grid_widget.highlight.rect() == QtCore.QRectF(x0, y0, 16, 16)


def test_scene_mapping_and_gaps(grid_widget, solid_images):
    grid_widget.set_frame(solid_images(9, 16, 16))
    vb = grid_widget.view_box
    hit = grid_widget.env_at_scene(vb.mapViewToScene(QtCore.QPointF(18 + 3.2, 18 + 7.9)))
    assert hit == (4, 3, 7)
    assert grid_widget.env_at_scene(vb.mapViewToScene(QtCore.QPointF(16.5, 5))) is None  # gap
    assert grid_widget.env_at_scene(vb.mapViewToScene(QtCore.QPointF(-3, 5))) is None  # outside


def test_hover_readout(grid_widget, solid_images, qtbot):
    images = solid_images(9, 16, 16)
    images = images.copy()
    images[4, 7, 3] = (255, 0, 0)
    grid_widget.set_frame(images)
    assert grid_widget.readout_at(18 + 3, 18 + 7) == "env 4  x 3 y 7  shown rgb(255, 0, 0)"
    assert grid_widget.readout_at(16.5, 3) == ""

    target = grid_widget.graphics.mapFromScene(grid_widget.view_box.mapViewToScene(QtCore.QPointF(18 + 3.5, 18 + 7.5)))
    with qtbot.waitSignal(grid_widget.hover_changed, timeout=2000) as blocker:
        qtbot.mouseMove(grid_widget.graphics.viewport(), target)
    assert blocker.args == ["env 4  x 3 y 7  shown rgb(255, 0, 0)"]
    assert grid_widget.hover_label.text() == "env 4  x 3 y 7  shown rgb(255, 0, 0)"

    # the readout follows new frames while the mouse rests
    images[4, 7, 3] = (1, 2, 3)
    with qtbot.waitSignal(grid_widget.hover_changed, timeout=2000) as blocker:
        grid_widget.set_frame(images)
    assert blocker.args == ["env 4  x 3 y 7  shown rgb(1, 2, 3)"]

    grid_widget.alpha_check.setChecked(True)
    assert grid_widget.readout_at(18 + 3, 18 + 7) == "env 4  x 3 y 7  shown rgba(1, 2, 3, 255)"


def test_controls_replan_and_reformat(grid_widget, solid_images):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (10, 6, 8, 4), dtype=np.uint8)
    grid_widget.set_frame(images, {"src_format": "bgra"})
    t = grid_widget.tiler
    assert grid_widget.columns_spin.value() == 0 and grid_widget.columns_spin.text() == "auto"
    assert grid_widget.columns_spin.maximum() == 10

    grid_widget.columns_spin.setValue(5)
    assert t.columns == 5 and t.rows == 2
    assert grid_widget.image_item.image.shape == t.grid.shape == (2 * 8 - 2, 5 * 10 - 2, 3)
    np.testing.assert_array_equal(t.tile_view(7), images[7, :, :, 2::-1])

    grid_widget.alpha_check.setChecked(True)
    assert t.grid.shape[2] == 4
    np.testing.assert_array_equal(t.tile_view(7), images[7][..., [2, 1, 0, 3]])
    settle(grid_widget)
    assert grid_widget.image_item.qimage.format() == QtGui.QImage.Format.Format_ARGB32_Premultiplied

    grid_widget.channel_combo.setCurrentIndex(1)
    np.testing.assert_array_equal(t.tile_view(7), images[7])
    grid_widget.columns_spin.setValue(0)
    assert t.columns_setting is None


def test_geometry_change_replans_and_clears_a_stale_selection(grid_widget, solid_images):
    grid_widget.set_frame(solid_images(16, 8, 8))
    grid_widget.select_env(15)
    grid_widget.set_frame(solid_images(4, 12, 10))
    assert (grid_widget.tiler.num_envs, grid_widget.tiler.height, grid_widget.tiler.width) == (4, 12, 10)
    assert grid_widget.selected_env is None and not grid_widget.highlight.isVisible()
    assert grid_widget.selection == ()
    with pytest.raises(TilerError):
        grid_widget.select_env(4)


def test_geometry_change_replans_and_bad_batches_are_refused(grid_widget, solid_images):
    grid_widget.set_frame(solid_images(16, 8, 8))
    grid_widget.set_frame(solid_images(4, 12, 10))
    assert (grid_widget.tiler.num_envs, grid_widget.tiler.height, grid_widget.tiler.width) == (4, 12, 10)
    assert grid_widget.selected_env is None and not grid_widget.highlight.isVisible()
    with pytest.raises(TilerError):
        grid_widget.select_env(4)
    # a bad batch is refused with a typed error and the widget keeps its state
    for bad in [np.zeros((4, 12, 10, 3), np.float32), [1, 2], np.zeros((4, 12), np.uint8)]:
        with pytest.raises(TilerError):
            grid_widget.set_frame(bad)
    with pytest.raises(TilerError):
        grid_widget.set_frame(solid_images(4, 12, 10), {"src_format": "yuv"})
    assert grid_widget.tiler.num_envs == 4


def test_bad_construction_is_a_typed_error(qtbot):
    for kw in [{"gap": -1}, {"gap_value": 300}, {"gap_value": (1, 2)}]:
        with pytest.raises(TilerError):
            ImageGridWidget(**kw)


def test_status_line(grid_widget, solid_images):
    grid_widget.set_frame(solid_images(4, 8, 8), FrameMeta(image_seq=10, image_frame_seq=5, torn=2))
    assert grid_widget.status_label.text().endswith("image_seq 10  image_frame_seq 5  torn copies skipped 2")
    grid_widget.set_meta(12, 6, 3)
    assert "image_seq 12  image_frame_seq 6  torn copies skipped 3" in grid_widget.status_label.text()
    for bad in [(-1, 0, 0), (0, "1", 0), (0, 0, 1.5)]:
        with pytest.raises(ImageGridError):
            grid_widget.set_meta(*bad)


def test_labels_are_cached_and_capped(grid_widget, solid_images):
    vp = grid_widget.graphics.viewport()
    grid_widget.set_frame(solid_images(16, 64, 64))
    settle(grid_widget)
    assert grid_widget.labels.last_drawn == 16
    paints = grid_widget.labels.paints
    for _ in range(20):
        grid_widget.set_frame(solid_images(16, 64, 64))
        vp.repaint()
    assert grid_widget.labels.paints == paints, "labels must not be repainted for new frames"
    # 1024 tiny tiles: too small on screen and too many, so no labels
    grid_widget.set_frame(solid_images(1024, 8, 8))
    settle(grid_widget)
    assert grid_widget.labels.last_drawn == 0
    # zoomed onto a few tiles, their labels come back
    grid_widget.view_box.setRange(QtCore.QRectF(0, 0, 30, 30), padding=0)
    settle(grid_widget)
    assert 0 < grid_widget.labels.last_drawn <= 16
    grid_widget.reset_zoom()
    vr = grid_widget.view_box.viewRange()
    assert vr[0][0] <= 0 and vr[0][1] >= grid_widget.tiler.grid_width


def test_a_label_is_drawn_only_inside_its_own_tile(grid_widget, solid_images):
    # 4-digit labels, tiles cut by the view's left edge: a label kept inside the view ran into the
    # next tile's, "1044" beside "1045" reading "10441045"
    grid_widget.set_frame(solid_images(2048, 16, 16))
    t = grid_widget.tiler
    pitch = t.width + t.gap
    for left in (pitch - 3, pitch - 1.5, 2 * pitch - 6):
        vb = grid_widget.view_box
        # the view's own shape, so its aspect lock keeps the left edge where it is put
        vb.setRange(QtCore.QRectF(left, 0, 5 * pitch, 5 * pitch * vb.height() / vb.width()), padding=0)
        settle(grid_widget)
        assert grid_widget.view_box.viewRange()[0][0] == pytest.approx(left)
        boxes = getattr(grid_widget.labels, "last_boxes", None)
        assert boxes, "tiles this large show labels"
        to_device = grid_widget.labels.deviceTransform(grid_widget.graphics.viewportTransform())
        for env, box in boxes:
            x0, y0 = t.tile_origin(env)
            tile = to_device.mapRect(QtCore.QRectF(x0, y0, t.width, t.height))
            assert box.right() <= tile.right() + 0.5, f"env {env}'s label runs past its tile"
        for i, (a, ra) in enumerate(boxes):
            for b, rb in boxes[i + 1 :]:
                assert not ra.intersects(rb), f"labels of envs {a} and {b} overlap"
        cut = {env for env, _ in boxes if t.tile_origin(env)[0] + t.width < left + 2}
        assert not cut, f"envs {sorted(cut)} show a label in a sliver of a tile"


def test_save_pngs_round_trip(grid_widget, tmp_path):
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, (5, 7, 9, 3), dtype=np.uint8)
    with pytest.raises(ImageGridError):
        grid_widget.save_grid_png(tmp_path / "none.png")
    grid_widget.set_frame(images, {"src_format": "bgr"})
    grid_widget.save_grid_png(tmp_path / "grid.png")
    grid_widget.save_env_png(3, tmp_path / "env3.png")
    grid = qimage_to_array(QtGui.QImage(str(tmp_path / "grid.png")))
    np.testing.assert_array_equal(grid, grid_widget.tiler.grid)
    env3 = qimage_to_array(QtGui.QImage(str(tmp_path / "env3.png")))
    np.testing.assert_array_equal(env3, images[3, :, :, ::-1])

    grid_widget.alpha_check.setChecked(True)
    grid_widget.save_env_png(1, tmp_path / "env1.png")
    env1 = qimage_to_array(QtGui.QImage(str(tmp_path / "env1.png")))
    assert env1.shape == (7, 9, 4) and (env1[..., 3] == 255).all()
    np.testing.assert_array_equal(env1[..., :3], images[1, :, :, ::-1])

    with pytest.raises(TilerError):
        grid_widget.save_env_png(5, tmp_path / "x.png")
    with pytest.raises(ImageGridError):
        grid_widget.save_grid_png(tmp_path / "no-such-dir" / "grid.png")


def test_array_to_qimage_owns_its_pixels():
    src = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    src.flags.writeable = False
    image = array_to_qimage(src)
    image.setPixelColor(0, 0, QtGui.QColor(9, 9, 9))  # a non-const call must not touch src
    assert tuple(src[0, 0]) == (0, 1, 2)
    np.testing.assert_array_equal(qimage_to_array(image)[1:], src[1:])
    with pytest.raises(ImageGridError):
        array_to_qimage(np.zeros((4, 5), np.uint8))


def test_single_env_view_follows_selection_and_frames(grid_widget, solid_images):
    images = solid_images(6, 20, 30).copy()
    grid_widget.set_frame(images)
    grid_widget.select_env(2)
    view = grid_widget.open_single_env_view()
    assert view.isVisible() and view.env == 2
    # Over the grid's centre at first (it opened at 0,0 over the menu bar without a window manager).
    centre = grid_widget.mapToGlobal(grid_widget.rect().center())
    assert abs(view.geometry().center().x() - centre.x()) <= 2 and abs(view.geometry().center().y() - centre.y()) <= 2
    np.testing.assert_array_equal(view.image_item.image, images[2])
    images[2] = 7
    grid_widget.set_frame(images)
    np.testing.assert_array_equal(view.image_item.image, images[2])
    grid_widget.select_env(4)
    assert view.env == 4 and view.title.text().startswith("env 4")
    np.testing.assert_array_equal(view.image_item.image, images[4])
    # 1:1: the view range spans as many image pixels as the view has device pixels
    view.set_native_scale()
    (x0, x1), _ = view.view_box.viewRange()
    assert x1 - x0 == pytest.approx(view.view_box.width() * view.devicePixelRatioF(), rel=1e-6)


@pytest.mark.parametrize("keys", ["Escape", "Ctrl+W"])
def test_single_env_view_closes_from_the_keyboard(qtbot, grid_widget, solid_images, keys):
    """A bare X server gives the window no close button: Esc and Ctrl+W close it."""
    grid_widget.set_frame(solid_images(6, 20, 30))
    grid_widget.select_env(1)
    view = grid_widget.open_single_env_view()
    qtbot.waitExposed(view)
    key, mods = (
        (QtCore.Qt.Key.Key_Escape, QtCore.Qt.KeyboardModifier.NoModifier)
        if keys == "Escape"
        else (QtCore.Qt.Key.Key_W, QtCore.Qt.KeyboardModifier.ControlModifier)
    )
    qtbot.keyClick(view.graphics, key, mods)  # pressed where the focus is: the tile's view passes it up
    qtbot.waitUntil(lambda: not view.isVisible(), timeout=3000)


def test_single_env_view_takes_the_keyboard_when_it_opens(qtbot, grid_widget, solid_images, monkeypatch):
    """Without a window manager a new window is not given the focus: Esc went to the main window.

    Qt's offscreen platform activates every window it shows, so the request itself is counted too.
    """
    from lucky_monitor.ui.image_grid import SingleEnvView

    asked: list[object] = []
    real = SingleEnvView.activateWindow
    monkeypatch.setattr(SingleEnvView, "activateWindow", lambda self: (asked.append(self), real(self)))
    grid_widget.set_frame(solid_images(6, 20, 30))
    view = grid_widget.open_single_env_view()
    qtbot.waitUntil(lambda: QtWidgets.QApplication.activeWindow() is view, timeout=3000)
    view.close()
    grid_widget.activateWindow()
    qtbot.waitUntil(lambda: QtWidgets.QApplication.activeWindow() is grid_widget, timeout=3000)
    assert grid_widget.open_single_env_view() is view  # opened again over the main window: active again
    qtbot.waitUntil(lambda: QtWidgets.QApplication.activeWindow() is view, timeout=3000)
    assert asked == [view, view]


def test_repaint_soak(qtbot, solid_images):
    """20,000 setImage + repaint cycles: PySide6 6.12.0 dies here with none_dealloc."""
    widget = ImageGridWidget()
    qtbot.addWidget(widget)
    widget.resize(220, 180)
    widget.show()
    qtbot.waitExposed(widget)
    frames = [solid_images(4, 8, 8), solid_images(4, 8, 8)[::-1].copy()]
    viewport = widget.graphics.viewport()
    widget.set_frame(frames[1])
    settle(widget)
    renders = 0
    last = widget.image_item.qimage
    for i in range(20_000):
        widget.set_frame(frames[i & 1])
        viewport.repaint()
        if i % 500 == 0:
            QtWidgets.QApplication.processEvents()
        if widget.image_item.qimage is not last:
            renders += 1
            last = widget.image_item.qimage
    assert renders == 20_000
    np.testing.assert_array_equal(widget.tiler.tile_view(0), frames[1][0])


def test_torn_copy_never_reaches_the_screen(grid_widget):
    """copy_frame fills the back grid; only present() shows it, so a torn copy stays invisible."""
    good = np.full((4, 8, 8, 3), 200, np.uint8)
    torn = np.zeros((4, 8, 8, 3), np.uint8)
    grid_widget.set_frame(good)
    shown = grid_widget.image_item.image
    grid_widget.copy_frame(torn)  # the seqlock said: torn, so present() is never called
    assert grid_widget.image_item.image is shown
    x0, y0 = grid_widget.tiler.tile_origin(1)
    assert (grid_widget.tiler.grid[y0 : y0 + 8, x0 : x0 + 8] == 200).all()
    grid_widget.copy_frame(good)
    grid_widget.present()
    assert (grid_widget.tiler.grid[y0 : y0 + 8, x0 : x0 + 8] == 200).all()


# ---------------------------------------------------------------------------
# a session's grid: show_image with hand-made ImageFrames
# ---------------------------------------------------------------------------


def test_show_image_wraps_the_session_grid_and_refits_on_geometry_change(grid_widget, solid_images, monkeypatch):
    fits = []
    reset_zoom = grid_widget.reset_zoom
    monkeypatch.setattr(grid_widget, "reset_zoom", lambda: (fits.append(1), reset_zoom())[1])
    images = solid_images(16, 8, 8)
    frame = image_frame(images, image_seq=7, image_frame_seq=14)
    grid_widget.show_image(frame, torn=3)
    assert grid_widget.tiler is frame.layout
    assert grid_widget.image_item.image.ctypes.data == frame.grid.ctypes.data  # shown in place, not copied
    assert fits == [1]
    assert grid_widget.status_label.text() == "16 envs 8x8  image_seq 7  image_frame_seq 14  torn copies skipped 3"
    assert viewport_rgb(grid_widget, tile_center_on_viewport(grid_widget, 5)) == tuple(images[5, 0, 0])
    assert grid_widget.columns_spin.maximum() == frame.layout.max_columns()

    # Same geometry, the other buffer: no re-fit, the user's zoom stays.
    grid_widget.view_box.setRange(QtCore.QRectF(0, 0, 12, 12), padding=0)
    zoom = grid_widget.view_box.viewRange()
    grid_widget.show_image(image_frame(images[::-1].copy(), image_seq=8, image_frame_seq=16))
    assert fits == [1] and grid_widget.view_box.viewRange() == zoom
    assert viewport_rgb(grid_widget, tile_center_on_viewport(grid_widget, 0)) == tuple(images[15, 0, 0])

    # Other columns: re-fit, and the spin box shows what the session applied (without asking again).
    asked = []
    grid_widget.display_changed.connect(asked.append)
    two = image_frame(images, options=DisplayOptions(columns=2))
    grid_widget.show_image(two)
    assert fits == [1, 1] and grid_widget.columns_spin.value() == 2
    vr = grid_widget.view_box.viewRange()
    assert vr[0][0] <= 0 and vr[0][1] >= two.layout.grid_width and vr[1][1] >= two.layout.grid_height
    grid_widget.show_image(image_frame(images, options=DisplayOptions(show_alpha=True)))  # RGBA grid
    assert fits == [1, 1, 1] and grid_widget.columns_spin.value() == 0
    assert asked == []

    # Fewer envs: re-fit, and a selection past the end is dropped.
    grid_widget.select_env(15)
    small = image_frame(solid_images(4, 12, 10))
    grid_widget.show_image(small)
    assert fits == [1, 1, 1, 1]
    assert (grid_widget.tiler.num_envs, grid_widget.tiler.height, grid_widget.tiler.width) == (4, 12, 10)
    assert grid_widget.selected_env is None and grid_widget.selection == ()
    assert not grid_widget.highlight.isVisible()

    # Nothing to show: say why; the next image re-fits.
    grid_widget.clear_image("engine exports no images")
    assert grid_widget.status_label.text() == "engine exports no images"
    assert grid_widget.tiler is None and grid_widget.image_item.image is None
    assert grid_widget.readout_at(3, 3) == ""
    with pytest.raises(ImageGridError):
        grid_widget.save_grid_png("unused.png")
    grid_widget.show_image(small)
    assert fits == [1, 1, 1, 1, 1]


def test_controls_in_session_mode_ask_the_session_and_do_not_retile(grid_widget, solid_images, monkeypatch):
    frame = image_frame(solid_images(16, 8, 8))
    grid_widget.show_image(frame)
    before = frame.grid.copy()
    calls = {"tile": 0, "setImage": 0}
    tile, set_image = Tiler.tile, grid_widget.image_item.set_image

    def counting_tile(self, *a, **k):
        calls["tile"] += 1
        return tile(self, *a, **k)

    def counting_set_image(*a, **k):
        calls["setImage"] += 1
        return set_image(*a, **k)

    monkeypatch.setattr(Tiler, "tile", counting_tile)
    monkeypatch.setattr(grid_widget.image_item, "set_image", counting_set_image)
    asked: list[DisplayOptions] = []
    grid_widget.display_changed.connect(asked.append)

    a = grid_widget.display_options().view_aspect  # the view's shape, for automatic columns
    grid_widget.flip_check.setChecked(True)
    assert asked == [DisplayOptions(flip_rows=True, view_aspect=a)]
    grid_widget.channel_combo.setCurrentIndex(1)
    assert asked[-1] == DisplayOptions(flip_rows=True, swap_rb=True, view_aspect=a)
    grid_widget.alpha_check.setChecked(True)
    assert asked[-1] == DisplayOptions(flip_rows=True, swap_rb=True, show_alpha=True, view_aspect=a)
    grid_widget.columns_spin.setValue(2)
    assert asked[-1] == DisplayOptions(columns=2, flip_rows=True, swap_rb=True, show_alpha=True, view_aspect=a)
    assert len(asked) == 4  # one request per change
    assert grid_widget.display_options() == asked[-1]

    # The widget only asked: the session's grid and layout are untouched until its next frame.
    assert calls == {"tile": 0, "setImage": 0}
    np.testing.assert_array_equal(frame.grid, before)
    assert frame.layout.columns_setting is None and frame.layout.columns == 4
    assert grid_widget.tiler is frame.layout

    # The session's answer arrives as a frame made with the options.
    answer = image_frame(solid_images(16, 8, 8), options=asked[-1])
    calls["tile"] = 0  # the session tiled it, not the widget
    grid_widget.show_image(answer)
    assert calls == {"tile": 0, "setImage": 1}
    assert grid_widget.tiler is answer.layout and answer.layout.columns == 2 and answer.grid.shape[2] == 4
    assert len(asked) == 4  # showing it asks nothing


def test_set_selection_highlights_every_env(grid_widget, solid_images, qtbot):
    grid_widget.show_image(image_frame(solid_images(9, 16, 16)))
    t = grid_widget.tiler
    selected = []
    grid_widget.env_selected.connect(selected.append)

    def rect_of(env):
        x0, y0 = t.tile_origin(env)
        return QtCore.QRectF(x0, y0, t.width, t.height)

    def extras():
        return [item for item in grid_widget._extra_highlights if item.isVisible()]

    grid_widget.set_selection((1, 3))
    assert grid_widget.selection == (1, 3) and grid_widget.selected_env == 3
    assert grid_widget.highlight.isVisible() and grid_widget.highlight.rect() == rect_of(3)
    assert grid_widget.highlight.pen().style() == QtCore.Qt.PenStyle.SolidLine
    (extra,) = extras()
    assert extra.rect() == rect_of(1) and extra.pen().style() == QtCore.Qt.PenStyle.DashLine
    # Each frame in its env's colour by its place in the selection: the colour of its curve in the plots.
    assert extra.pen().color().name() == pal.env_colour(0).lower()
    assert grid_widget.highlight.pen().color().name() == pal.env_colour(1).lower()
    settle(grid_widget)
    top = QtCore.QPointF(rect_of(3).center().x(), rect_of(3).top())
    edge = grid_widget.graphics.mapFromScene(grid_widget.view_box.mapViewToScene(top))
    shown = QtGui.QColor(*viewport_rgb(grid_widget, edge))
    assert shown.name() == pal.env_colour(1).lower(), "the primary frame on screen"
    grid_widget.set_selection((3, 1))  # the same envs, 3 first, no slots given: the colours follow the places
    assert grid_widget.highlight.pen().color().name() == pal.env_colour(1).lower()  # env 1, second
    assert extras()[0].pen().color().name() == pal.env_colour(0).lower()  # env 3, first
    grid_widget.set_selection((3, 1), {1: 0, 3: 1})  # the history's slots: each env keeps its colour
    assert grid_widget.highlight.pen().color().name() == pal.env_colour(0).lower()
    assert extras()[0].pen().color().name() == pal.env_colour(1).lower()

    grid_widget.set_selection((2,))
    assert grid_widget.highlight.rect() == rect_of(2) and extras() == []
    grid_widget.set_selection([0, 99, -1, 8])  # out of range dropped
    assert grid_widget.selection == (0, 8) and grid_widget.highlight.rect() == rect_of(8)
    assert [item.rect() for item in extras()] == [rect_of(0)]
    grid_widget.set_selection(())
    assert grid_widget.selected_env is None and not grid_widget.highlight.isVisible() and extras() == []
    assert selected == []  # the session's selection is shown, not announced again

    # A plain click selects one env and announces it; a Ctrl-click adds one, and both are highlighted.
    viewport = grid_widget.graphics.viewport()
    qtbot.mouseClick(viewport, QtCore.Qt.MouseButton.LeftButton, pos=tile_center_on_viewport(grid_widget, 4))
    assert selected == [4] and grid_widget.selection == (4,)
    qtbot.wait(300)  # not a double click
    qtbot.mouseClick(
        viewport,
        QtCore.Qt.MouseButton.LeftButton,
        QtCore.Qt.KeyboardModifier.ControlModifier,
        pos=tile_center_on_viewport(grid_widget, 6),
    )
    assert selected == [4, 6] and grid_widget.selection == (4, 6)
    assert grid_widget.highlight.rect() == rect_of(6) and [item.rect() for item in extras()] == [rect_of(4)]


def test_readout_says_shown_and_stored_values(grid_widget, solid_images, qtbot):
    images = solid_images(9, 16, 16).copy()
    images[4, 7, 3] = (10, 20, 200)  # as stored
    at = (18 + 3, 18 + 7)

    def show(imgs, **kw):  # the window shows a session's frame and reads exact bytes through it
        frame = image_frame(imgs, **kw)
        grid_widget.pixel_reader = pixel_reader(imgs, frame)
        grid_widget.show_image(frame)

    show(images, src_format="rgb")
    assert grid_widget.readout_at(*at) == "env 4  x 3 y 7  shown rgb(10, 20, 200)"  # nothing changed: one value

    show(images, src_format="bgr")
    assert grid_widget.readout_at(*at) == "env 4  x 3 y 7  shown rgb(200, 20, 10)  stored bgr(10, 20, 200)"

    grid_widget.channel_combo.setCurrentIndex(1)  # asks the session; its next frame is swapped
    show(images, src_format="rgb", options=DisplayOptions(swap_rb=True))
    assert grid_widget.readout_at(*at) == (
        "env 4  x 3 y 7  shown rgb(200, 20, 10)  stored rgb(10, 20, 200)  (R↔B swapped for display)"
    )
    show(images, src_format="bgr", options=DisplayOptions(swap_rb=True))
    assert grid_widget.readout_at(*at) == (
        "env 4  x 3 y 7  shown rgb(10, 20, 200)  stored bgr(10, 20, 200)  (R↔B swapped for display)"
    )

    grid_widget.channel_combo.setCurrentIndex(0)
    gray = np.full((9, 16, 16), 30, np.uint8)
    gray[4, 7, 3] = 77
    show(gray)
    assert grid_widget.readout_at(*at) == "env 4  x 3 y 7  shown rgb(77, 77, 77)  stored gray(77)"

    # Rows stored bottom-up: the tile is shown upright, and the stored value is the same pixel's.
    flipped = images[:, ::-1].copy()
    show(flipped, src_format="bgr", bottom_up=True)
    assert grid_widget.readout_at(*at) == (
        "env 4  x 3 y 7 (stored row 8)  shown rgb(200, 20, 10)  stored bgr(10, 20, 200)"
    )
    # Rows flipped for display: the row the value was read from is the stored one (y 6 read the ground at row 57).
    grid_widget.flip_check.setChecked(True)
    show(flipped, src_format="bgr", options=DisplayOptions(flip_rows=True))
    assert grid_widget.readout_at(*at) == (
        "env 4  x 3 y 7 (stored row 8)  shown rgb(200, 20, 10)  stored bgr(10, 20, 200)  (rows flipped for display)"
    )
    grid_widget.flip_check.setChecked(False)
    show(flipped, src_format="bgr", bottom_up=True)

    # The hover label says the same.
    settle(grid_widget)

    def on_viewport(x, y):
        return grid_widget.graphics.mapFromScene(grid_widget.view_box.mapViewToScene(QtCore.QPointF(x, y)))

    # First elsewhere (a move to where an earlier test left the cursor may be dropped), then past
    # pyqtgraph's limit on mouse-move rate.
    with qtbot.waitSignal(grid_widget.hover_changed, timeout=2000):
        qtbot.mouseMove(grid_widget.graphics.viewport(), on_viewport(1.5, 1.5))
    qtbot.wait(100)
    with qtbot.waitSignal(grid_widget.hover_changed, timeout=2000) as blocker:
        qtbot.mouseMove(grid_widget.graphics.viewport(), on_viewport(at[0] + 0.5, at[1] + 0.5))
    assert blocker.args == ["env 4  x 3 y 7 (stored row 8)  shown rgb(200, 20, 10)  stored bgr(10, 20, 200)"]


def test_a_narrow_counters_line_shows_its_counts_whole_in_fewer_words(grid_widget, solid_images):
    """Beside the hover readout at 1280x800 the counters read "64 envs 64x64  image_seq 2534  i…"."""
    grid_widget.set_frame(solid_images(64, 64, 64))
    grid_widget.set_meta(2534, 1267, 3)
    line = grid_widget.status_label
    full = "64 envs 64x64  image_seq 2534  image_frame_seq 1267  torn copies skipped 3"
    assert line.text() == line.toolTip() == full
    metrics = QtGui.QFontMetricsF(line.font())
    height = line.sizeHint().height()
    for text in (full, "image_seq 2534  image_frame_seq 1267  torn 3", "image_seq 2534  torn 3"):
        line.resize(math.ceil(metrics.horizontalAdvance(text)) + 1, height)
        assert line.shown_text() == text
    line.resize(math.floor(metrics.horizontalAdvance("image_seq 2534  torn 3")) - 2, height)
    assert line.shown_text().startswith("image_seq 2534") and line.shown_text().endswith("…")  # the shortest, elided
    grid_widget.clear_image("engine exports no images")  # other texts have no shorter form
    line.resize(60, height)
    assert line.shown_text().startswith("engine") and line.shown_text().endswith("…")


def test_long_status_and_readout_text_do_not_widen_the_grid(grid_widget, solid_images):
    """Counters that gain digits (or a long hover readout) must not raise the layout's minimum width.

    Seen: the counters' line set the window's minimum width, which grew past a
    1280 px screen as ``image_seq`` gained digits.
    """
    grid_widget.set_frame(solid_images(64, 32, 32))
    QtWidgets.QApplication.processEvents()
    before = grid_widget.minimumSizeHint().width()
    grid_widget.set_meta(10**15, 10**15, 10**9)
    readout = "env 4095  x 63 y 63  shown RGBA(255, 255, 255, 255)  stored BGRA(255, 255, 255, 255)"
    grid_widget.hover_label.setText(readout)
    QtWidgets.QApplication.processEvents()
    assert "1000000000000000" in grid_widget.status_label.text()
    assert grid_widget.status_label.toolTip() == grid_widget.status_label.text()  # the whole line, when it is cut
    assert grid_widget.minimumSizeHint().width() == before


def test_automatic_columns_follow_the_views_shape_while_the_grid_is_fitted(grid_widget, solid_images, qtbot):
    asked: list[DisplayOptions] = []
    grid_widget.display_changed.connect(asked.append)
    grid_widget.show_image(image_frame(solid_images(64, 16, 16)))
    assert grid_widget.tiler.columns == 8
    grid_widget.resize(1200, 330)  # a wide, low dock
    qtbot.waitUntil(lambda: bool(asked) and (asked[-1].view_aspect or 0) > 2.5)
    vb = grid_widget.view_box
    assert asked[-1].view_aspect == pytest.approx(vb.width() / vb.height(), rel=0.01)
    grid_widget.show_image(image_frame(solid_images(64, 16, 16), options=asked[-1]))  # the session's answer
    t = grid_widget.tiler
    assert t.columns > 8 and t.columns_setting is None and grid_widget.columns_spin.value() == 0  # still "auto"
    view = vb.viewRect()
    assert view.contains(QtCore.QRectF(0, 0, t.grid_width, t.grid_height))  # fitted to the new layout
    # A zoom by the user keeps the layout when the view changes shape, until "fit".
    vb.sigRangeChangedManually.emit([True, True])
    n = len(asked)
    grid_widget.resize(500, 500)
    qtbot.wait(50)
    assert len(asked) == n
    grid_widget.reset_button.click()
    grid_widget.resize(520, 500)
    qtbot.waitUntil(lambda: len(asked) > n)
    assert asked[-1].view_aspect is not None and asked[-1].view_aspect < 1.5


def test_a_grid_that_fits_at_full_size_but_not_with_its_margin_is_shown_at_full_size(grid_widget, qtbot):
    vb = grid_widget.view_box
    vw, vh = vb.width(), vb.height()
    for shrink, want_native in ((0.99, True), (0.8, False)):
        h, w = int(vh * shrink), int(vw * shrink)
        image = np.zeros((1, h, w, 3), np.uint8)
        grid_widget.show_image(image_frame(image))
        grid_widget.reset_zoom()
        px = vb.viewPixelSize()
        if want_native:
            assert px[0] == pytest.approx(1.0, abs=1e-6) and px[1] == pytest.approx(1.0, abs=1e-6)
        else:
            assert px[0] < 0.99  # enlarged to fit, with its margin
        assert vb.viewRect().contains(QtCore.QRectF(0, 0, w, h))


def test_a_shrunk_grid_fitted_to_the_view_is_drawn_pixel_for_pixel(grid_widget, qtbot):
    # The session shrinks tiles shown smaller than their pixels to a whole number of screen pixels. The fit
    # puts a tile's pitch on exactly that many, so the canvas draws the display buffer unscaled: each of its
    # pixels on screen once. Fitted to the view's exact size, Qt scaled the buffer again by a few percent
    # (0.598 against 0.591 screen pixels a grid pixel in the demo window), repeating a column and a row
    # every few dozen.
    rng = np.random.default_rng(3)
    full = image_frame(rng.integers(0, 256, (64, 64, 64, 3), dtype=np.uint8))
    grid_widget.show_image(full)
    settle(grid_widget)
    view = grid_widget.view_request
    th, tw = view.display_tile(64, 64, 2)
    assert th == tw < 64  # shown smaller than its pixels at this size
    assert (64 + 2) * view.screen_px == pytest.approx(tw + 1, abs=1e-6)  # a tile's pitch on whole pixels
    # The session's display buffer for that view (noise: a repeated or a dropped row or column shows).
    display = Tiler(64, th, tw, 3, columns=full.layout.columns, gap=1, gap_value=40)
    display.tile(rng.integers(0, 256, (64, th, tw, 3), dtype=np.uint8), src_format="rgb")
    grid = display.grid.view()
    grid.flags.writeable = False
    pitch = (66 / (tw + 1), 66 / (th + 1))
    frame = dataclasses.replace(full, grid=grid, display_layout=display.geometry, step=64 / tw, scale=pitch)
    canvas = grid_widget.canvas
    blits = canvas.blits
    grid_widget.labels.setVisible(False)  # the env labels are blended over the tiles' corners
    grid_widget.show_image(frame)
    settle(grid_widget)
    assert canvas.blits > blits
    shot = qimage_to_array(grid_widget.graphics.viewport().grab().toImage())
    origin = grid_widget.graphics.mapFromScene(grid_widget.view_box.mapViewToScene(QtCore.QPointF(0, 0)))
    x0, y0 = round(origin.x()), round(origin.y())
    h, w = grid.shape[:2]
    np.testing.assert_array_equal(shot[y0 : y0 + h, x0 : x0 + w], grid)
    # The next image repaints exactly the pixels the blit covers: nothing around them is filled again.
    areas = []
    recorder = _PaintAreas(areas)
    canvas.installEventFilter(recorder)
    grid_widget.show_image(dataclasses.replace(frame, grid=grid[::-1].copy()))
    qtbot.waitUntil(lambda: bool(areas), timeout=2000)
    assert areas[-1] == QtCore.QRect(x0, y0, w, h)


class _PaintAreas(QtCore.QObject):
    def __init__(self, areas: list) -> None:
        super().__init__()
        self.areas = areas

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:
        if event.type() == QtCore.QEvent.Type.Paint:
            self.areas.append(QtCore.QRect(event.rect()))
        return False


class _PaintCounter(QtCore.QObject):
    def __init__(self) -> None:
        super().__init__()
        self.paints = 0

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:
        if event.type() == QtCore.QEvent.Type.Paint:
            self.paints += 1
        return False


def test_new_frames_are_painted_by_the_canvas_alone(grid_widget, solid_images, qtbot):
    # The view's scene is never repainted for a new image: the canvas over the viewport paints the
    # image and blits its cached overlays (the env labels here), which are not rendered again.
    grid_widget.set_frame(solid_images(16, 64, 64))
    settle(grid_widget)
    canvas = grid_widget.canvas
    assert canvas.geometry() == grid_widget.graphics.viewport().rect()
    assert grid_widget.labels.last_drawn == 16
    counter = _PaintCounter()
    grid_widget.graphics.viewport().installEventFilter(counter)
    paints, renders = canvas.paints, canvas.overlay_renders
    for k in range(10):
        images = solid_images(16, 64, 64)[::-1] if k % 2 else solid_images(16, 64, 64)
        grid_widget.set_frame(np.ascontiguousarray(images))
        qtbot.waitUntil(lambda p=paints + k: canvas.paints > p, timeout=2000)
    assert counter.paints == 0, "the viewport under the canvas must not be repainted"
    assert canvas.overlay_renders == renders, "a new image must not render the overlays again"
    shown = solid_images(16, 64, 64)[::-1]  # the last frame (k == 9)
    for env in (0, 7, 15):
        assert viewport_rgb(grid_widget, tile_center_on_viewport(grid_widget, env)) == tuple(shown[env, 0, 0])


def test_canvas_overlays_follow_selection_zoom_and_resize(grid_widget, solid_images, qtbot):
    grid_widget.set_frame(solid_images(9, 32, 32))
    settle(grid_widget)
    canvas = grid_widget.canvas
    grid_widget.select_env(4)
    settle(grid_widget)
    # the selection frame (2 device pixels, drawn centred on the tile's edge) is in the canvas's pixels
    t = grid_widget.tiler
    x0, y0 = t.tile_origin(4)
    edge = grid_widget.graphics.mapFromScene(grid_widget.view_box.mapViewToScene(QtCore.QPointF(x0 + 16, y0)))
    selection = QtGui.QColor(pal.env_colour(0))  # the one selected env's colour
    assert viewport_rgb(grid_widget, edge) == (selection.red(), selection.green(), selection.blue())
    renders = canvas.overlay_renders
    grid_widget.view_box.setRange(QtCore.QRectF(0, 0, 40, 40), padding=0)
    settle(grid_widget)
    assert canvas.overlay_renders > renders, "a zoom renders the overlays again"
    grid_widget.select_env(None)
    settle(grid_widget)
    assert viewport_rgb(grid_widget, edge) != (selection.red(), selection.green(), selection.blue())
    grid_widget.resize(500, 400)
    qtbot.waitUntil(lambda: canvas.geometry() == grid_widget.graphics.viewport().rect(), timeout=2000)


def test_the_canvas_lets_the_mouse_through_to_the_view(grid_widget, solid_images):
    grid_widget.set_frame(solid_images(4, 32, 32))
    settle(grid_widget)
    viewport = grid_widget.graphics.viewport()
    point = tile_center_on_viewport(grid_widget, 3)
    assert grid_widget.canvas.testAttribute(QtCore.Qt.WidgetAttribute.WA_TransparentForMouseEvents)
    assert grid_widget.canvas.isVisible() and grid_widget.canvas.geometry().contains(point)
    assert viewport.childAt(point) is None  # what the mouse reaches there is the viewport itself


def test_an_overlay_with_nothing_drawn_is_not_blended(grid_widget, solid_images):
    # 1024 tiles of 8x8: too small for labels, nothing selected or flagged: nothing to blend per frame
    grid_widget.set_frame(solid_images(1024, 8, 8))
    settle(grid_widget)
    canvas = grid_widget.canvas
    assert grid_widget.labels.last_drawn == 0 and not canvas.overlay_shown
    grid_widget.select_env(5)
    settle(grid_widget)
    assert canvas.overlay_shown
    grid_widget.select_env(None)
    settle(grid_widget)
    assert not canvas.overlay_shown
    grid_widget.set_frame(solid_images(4, 64, 64))  # big tiles: their labels are drawn
    settle(grid_widget)
    assert grid_widget.labels.last_drawn == 4 and canvas.overlay_shown


def _canvas_reference(canvas) -> QtGui.QImage:
    """The canvas painted the plain way: background everywhere, the image over it, the whole overlay over both."""
    out = QtGui.QImage(canvas.size(), QtGui.QImage.Format.Format_RGB32)
    painter = QtGui.QPainter(out)
    painter.fillRect(out.rect(), canvas._view.backgroundBrush())
    surface = canvas._surface
    painter.setTransform(surface.deviceTransform(canvas._view.viewportTransform()))
    painter.drawImage(surface.rect, surface.qimage)
    painter.resetTransform()
    if canvas.overlay_shown:
        painter.drawImage(0, 0, canvas._overlay)
    painter.end()
    return out


@pytest.mark.parametrize("channels", [3, 4])
def test_the_canvas_fills_and_blends_only_where_needed_with_the_pixels_of_a_plain_paint(
    grid_widget, solid_images, channels
):
    # The canvas skips the fill under an opaque image and blends the overlay only in the bands of rows it
    # drew in: the pixels must be those of filling everything and blending the whole overlay.
    images = solid_images(16, 64, 64, channels).copy()
    if channels == 4:
        images[..., 3] = np.arange(16, dtype=np.uint8)[:, None, None] * 16  # partly transparent tiles
        grid_widget.alpha_check.setChecked(True)
    grid_widget.set_frame(images)
    settle(grid_widget)
    canvas = grid_widget.canvas
    assert canvas.overlay_shown and grid_widget.labels.last_drawn == 16
    blended = sum(source.width() * source.height() for _, source in canvas._overlay_bands)
    assert blended < 0.4 * canvas.width() * canvas.height(), "labels alone: a band per row of tiles, not the whole"
    grid_widget.select_env(5)
    settle(grid_widget)
    views = [None, QtCore.QRectF(37.3, 21.6, 150.5, 130.2), QtCore.QRectF(-80.5, -60.25, 500.0, 400.0)]
    for view in views:
        if view is not None:
            grid_widget.view_box.setRange(view, padding=0)
            settle(grid_widget)
        assert canvas._overlay_bands
        shown = canvas.grab().toImage().convertToFormat(QtGui.QImage.Format.Format_RGB32)
        assert qimage_to_array(shown).tolist() == qimage_to_array(_canvas_reference(canvas)).tolist(), view


def test_the_overlay_bands_are_as_high_as_the_rows_drawn_in():
    # Blending cost follows the pixels blended: a band spans the rows holding drawn pixels (runs a few rows
    # apart merge into one), from the leftmost to the rightmost drawn column, in device pixels and logical units.
    from lucky_monitor.ui.image_grid import OVERLAY_MERGE_ROWS, _drawn_bands

    px = np.zeros((200, 300), np.uint32)
    px[50:65, 10:30] = 0xA0000000  # a label
    px[52:60, 100:120] = 0xFFFFFFFF  # another in the same row of tiles
    px[65 + OVERLAY_MERGE_ROWS - 1, 5] = 1  # just close enough to join the first run
    px[120:121, 40:41] = 1  # alone, far below
    bands = _drawn_bands(px, ratio=2.0)
    sources = [s.getRect() for _, s in bands]
    first_end = 65 + OVERLAY_MERGE_ROWS
    assert sources == [(5, 50, 115, first_end - 50), (40, 120, 1, 1)]
    assert [t.getRect() for t, _ in bands] == [(2.5, 25.0, 57.5, (first_end - 50) / 2), (20.0, 60.0, 0.5, 0.5)]
    px[65 + OVERLAY_MERGE_ROWS - 1, 5] = 0
    px[65 + OVERLAY_MERGE_ROWS, 5] = 1  # one row further: a band of its own
    assert [s.getRect() for _, s in _drawn_bands(px)] == [
        (10, 50, 110, 15),
        (5, 65 + OVERLAY_MERGE_ROWS, 1, 1),
        (40, 120, 1, 1),
    ]
    assert _drawn_bands(np.zeros((10, 10), np.uint32)) == []


def _canvas_on_screen(canvas) -> np.ndarray:
    """The canvas's pixels as the window holds them (its backing store, through the screen), not repainted."""
    window = canvas.window()
    origin = canvas.mapTo(window, QtCore.QPoint(0, 0))
    shot = window.screen().grabWindow(window.winId(), origin.x(), origin.y(), canvas.width(), canvas.height())
    return qimage_to_array(shot.toImage().convertToFormat(QtGui.QImage.Format.Format_RGB32))


def test_a_new_image_repaints_only_the_pixels_it_covers(grid_widget, solid_images, qtbot):
    # While the view stays put, a new frame's paint covers the image's rectangle alone; the background
    # and the overlay kept from the last paint stay right (the window's pixels match a repaint of everything).
    grid_widget.set_frame(solid_images(16, 48, 48))
    grid_widget.select_env(6)
    grid_widget.view_box.setRange(QtCore.QRectF(-30.5, -20.25, 300.0, 260.0), padding=0)
    settle(grid_widget)
    canvas = grid_widget.canvas
    regions: list[QtCore.QRect] = []
    original = canvas.paintEvent

    def paint(event: QtGui.QPaintEvent) -> None:
        regions.append(event.rect())
        original(event)

    canvas.paintEvent = paint
    image_rect = canvas._placed.outer
    assert QtCore.QRect(0, 0, canvas.width(), canvas.height()).contains(image_rect) and image_rect != canvas.rect()
    for k in range(6):
        images = solid_images(16, 48, 48)
        grid_widget.set_frame(np.ascontiguousarray(images[::-1] if k % 2 else images))
        qtbot.waitUntil(lambda n=k + 1: len(regions) >= n, timeout=2000)
    assert regions and all(r == image_rect for r in regions), (image_rect, regions)
    on_screen = _canvas_on_screen(canvas)
    repainted = qimage_to_array(canvas.grab().toImage().convertToFormat(QtGui.QImage.Format.Format_RGB32))
    assert on_screen.tolist() == repainted.tolist()
    grid_widget.view_box.setRange(QtCore.QRectF(0, 0, 100, 100), padding=0)  # a zoom: the whole canvas again
    qtbot.waitUntil(lambda: regions[-1] == canvas.rect(), timeout=2000)


def test_a_shrunk_grid_shown_again_after_a_clear_keeps_its_place(grid_widget, solid_images):
    # The place of the session's grid is set only when it changes; a clear forgets it, so the same grid
    # shown again (a display buffer at half size: two grid pixels per buffer pixel) is placed again.
    import dataclasses

    frame = image_frame(solid_images(4, 32, 32))
    h, w = frame.grid.shape[:2]
    half = dataclasses.replace(frame, grid=frame.grid[::2, ::2], scale=(2.0, 2.0))
    full = QtCore.QRectF(0, 0, 2 * (w // 2 + w % 2), 2 * (h // 2 + h % 2))
    grid_widget.show_image(half)
    assert grid_widget.image_item.rect == full
    grid_widget.clear_image("detached")
    assert grid_widget.image_item.rect.isNull()
    grid_widget.show_image(half)
    assert grid_widget.image_item.rect == full


def test_the_alpha_box_is_greyed_out_and_says_why_for_images_without_alpha(grid_widget) -> None:
    """It was a silent no-op on RGB images."""
    rng = np.random.default_rng(2)
    grid_widget.set_frame(rng.integers(0, 256, (4, 6, 8, 3), dtype=np.uint8))
    assert not grid_widget.alpha_check.isEnabled()
    assert grid_widget.alpha_check.toolTip() == "the images have no alpha channel (3 channels)"
    grid_widget.set_frame(rng.integers(0, 256, (4, 6, 8, 4), dtype=np.uint8), {"src_format": "rgba"})
    assert grid_widget.alpha_check.isEnabled()
    assert "alpha" in grid_widget.alpha_check.toolTip() and "no alpha" not in grid_widget.alpha_check.toolTip()
    grid_widget.show_image(image_frame(rng.integers(0, 256, (4, 6, 8, 1), dtype=np.uint8)))  # the session's path
    assert not grid_widget.alpha_check.isEnabled()
    assert grid_widget.alpha_check.toolTip() == "the images have no alpha channel (1 channel)"


def test_a_pan_under_a_resting_pointer_reads_the_pixel_now_under_it(grid_widget, solid_images, qtbot):
    """Seen: after a drag-pan the readout named the pixel grabbed, not the one under the pointer."""
    images = solid_images(9, 16, 16).copy()
    images[0] = 10
    images[1] = 200
    frame = image_frame(images, src_format="rgb")
    grid_widget.pixel_reader = pixel_reader(images, frame)
    grid_widget.show_image(frame)
    settle(grid_widget)
    viewport = grid_widget.graphics.viewport()

    def on_viewport(x, y):
        return grid_widget.graphics.mapFromScene(grid_widget.view_box.mapViewToScene(QtCore.QPointF(x, y)))

    grab, drop = on_viewport(26.5, 8.5), on_viewport(8.5, 8.5)  # drag env 1's pixel to where env 0's was
    QtGui.QCursor.setPos(viewport.mapToGlobal(grab))
    if viewport.mapFromGlobal(QtGui.QCursor.pos()) != grab:
        pytest.skip("this platform does not move the cursor")
    qtbot.mouseMove(viewport, grab)
    qtbot.mousePress(viewport, QtCore.Qt.MouseButton.LeftButton, pos=grab)
    for k in range(1, 11):
        p = grab + (drop - grab) * (k / 10)
        QtGui.QCursor.setPos(viewport.mapToGlobal(p))
        qtbot.mouseMove(viewport, p)
        qtbot.wait(20)
    qtbot.mouseRelease(viewport, QtCore.Qt.MouseButton.LeftButton, pos=drop)
    settle(grid_widget)
    under = grid_widget.view_box.mapSceneToView(grid_widget.graphics.mapToScene(drop))
    assert grid_widget.readout_at(under.x(), under.y()).startswith("env 1 ")  # the pan moved env 1 under the pointer
    assert grid_widget.hover_label.text() == grid_widget.readout_at(under.x(), under.y())


def test_a_narrow_readout_drops_its_note_then_the_stored_value(grid_widget):
    """Seen at 1280x800 with swap on: "…stored rgb(181, 150, 178)  (R↔B swap" cut at the dock's edge."""
    text = "env 4  x 3 y 7  shown rgb(200, 20, 10)  stored rgb(10, 20, 200)  (R↔B swapped for display)"
    grid_widget._set_hover_text(text)
    line = grid_widget.hover_label
    assert line.text() == line.toolTip() == text
    metrics = QtGui.QFontMetricsF(line.font())
    height = line.sizeHint().height()
    for form in (
        text,
        "env 4  x 3 y 7  shown rgb(200, 20, 10)  stored rgb(10, 20, 200)",
        "env 4  x 3 y 7  shown rgb(200, 20, 10)",
    ):
        line.resize(math.ceil(metrics.horizontalAdvance(form)) + 1, height)
        assert line.shown_text() == form


def _runs(line: np.ndarray) -> list[tuple[tuple[int, ...], int]]:
    """A row of RGB pixels as (colour, length) runs."""
    runs: list[tuple[tuple[int, ...], int]] = []
    for px in map(tuple, line):
        if runs and runs[-1][0] == px:
            runs[-1] = (px, runs[-1][1] + 1)
        else:
            runs.append((px, 1))
    return runs


@pytest.mark.parametrize(("n", "h", "w"), [(7, 64, 64), (16, 64, 48), (2, 64, 64), (16, 48, 64)])
def test_an_enlarged_grid_fitted_to_the_view_has_every_tile_equally_wide(grid_widget, solid_images, n, h, w):
    # Shown larger than their pixels, the tiles are scaled by Qt (nearest). Fitted to the view's exact size,
    # a tile's pitch fell between two screen pixels and alternated: 104 and 105 px for 7 envs of 64x64, 64
    # and 65 px for 16 of 48x64. The fit puts the pitch of the columns (and of the rows, for square tiles)
    # on whole screen pixels, so every tile and every gap is as wide as the others.
    grid_widget.labels.setVisible(False)  # the env labels are drawn over the tiles' corners
    frame = image_frame(solid_images(n, h, w))
    grid_widget.show_image(frame)
    settle(grid_widget)
    view = grid_widget.view_request
    assert view.screen_px > 1.0  # shown larger than its pixels at this size
    t = frame.layout
    pitches = [(t.width + t.gap) * view.screen_px]
    if t.width == t.height:
        pitches.append((t.height + t.gap) * view.screen_px)
    for pitch in pitches:
        assert pitch == pytest.approx(round(pitch), abs=1e-6)
    shot = qimage_to_array(grid_widget.graphics.viewport().grab().toImage())
    origin = grid_widget.graphics.mapFromScene(grid_widget.view_box.mapViewToScene(QtCore.QPointF(0, 0)))
    x0, y0 = round(origin.x()), round(origin.y())
    # Along the middle of the first row of tiles: tile, gap, tile, gap ... every tile as wide, every gap too.
    y = y0 + round(t.height * view.screen_px / 2)
    envs = {tuple(int(v) for v in c) for c in solid_images(n, 1, 1)[:, 0, 0]}
    runs = _runs(shot[y])
    tiles = [length for colour, length in runs if colour in envs]
    gaps = [n for (colour, n), after in itertools.pairwise(runs) if colour == (40, 40, 40) and after[0] in envs]
    assert len(tiles) == min(n, t.columns)
    assert len(set(tiles)) == 1, tiles
    assert len(set(gaps)) <= 1, gaps
    if t.width == t.height and t.rows > 1:  # and down the first column of tiles
        runs = _runs(shot[:, x0 + round(t.width * view.screen_px / 2)])
        tiles = [length for colour, length in runs if colour in envs]
        assert len(tiles) == t.rows
        assert len(set(tiles)) == 1, tiles


def test_a_grid_copied_where_the_view_is_is_converted_there_only(grid_widget, monkeypatch):
    # A 4096-env grid of 64x64 tiles zoomed onto a few: the session copies the tiles in view (and one more on each
    # side) and the frame says where; the widget had converted the whole 53 MiB display buffer for each new image
    # (47 ms), now the part copied. The rest of the picture keeps what it showed.
    rng = np.random.default_rng(5)
    first = image_frame(rng.integers(0, 256, (64, 16, 16, 3), dtype=np.uint8))
    grid_widget.show_image(first)
    surface = grid_widget.image_item
    before = qimage_to_array(surface.qimage)
    np.testing.assert_array_equal(before, first.grid)
    converts = []
    real = QtGui.QImage.convertToFormat
    monkeypatch.setattr(QtGui.QImage, "convertToFormat", lambda self, *a: converts.append(a) or real(self, *a))
    newer = image_frame(rng.integers(0, 256, (64, 16, 16, 3), dtype=np.uint8), image_seq=3)
    part_frame = dataclasses.replace(newer, region=(1, 3, 2, 5))  # tile rows 1-2, columns 2-4
    y0, y1, x0, x1 = part_frame.copied_part()
    g = part_frame.display_layout
    assert (y0, y1, x0, x1) == (18, 52, 36, 88) and g.height + g.gap == 18 and g.width + g.gap == 18
    grid_widget.show_image(part_frame)
    assert converts == []  # no conversion of the whole buffer
    shown = qimage_to_array(surface.qimage)
    np.testing.assert_array_equal(shown[y0:y1, x0:x1], newer.grid[y0:y1, x0:x1])
    outside = np.ones(shown.shape[:2], bool)
    outside[y0:y1, x0:x1] = False
    np.testing.assert_array_equal(shown[outside], before[outside])
    # A frame copied whole (no region) is converted whole, as is one of another size.
    grid_widget.show_image(newer)
    np.testing.assert_array_equal(qimage_to_array(surface.qimage), newer.grid)
    other = image_frame(rng.integers(0, 256, (9, 16, 16, 3), dtype=np.uint8))
    grid_widget.show_image(dataclasses.replace(other, region=(0, 1, 0, 1)))
    np.testing.assert_array_equal(qimage_to_array(surface.qimage), other.grid)
