"""PlotsPanel: curves and raster equal the history's data, samples label, pause, exports."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import csv

import numpy as np
import pytest
from PySide6 import QtCore, QtGui, QtWidgets

from lucky_monitor.core.history import History, HistoryError
from lucky_monitor.ui import palette as pal
from lucky_monitor.ui.plots import (
    BandFill,
    ExportError,
    PlotsPanel,
    RasterDisplay,
    bin_starts,
    gap_starts,
    reduce_bins,
    seam_paints,
)


def feed(history: History, count: int, *, start_seq: int = 1, start_t: float = 0.0, gap: int = 0, seed: int = 0):
    """Append ``count`` synthetic frames, 1/60 s apart, ``gap`` frames skipped between them."""
    n = history.num_envs
    rng = np.random.default_rng(seed)
    seq = start_seq
    for k in range(count):
        rewards = (rng.standard_normal(n) + np.arange(n) * 0.1).astype(np.float32)
        dones = (rng.random(n) < 0.3).astype(np.uint8)
        truncs = (rng.random(n) < 0.1).astype(np.uint8)
        history.append(seq, start_t + k / 60, rewards, dones, truncs)
        seq += 1 + gap
    return seq


@pytest.fixture
def panel(qtbot):
    history = History(16, capacity=2000, raster_capacity=120)
    widget = PlotsPanel(history)
    qtbot.addWidget(widget)
    widget.resize(900, 700)
    return widget


def curve_xy(item) -> tuple[np.ndarray, np.ndarray]:
    x, y = item.getData()
    if x is None:
        return np.empty(0), np.empty(0)
    return np.asarray(x), np.asarray(y)


def test_curves_equal_the_history(panel: PlotsPanel) -> None:
    history = panel.history
    history.set_selected([3, 11])
    feed(history, 300)
    assert panel.update_view()
    view = history.window(panel.window_seconds, raster=False)
    x, y = curve_xy(panel.mean_curve)
    np.testing.assert_array_equal(x, view.frame_seq.astype(np.float64))
    np.testing.assert_array_equal(y, view.mean)
    np.testing.assert_array_equal(curve_xy(panel.band_low)[1], view.p10)
    np.testing.assert_array_equal(curve_xy(panel.band_high)[1], view.p90)
    np.testing.assert_array_equal(curve_xy(panel.dones_curve)[1], view.done_count)
    np.testing.assert_array_equal(curve_xy(panel.truncs_curve)[1], view.trunc_count)
    np.testing.assert_array_equal(curve_xy(panel.dones_curve)[0], view.frame_seq.astype(np.float64))

    panel.set_band_mode("minmax")
    assert panel.band_mode == "minmax"
    assert panel.update_view()
    np.testing.assert_array_equal(curve_xy(panel.band_low)[1], view.min)
    np.testing.assert_array_equal(curve_xy(panel.band_high)[1], view.max)
    assert panel.legend.getLabel(panel.band_high).text == "min–max"
    assert not panel.band_fill.path().isEmpty()


def test_selected_envs_are_overlaid_with_a_legend(panel: PlotsPanel) -> None:
    history = panel.history
    feed(history, 100)
    history.set_selected([5, 0, 9])
    panel.update_view()
    view = history.window(panel.window_seconds, raster=False)
    labels = [label.text for _, label in panel.legend.items]
    assert {"env 5", "env 0", "env 9", "mean"} <= set(labels)
    for slot, env in enumerate((5, 0, 9)):
        curve = panel._selected_curves[env]
        np.testing.assert_array_equal(curve_xy(curve)[1], view.selected[env])
        assert curve.opts["pen"].color().name() == pal.env_colour(slot).lower()  # the grid frames it in this colour
    history.set_selected([0, 9, 5])  # 5 again (Ctrl-click): now the last, and every curve keeps its colour
    panel.update_view()
    for slot, env in enumerate((5, 0, 9)):
        assert panel._selected_curves[env].opts["pen"].color().name() == pal.env_colour(slot).lower()
    history.set_selected([5, 0, 9])
    history.set_selected([9])
    panel.update_view()
    assert list(panel._selected_curves) == [9]
    labels = [label.text for _, label in panel.legend.items]
    assert "env 5" not in labels and "env 9" in labels
    assert len(panel.reward_plot.listDataItems()) == 4  # band edges, mean, one env


def test_window_choice_limits_the_curves(panel: PlotsPanel) -> None:
    feed(panel.history, 1500)  # 25 s at 60 Hz
    panel.set_window_seconds(10.0)
    panel.update_view()
    x, _ = curve_xy(panel.mean_curve)
    np.testing.assert_array_equal(x, panel.history.window(10.0).frame_seq)
    assert 599 <= x[-1] - x[0] <= 600
    panel.set_window_seconds(600.0)
    panel.update_view()
    starts = bin_starts(1500, max(int(panel.reward_plot.getViewBox().width()), 1000))
    assert curve_xy(panel.mean_curve)[0].shape[0] == (1500 if starts is None else starts.shape[0])
    assert curve_xy(panel.mean_curve)[0][0] < 5  # reaches back to the first frame
    with pytest.raises(ValueError):
        panel.set_window_seconds(42.0)
    with pytest.raises(ValueError):
        panel.set_band_mode("median")


def test_raster_image_equals_the_history_raster(panel: PlotsPanel) -> None:
    history = panel.history
    feed(history, 200, start_seq=50)
    panel.update_view()
    view = history.window(panel.window_seconds)
    image = panel.raster_image.image
    assert image.shape == (120, 16) == view.raster.shape
    np.testing.assert_array_equal(image, view.raster)
    rect = panel.raster_image.mapRectToParent(panel.raster_image.boundingRect())
    assert rect.left() == pytest.approx(view.raster_frame_seq[0] - 0.5)
    assert rect.right() == pytest.approx(view.raster_frame_seq[-1] + 0.5)
    assert rect.height() == pytest.approx(16)
    low, high = panel.colorbar.levels()
    assert low == pytest.approx(float(view.raster.min())) and high == pytest.approx(float(view.raster.max()))


def test_raster_is_binned_to_pixels_at_4096_envs(qtbot) -> None:
    n = 4096
    history = History(n, capacity=400, raster_capacity=60)
    panel = PlotsPanel(history)
    qtbot.addWidget(panel)
    panel.resize(900, 700)
    history.set_selected(range(8))
    feed(history, 100)
    panel.update_view()
    bins_wanted = max(int(panel.raster_plot.getViewBox().height()), 64)
    image = panel.raster_image.image
    group = -(-n // bins_wanted)
    assert image.shape == (60, -(-n // group))
    assert image.shape[1] <= bins_wanted < n
    raster = history.window(None).raster
    expected = np.add.reduceat(raster.astype(np.float64), np.arange(0, n, group), axis=1)
    expected /= np.diff(np.append(np.arange(0, n, group), n))
    np.testing.assert_allclose(image, expected, rtol=1e-5, atol=1e-5)
    # Statistics, never one item per env.
    assert len(panel.reward_plot.listDataItems()) == 3 + 8
    assert len(panel.counts_plot.listDataItems()) == 2

    # Incremental update: new rows are reduced and appended, older ones kept (the display's ring outlasts
    # the history's 60 rows). They come after a gap (frame_seq 100 -> 1000, 8 s unseen): the image is laid
    # out on frame_seq, each row in its frame's column, and the columns of the gap are empty (NaN).
    before, before_seq = image, history.window(None).raster_frame_seq
    feed(history, 5, start_seq=1000, start_t=10.0, seed=1)
    panel.update_view()
    view = history.window(None)
    new = view.raster_frame_seq >= 1000
    expected_new = np.add.reduceat(view.raster[new].astype(np.float64), np.arange(0, n, group), axis=1)
    expected_new /= np.diff(np.append(np.arange(0, n, group), n))
    image = panel.raster_image.image
    seqs = np.concatenate([before_seq, view.raster_frame_seq[new]])
    columns = seqs - seqs[0]
    assert image.shape == (columns[-1] + 1, expected_new.shape[1])
    np.testing.assert_allclose(image[columns[: before.shape[0]]], before, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(image[columns[before.shape[0] :]], expected_new, rtol=1e-5, atol=1e-5)
    unseen = np.ones(image.shape[0], bool)
    unseen[columns] = False
    assert unseen.sum() == 899 and np.isnan(image[unseen]).all()


def test_raster_is_not_uploaded_again_when_nothing_changed(panel: PlotsPanel, monkeypatch) -> None:
    feed(panel.history, 50)
    panel.update_view()
    uploads = []
    original = panel.raster_image.setImage

    def counting(image=None, *args, **kwargs):
        if image is not None:  # pyqtgraph re-renders through setImage(None) on level changes
            uploads.append(image.shape)
        return original(image, *args, **kwargs)

    monkeypatch.setattr(panel.raster_image, "setImage", counting)
    assert not panel.update_view()  # nothing new at all
    panel.history.set_selected([2])  # curves change, raster does not
    assert panel.update_view()
    assert uploads == []
    feed(panel.history, 1, start_seq=500, start_t=5.0)
    assert panel.update_view()
    assert uploads == [(500, 16)]  # one upload: frames 1…500 on the frame_seq axis, the gap left empty


def test_curves_are_reduced_to_the_plot_width(qtbot) -> None:
    history = History(8, capacity=5000, raster_capacity=10)
    panel = PlotsPanel(history, min_points=50)
    qtbot.addWidget(panel)
    panel.set_window_seconds(600.0)
    feed(history, 3000)
    history.set_selected([1])
    panel.update_view()
    view = history.window(600.0, raster=False)
    target = max(int(panel.reward_plot.getViewBox().width()), 50)
    starts = bin_starts(3000, target)
    assert starts is not None
    x, mean = curve_xy(panel.mean_curve)
    assert x.shape[0] == starts.shape[0] <= target
    ends = np.append(starts[1:], 3000)
    for b, (a, e) in enumerate(zip(starts, ends, strict=True)):
        assert mean[b] == pytest.approx(view.mean[a:e].mean())
        assert curve_xy(panel.band_low)[1][b] == view.p10[a:e].min()
        assert curve_xy(panel.band_high)[1][b] == view.p90[a:e].max()
        assert curve_xy(panel.dones_curve)[1][b] == view.done_count[a:e].max()
        assert x[b] == pytest.approx(view.frame_seq[a:e].mean())
    assert curve_xy(panel._selected_curves[1])[0].shape == x.shape


def test_zoomed_view_reduces_only_the_visible_span(qtbot) -> None:
    history = History(4, capacity=5000, raster_capacity=10)
    panel = PlotsPanel(history, min_points=100)
    qtbot.addWidget(panel)
    panel.set_window_seconds(600.0)
    feed(history, 3000)
    panel.update_view()
    panel.reward_plot.setXRange(1000, 1050, padding=0)  # user zoom: autorange off
    assert panel.update_view()
    x, y = curve_xy(panel.mean_curve)
    assert x[0] <= 1000 and x[-1] >= 1050 and x.shape[0] <= 60
    np.testing.assert_array_equal(y, history.window(600.0).mean[x.astype(int) - 1])


def test_samples_label_counts_the_frames_skipped_in_the_window_shown(panel: PlotsPanel) -> None:
    history = panel.history
    seq = feed(history, 30)
    panel.update_view()
    assert panel.samples_label.isHidden()
    seq = feed(history, 10, start_seq=seq, start_t=1.0, gap=3)  # 3 frames skipped before 9 of them
    panel.update_view()
    assert not panel.samples_label.isHidden()
    text = panel.samples_label.text()
    assert text.startswith("values are samples: 27 frames skipped in this window (")
    assert panel.samples_label.toolTip().startswith("27 frames skipped in the window shown, because ")
    panel.set_window_seconds(10.0)
    feed(history, 700, start_seq=seq + 10, start_t=12.0)  # the skips leave the 10 s window
    panel.update_view()
    assert panel.samples_label.isHidden()


def test_a_held_history_says_so_on_the_notes_line_with_the_skips_in_its_tooltip(panel: PlotsPanel) -> None:
    history = panel.history
    seq = feed(history, 30)
    seq = feed(history, 10, start_seq=seq, start_t=1.0, gap=3)
    panel.update_view()
    held = "engine exited: the plots hold the last attach's history, up to frame_seq 57"
    panel.set_held(held)
    assert panel.held_text == held and panel.samples_label.text() == held and not panel.samples_label.isHidden()
    assert "27 frames skipped in the window shown" in panel.samples_label.toolTip()
    panel.set_held(None)  # following a live history again: the skipped-frames note comes back
    assert panel.samples_label.text().startswith("values are samples: 27 frames skipped")
    panel.set_window_seconds(10.0)
    feed(history, 700, start_seq=seq, start_t=12.0)
    panel.update_view()
    panel.set_held(held)
    assert panel.samples_label.toolTip() == held and not panel.samples_label.isHidden()
    panel.set_held(None)
    assert panel.samples_label.isHidden()


def test_pause_freezes_the_display_while_history_records(panel: PlotsPanel) -> None:
    history = panel.history
    seq = feed(history, 40)
    panel.update_view()
    frozen_x, frozen_y = curve_xy(panel.mean_curve)
    frozen_image = panel.raster_image.image.copy()
    panel.pause_button.click()
    assert panel.paused and panel.pause_button.text() == "Resume"
    feed(history, 25, start_seq=seq, start_t=40 / 60, seed=5)
    assert not panel.update_view()
    x, y = curve_xy(panel.mean_curve)
    np.testing.assert_array_equal(x, frozen_x)
    np.testing.assert_array_equal(y, frozen_y)
    np.testing.assert_array_equal(panel.raster_image.image, frozen_image)
    assert history.frames_seen == 65
    panel.set_paused(False)  # resuming redraws at once
    assert not panel.paused and not panel.pause_button.isChecked()
    assert curve_xy(panel.mean_curve)[0].shape[0] == 65


def test_update_view_redraws_only_on_change(panel: PlotsPanel) -> None:
    assert panel.update_view()  # first draw (empty)
    assert not panel.update_view()
    feed(panel.history, 3)
    assert panel.update_view()
    assert panel.last_update_seconds > 0
    assert not panel.update_view()


def test_empty_and_cleared_history(panel: PlotsPanel) -> None:
    panel.update_view()
    assert curve_xy(panel.mean_curve)[0].shape[0] == 0
    assert panel.raster_image.image is None
    feed(panel.history, 20)
    panel.update_view()
    panel.history.clear()
    panel.update_view()
    assert curve_xy(panel.mean_curve)[0].shape[0] == 0
    assert panel.raster_image.image is None
    feed(panel.history, 5)
    panel.update_view()
    assert panel.raster_image.image.shape == (5, 16)


def test_set_history_switches_sessions(panel: PlotsPanel) -> None:
    feed(panel.history, 10)
    panel.update_view()
    other = History(3, capacity=50, raster_capacity=50)
    feed(other, 7)
    panel.set_history(other)
    panel.update_view()
    assert panel.raster_image.image.shape == (7, 3)
    np.testing.assert_array_equal(curve_xy(panel.mean_curve)[1], other.window(None).mean)


def test_export_png_writes_an_image(panel: PlotsPanel, tmp_path) -> None:
    panel.history.set_selected([1])
    feed(panel.history, 120)
    panel.update_view()
    path = tmp_path / "plots.png"
    panel.export_png(path)
    assert path.stat().st_size > 0
    image = QtGui.QImage(str(path))
    assert not image.isNull() and image.width() > 100 and image.height() > 100
    with pytest.raises(ExportError):
        panel.export_png(tmp_path / "no-such-dir" / "plots.png")


def test_export_csv_writes_the_shown_window(panel: PlotsPanel, tmp_path) -> None:
    panel.history.set_selected([2])
    feed(panel.history, 1200)  # 20 s
    panel.set_window_seconds(10.0)
    path = tmp_path / "plots.csv"
    rows = panel.export_csv(path)
    with open(path, newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    assert table[0][-1] == "env_2"
    assert len(table) - 1 == rows == len(panel.history.window(10.0))
    assert [int(r[0]) for r in table[1:]] == panel.history.window(10.0).frame_seq.tolist()
    with pytest.raises(HistoryError):
        panel.export_csv(tmp_path / "no-such-dir" / "x.csv")


def test_export_buttons_use_a_file_dialog(panel: PlotsPanel, tmp_path, monkeypatch) -> None:
    feed(panel.history, 30)
    panel.update_view()
    answers = iter(
        [
            (str(tmp_path / "a.csv"), ""),
            (str(tmp_path / "a.png"), ""),
            ("", ""),  # cancelled
            (str(tmp_path / "missing" / "b.csv"), ""),
        ]
    )
    monkeypatch.setattr(QtWidgets.QFileDialog, "getSaveFileName", lambda *a, **k: next(answers))
    panel.csv_button.click()
    assert (tmp_path / "a.csv").stat().st_size > 0
    assert "wrote 30 rows" in panel.status_label.text()
    assert panel.status_label.toolTip() == f"wrote 30 rows to {tmp_path / 'a.csv'}"  # the whole path
    panel.status_label.resize(QtGui.QFontMetrics(panel.status_label.font()).horizontalAdvance("wrote 30 rows") + 4, 20)
    assert panel.status_label.shown_text() == "wrote 30 rows"  # narrow: the count whole, not "wrote 3…"
    panel.png_button.click()
    assert not QtGui.QImage(str(tmp_path / "a.png")).isNull()
    assert panel.status_label.toolTip() == f"wrote {tmp_path / 'a.png'}"
    panel.csv_button.click()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.png"]
    panel.csv_button.click()
    assert "cannot write CSV" in panel.status_label.text()


def test_dragging_the_colour_bar_turns_auto_levels_off(panel: PlotsPanel) -> None:
    feed(panel.history, 30)
    panel.update_view()
    panel.colorbar.sigLevelsChangeFinished.emit(panel.colorbar)
    assert not panel.auto_levels_box.isChecked()
    panel.colorbar.setLevels((-100.0, 100.0))
    feed(panel.history, 1, start_seq=100, start_t=2.0)
    panel.update_view()
    assert panel.colorbar.levels() == (-100.0, 100.0)
    panel.auto_levels_box.setChecked(True)
    panel.update_view()
    assert panel.colorbar.levels() != (-100.0, 100.0)


def test_band_fill_follows_finite_runs(qtbot) -> None:
    low = pytest.importorskip("pyqtgraph").PlotDataItem()
    high = type(low)()
    fill = BandFill(low, high)
    x = np.arange(10.0)
    low.setData(x, np.where(x == 4, np.nan, 0.0))
    high.setData(x, np.ones(10))
    fill.updatePath()
    polygons = fill.path().toSubpathPolygons()
    assert len(polygons) == 2
    bounds = fill.path().boundingRect()
    assert (bounds.left(), bounds.right(), bounds.top(), bounds.bottom()) == (0.0, 9.0, 0.0, 1.0)
    low.setData(x, np.full(10, np.nan))
    fill.updatePath()
    assert fill.path().isEmpty()


def test_band_fill_paints_in_pieces_with_the_pixels_of_one_outline(qtbot) -> None:
    """A wide band is filled piece by piece, offering the core between pieces, and looks the same."""
    import pyqtgraph as pg

    rng = np.random.default_rng(3)
    n = 1100
    x = 5e5 + 37.0 * np.arange(n)
    mid = np.sin(np.arange(n) / 80.0)
    lo, hi = mid - 0.3 - 0.1 * rng.random(n), mid + 0.3 + 0.1 * rng.random(n)
    lo[700] = np.nan  # two runs
    low, high = pg.PlotDataItem(x, lo), pg.PlotDataItem(x, hi)
    fill = BandFill(low, high, brush=(80, 140, 220, 70))
    fill.updatePath()
    # 700 bins then 399: pieces of at most 128 bins that share their boundary bin
    assert len(fill.pieces()) == 6 + 4
    offers: list[int] = []
    fill.offer = lambda: offers.append(1)

    def render(draw) -> np.ndarray:
        image = QtGui.QImage(1100, 260, QtGui.QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(QtGui.QColor(20, 22, 26))
        painter = QtGui.QPainter(image)
        painter.setTransform(
            QtGui.QTransform(1100 / (x[-1] - x[0]), 0, 0, -260 / 3.0, -x[0] * 1100 / (x[-1] - x[0]), 130)
        )
        draw(painter)
        painter.end()
        return np.frombuffer(image.constBits(), np.uint8).reshape(260, 1100, 4).copy()

    def whole(painter: QtGui.QPainter) -> None:
        painter.setPen(QtCore.Qt.PenStyle.NoPen)
        painter.setBrush(fill.brush())
        painter.drawPath(fill.path())

    pieces = render(lambda p: fill.paint(p, QtWidgets.QStyleOptionGraphicsItem(), None))
    assert len(offers) == len(fill.pieces()) - 1
    one = render(whole)
    assert (pieces != one).any(axis=2).sum() == 0
    assert (one != render(lambda p: None)).any(axis=2).sum() > 20000  # the band was drawn at all
    assert fill.path().boundingRect() == fill.boundingRect()


def test_binning_helpers() -> None:
    assert bin_starts(10, 10) is None
    assert bin_starts(11, 10).tolist() == [0, 2, 4, 6, 8, 10]
    values = np.arange(11.0)
    starts = bin_starts(11, 10)
    assert reduce_bins(values, starts, "mean").tolist() == [0.5, 2.5, 4.5, 6.5, 8.5, 10.0]
    assert reduce_bins(values, starts, "min").tolist() == [0, 2, 4, 6, 8, 10]
    assert reduce_bins(values, starts, "max").tolist() == [1, 3, 5, 7, 9, 10]
    assert reduce_bins(values, None, "max") is values
    with pytest.raises(ValueError):
        reduce_bins(values, starts, "median")


def test_raster_display_tracks_appends_and_wraps() -> None:
    history = History(6, capacity=100, raster_capacity=4)
    display = RasterDisplay()
    assert display.sync(history, 3)  # new binning: 2 envs per row
    assert display.group == 2 and display.bins == 3
    for k in range(7):
        history.append(k + 1, float(k), np.arange(6, dtype=np.float32) + 10 * k, np.zeros(6, np.uint8))
        assert display.sync(history, 3)
        assert not display.sync(history, 3)
    image, seq = display.image(None)
    assert seq.tolist() == [4, 5, 6, 7]
    np.testing.assert_array_equal(image[-1], [60.5, 62.5, 64.5])
    image, seq = display.image(1.0)
    assert seq.tolist() == [6, 7]


def test_three_plots_share_one_frame_seq_axis(panel: PlotsPanel) -> None:
    panel.show()
    feed(panel.history, 200, start_seq=50)
    panel.update_view()
    QtWidgets.QApplication.processEvents()
    reward_box = panel.reward_plot.getViewBox()
    for plot in (panel.counts_plot, panel.raster_plot):
        assert plot.getViewBox().linkedView(0) is reward_box
    rects = [p.getViewBox().sceneBoundingRect() for p in (panel.reward_plot, panel.counts_plot, panel.raster_plot)]
    assert len({(r.left(), r.width()) for r in rects}) == 1  # the view boxes line up to the pixel
    ranges = [p.getViewBox().viewRange()[0] for p in (panel.reward_plot, panel.counts_plot, panel.raster_plot)]
    for other in ranges[1:]:
        assert other == pytest.approx(ranges[0], abs=1e-9)
    # The raster sits on the same frame_seq axis: its image spans exactly its rows' frames.
    rect = panel.raster_image.mapRectToParent(panel.raster_image.boundingRect())
    assert rect.left() == pytest.approx(130 - 0.5) and rect.right() == pytest.approx(249 + 0.5)  # 120 rows held
    low, high = ranges[0]
    assert low <= 49.5 and high >= 249.5


def test_legends_sit_outside_the_data(panel: PlotsPanel) -> None:
    panel.show()
    panel.history.set_selected([1, 2, 3, 4, 5, 6, 7, 8])
    feed(panel.history, 100)
    panel.update_view()
    QtWidgets.QApplication.processEvents()
    for legend, plot in ((panel.legend, panel.reward_plot), (panel.counts_legend, panel.counts_plot)):
        legend_rect = legend.sceneBoundingRect()
        assert legend_rect.height() > 0 and legend.isVisible()
        for box in (p.getViewBox() for p in (panel.reward_plot, panel.counts_plot, panel.raster_plot)):
            assert not legend_rect.intersects(box.sceneBoundingRect()), (legend_rect, box.sceneBoundingRect())
        assert legend_rect.bottom() <= plot.getViewBox().sceneBoundingRect().top()
    labels = [label.text for _, label in panel.legend.items]
    assert labels[:2] == ["p10–p90", "mean"] and "env 8" in labels


def test_raster_title_counts_samples_not_frames(panel: PlotsPanel) -> None:
    assert "no samples yet" in panel.raster_plot.titleLabel.text
    seq = feed(panel.history, 30)
    feed(panel.history, 20, start_seq=seq, start_t=0.5, gap=2)
    panel.update_view()
    title = panel.raster_plot.titleLabel.text
    assert "last 50 samples" in title and "frame" not in title
    low, high = panel.colorbar.levels()
    labels = [text for _, text in panel.colorbar.axis._tickLevels[0]]
    assert labels == [f"{v:.3g}" for v in (low, (low + high) / 2, high)]  # three labels, however short the bar
    panel.set_history(History(16, capacity=2000, raster_capacity=120))  # a detach or a new attach: nothing yet
    panel.update_view()
    assert "no samples yet" in panel.raster_plot.titleLabel.text  # not the last attach's count over empty axes


def test_a_gap_breaks_the_curves(panel: PlotsPanel) -> None:
    history = panel.history
    seq = feed(history, 60)  # 1 s at 60 Hz, frames 1..60
    feed(history, 60, start_seq=seq + 300, start_t=3.0)  # nothing seen for 2 s (and 300 frames)
    panel.update_view()
    view = history.window(panel.window_seconds, raster=False)
    x, y = curve_xy(panel.mean_curve)
    assert x.shape[0] == 121 and np.isnan(y).sum() == 1
    hole = int(np.flatnonzero(np.isnan(y))[0])
    assert hole == 60 and x[59] < x[60] < x[61]
    np.testing.assert_array_equal(np.delete(y, hole), view.mean)
    for item in (panel.band_low, panel.band_high, panel.dones_curve, panel.truncs_curve):
        assert np.isnan(curve_xy(item)[1][hole])
    assert panel.mean_curve.opts["connect"] == "finite"
    # The band's fill breaks too: two closed runs, not one fill across the hole.
    assert panel.band_fill.path().toSubpathPolygons().__len__() == 2


def test_gap_detection_is_relative_to_the_sampling() -> None:
    seq = np.arange(1, 101, dtype=np.int64)
    t = np.arange(100) / 60
    assert gap_starts(seq, t).shape[0] == 0
    t_paused = t.copy()
    t_paused[50:] += 1.0  # engine paused for a second: frame_seq goes on from where it stopped
    np.testing.assert_array_equal(gap_starts(seq, t_paused), [50])
    seq_busy = seq.copy()
    seq_busy[70:] += 40  # the monitor missed 40 frames ...
    t_busy = t.copy()
    t_busy[70:] += 0.6  # ... over 0.6 s
    np.testing.assert_array_equal(gap_starts(seq_busy, t_busy), [70])
    jitter = np.arange(1, 101) + np.cumsum(np.arange(100) % 3 == 0)  # an engine a bit faster than the poll
    assert gap_starts(jitter, t).shape[0] == 0
    slow = np.arange(100) * 0.5  # a slow engine: every step is long, none is a gap
    assert gap_starts(seq, slow).shape[0] == 0


def test_axes_keep_their_layout_while_values_change(panel: PlotsPanel) -> None:
    panel.show()
    seq = feed(panel.history, 120)
    panel.update_view()
    QtWidgets.QApplication.processEvents()
    boxes = [p.getViewBox() for p in (panel.reward_plot, panel.counts_plot, panel.raster_plot)]
    geometry = [b.sceneBoundingRect() for b in boxes]
    x_range = boxes[0].viewRange()[0]
    y_range = boxes[0].viewRange()[1]
    # A few more frames, values inside the range: neither range nor layout moves.
    seq = feed(panel.history, 3, start_seq=seq, start_t=2.0, seed=3)
    assert panel.update_view()
    QtWidgets.QApplication.processEvents()
    assert boxes[0].viewRange()[0] == x_range and boxes[0].viewRange()[1] == y_range
    # Rewards a thousand times larger: wider tick labels, a new y range, the same layout.
    history = panel.history
    for k in range(60):
        history.append(
            seq + k, 3.0 + k / 60, np.full(16, 12345.5 + k, np.float32), np.zeros(16, np.uint8), np.zeros(16, np.uint8)
        )
    panel.update_view()
    QtWidgets.QApplication.processEvents()
    assert boxes[0].viewRange()[1][1] >= 12345.5 + 59
    assert [b.sceneBoundingRect() for b in boxes] == geometry
    # The x range moves on only when the newest frame passes its right edge.
    assert boxes[0].viewRange()[0][1] >= seq + 59


def test_user_zoom_holds_until_auto_range(panel: PlotsPanel) -> None:
    seq = feed(panel.history, 120)
    panel.update_view()
    panel.reward_plot.setXRange(20, 60, padding=0)
    feed(panel.history, 30, start_seq=seq, start_t=2.0)
    panel.update_view()
    assert panel.reward_plot.getViewBox().viewRange()[0] == [20, 60]
    panel.reward_plot.enableAutoRange()  # the "A" button
    panel.update_view()
    low, high = panel.reward_plot.getViewBox().viewRange()[0]
    assert low <= 1 and high >= 149
    assert not any(panel.reward_plot.getViewBox().autoRangeEnabled())  # the panel sets the ranges itself


@pytest.mark.parametrize(
    ("hz", "cause"),
    [
        (50.0, "late polls"),  # an engine slower than the poll: only a late poll skips
        (59.0, "late polls"),
        (62.0, "engine faster than the poll"),
        (2000.0, "engine faster than the poll"),
    ],
)
def test_the_sampling_note_names_the_cause_from_the_windows_frame_rate(panel: PlotsPanel, hz, cause) -> None:
    """Seen: '… because the engine steps faster than the 60 Hz poll' beside 49.7 frames/s."""
    history = panel.history
    n = history.num_envs
    last = 0
    for i in range(600):  # 10 s of polls at 60 Hz, every 20th 15 ms late
        t = i / 60 + (0.015 if i % 20 == 19 else 0.0)
        seq = int(t * hz) + 1
        if seq > last:
            history.append(seq, t, np.zeros(n, np.float32), np.zeros(n, np.uint8))
            last = seq
    panel.update_view()
    assert panel.samples_label.text().endswith(f"in this window ({cause})"), panel.samples_label.text()
    whole = "the engine steps faster than" if "engine" in cause else "the monitor's polls came late"
    assert whole in panel.samples_label.toolTip()


class _Paints(QtCore.QObject):
    """Counts the paint events a widget receives."""

    def __init__(self, widget: QtWidgets.QWidget) -> None:
        super().__init__(widget)
        self.count = 0
        widget.installEventFilter(self)

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:
        if event.type() == QtCore.QEvent.Type.Paint:
            self.count += 1
        return False


def test_a_refresh_is_one_paint_of_the_view(panel: PlotsPanel, qtbot) -> None:
    """pyqtgraph applies a new range at the next paint, whose items then ask for a second one: not here."""
    panel.show()
    qtbot.waitExposed(panel)
    seq = feed(panel.history, 120)
    panel.update_view()
    qtbot.wait(100)
    paints = _Paints(panel.graphics.viewport())
    for k in range(3):
        # values that move the reward range each time: the case that asked for a second paint
        for j in range(20):
            panel.history.append(
                seq,
                3.0 + k + j / 60,
                np.full(16, 10.0 ** (k + 1) + j, np.float32),
                np.zeros(16, np.uint8),
                np.zeros(16, np.uint8),
            )
            seq += 1
        assert panel.update_view()
        qtbot.wait(80)
    assert paints.count == 3


def test_costly_items_offer_the_core_before_they_paint(panel: PlotsPanel, qtbot) -> None:
    """A refresh paints the view in one event; the window's offer runs between its costly items."""
    panel.show()
    qtbot.waitExposed(panel)
    feed(panel.history, 120)
    panel.history.set_selected([3])
    panel.update_view()
    qtbot.wait(50)
    seamed = {id(it) for it in panel.graphics.scene().items() if getattr(it, "_lucky_seamed", False)}
    for item in (panel.band_fill, panel.mean_curve.curve, panel.dones_curve.curve, panel.raster_image):
        assert id(item) in seamed
    assert id(panel._selected_curves[3].curve) in seamed  # a curve added later is seamed too
    assert id(panel.reward_plot.getAxis("left")) in seamed
    offers: list[int] = []
    panel.offer = lambda: offers.append(1)  # set after construction, as the window does
    panel.graphics.viewport().repaint()
    assert len(offers) >= 12  # curves, band, raster, axes, lines, texts: one offer each
    assert len(offers) <= len(seamed)


def test_seam_paints_wraps_the_costly_items_once() -> None:
    scene = QtWidgets.QGraphicsScene()
    text = QtWidgets.QGraphicsTextItem("slow to lay out")  # made here, as pyqtgraph makes its items:
    rect = QtWidgets.QGraphicsRectItem(0, 0, 10, 10)  # only a Python-made item takes an instance override
    scene.addItem(text)
    scene.addItem(rect)
    calls: list[str] = []
    assert seam_paints(scene, lambda: lambda: calls.append("offer")) == 1
    assert seam_paints(scene, lambda: lambda: calls.append("again")) == 0  # already seamed
    assert getattr(text, "_lucky_seamed", False) and not getattr(rect, "_lucky_seamed", False)
    image = QtGui.QImage(64, 64, QtGui.QImage.Format.Format_ARGB32)
    image.fill(0)
    painter = QtGui.QPainter(image)
    scene.render(painter)
    painter.end()
    assert calls == ["offer"]  # the text offered once before it painted; the rectangle paints as before
    assert image.pixelColor(0, 0).alpha() > 0 or image.pixelColor(5, 5).alpha() > 0  # and both still painted


def test_the_envs_ended_axis_ticks_whole_counts_only(panel: PlotsPanel) -> None:
    """A count of envs has no half: a short range (0..2) showed ticks at 0.5 and 1.5."""
    axis = panel.counts_plot.getAxis("left")
    for low, high in ((0.0, 2.0), (0.0, 1.0), (0.0, 64.0), (0.0, 4096.0)):
        values = [v for _, level in axis.tickValues(low, high, 200) for v in level]
        assert values and all(float(v).is_integer() for v in values), (low, high, values)


@pytest.mark.parametrize("selected", [[], [59, 10, 14], list(range(1000, 1008))])
def test_the_legend_wraps_within_the_plot_and_the_colour_bar_stays_in_view(qtbot, selected) -> None:
    """Seen at 1280x800 (plots ~540 px wide): three selected envs widened the legend's row past the plot,
    pushing the raster's colour bar and its labels out of the dock."""
    history = History(2048, capacity=2000, raster_capacity=120)
    panel = PlotsPanel(history)
    qtbot.addWidget(panel)
    panel.resize(540, 420)
    panel.show()
    qtbot.waitExposed(panel)
    history.set_selected(selected)
    feed(history, 60)
    panel.update_view()
    for _ in range(5):
        QtWidgets.QApplication.processEvents()
    width = panel.graphics.viewport().width()
    bar = panel.colorbar.sceneBoundingRect()
    assert bar.right() <= width + 1, (bar, width)
    legend = panel.legend.sceneBoundingRect()
    assert legend.right() <= panel.reward_plot.sceneBoundingRect().right() + 1
    assert len(panel.legend.items) == 2 + len(selected)
    labels = [label.text for _, label in panel.legend.items]
    assert labels[:2] == ["p10–p90", "mean"] and labels[2:] == [f"env {e}" for e in selected]
    # Wider (docks hidden), then back: the legend follows the width the layout settles on.
    for step, width in enumerate((1400, 540)):
        panel.resize(width, 420)
        for _ in range(5):
            QtWidgets.QApplication.processEvents()
        feed(history, 2, start_seq=int(history.window(None).frame_seq[-1]) + 1, start_t=10.0 + step)
        panel.update_view()
        for _ in range(5):
            QtWidgets.QApplication.processEvents()
        bar = panel.colorbar.sceneBoundingRect()
        assert bar.right() <= panel.graphics.viewport().width() + 1, (width, bar)
        assert panel.legend.sceneBoundingRect().right() <= panel.reward_plot.sceneBoundingRect().right() + 1


def test_the_raster_display_keeps_more_rows_than_the_history_and_never_a_hole() -> None:
    """Seen: the default 1 min window's raster covered only its last 600 polls (the history's ring), the rest
    of the shared axis empty, which reads as frames the monitor did not see."""
    history = History(4, capacity=1000, raster_capacity=10)
    display = RasterDisplay(rows=50)
    t = 0.0
    for k in range(40):  # synced every 5 appends: the history's 10 rows never lap between two syncs
        history.append(k + 1, t, np.full(4, k, np.float32), np.zeros(4, np.uint8))
        t += 0.1
        if k % 5 == 4:
            display.sync(history, 4)
    image, seq = display.image(None)
    assert seq.tolist() == list(range(1, 41)) and image[:, 0].tolist() == list(range(40))
    assert display.image(1.05)[1].tolist() == list(range(30, 41))
    for k in range(40, 65):  # 25 appends without a sync: the history kept the last 10 of them
        history.append(k + 1, t, np.full(4, k, np.float32), np.zeros(4, np.uint8))
        t += 0.1
    display.sync(history, 4)
    image, seq = display.image(None)
    assert seq.tolist() == list(range(56, 66))  # restarted from what the history had: no hole, no stale rows
    assert RasterDisplay(None).sync(history, 4)  # None: the history's own ring length


def test_one_skipped_frame_is_one_frame(panel: PlotsPanel) -> None:
    history = panel.history
    seq = feed(history, 30)
    feed(history, 2, start_seq=seq + 1, start_t=1.0)  # one frame skipped
    panel.update_view()
    assert panel.samples_label.text().startswith("values are samples: 1 frame skipped in this window (")
    assert panel.samples_label.toolTip().startswith("1 frame skipped in the window shown")


def test_skipped_frames_are_marked_under_envs_ended_where_polls_came_late(qtbot, panel: PlotsPanel) -> None:
    """Seen at 4096 envs: a whole-population truncation at a frame the poll missed was simply not there,
    the counts' step curve reading "none ended" across it beside a reward curve that plainly reset."""
    history = panel.history
    n = history.num_envs
    for seq in range(900, 1100):  # a 50 Hz engine, polled on time but for two late polls
        if seq in (1000, 1050, 1051):
            continue
        history.append(seq, seq / 50, np.zeros(n, np.float32), np.zeros(n, np.uint8))
    panel.show()
    qtbot.waitExposed(panel)
    panel.update_view()
    assert panel.skip_rug.positions.tolist() == [1000.0, 1050.5]
    assert "amber ticks" in panel.samples_label.toolTip()
    panel.graphics.grab()
    assert panel.skip_rug.last_drawn == 2
    # an engine faster than the poll skips at every poll: the note says so, no place is marked
    fast = History(n, capacity=2000, raster_capacity=120)
    for i in range(300):
        fast.append(1 + 4 * i, i / 60, np.zeros(n, np.float32), np.zeros(n, np.uint8))
    panel.set_history(fast)
    panel.update_view()
    assert panel.samples_label.text().endswith("(engine faster than the poll)")
    assert panel.skip_rug.positions.shape == (0,) and "amber ticks" not in panel.samples_label.toolTip()


def test_a_done_beside_a_truncation_spike_stays_visible(qtbot, panel: PlotsPanel) -> None:
    """Seen: dones at frames a truncation spike 2-3 frames away shared a pixel column with were invisible."""
    history = panel.history
    n = history.num_envs
    for seq in range(1, 400):
        dones = np.zeros(n, np.uint8)
        truncs = np.zeros(n, np.uint8)
        if seq == 200:
            dones[:3] = 1
        if seq == 202:
            truncs[:] = 1
        history.append(seq, seq / 50, np.zeros(n, np.float32), dones, truncs)
    panel.resize(300, 700)  # about 1.3 frames a pixel: the two in one column or next to each other
    panel.show()
    qtbot.waitExposed(panel)
    panel.update_view()
    image = panel.graphics.grab().toImage()
    vb = panel.counts_plot.getViewBox()
    at = vb.mapViewToScene(QtCore.QPointF(200.5, 1.0))  # inside the done's bar (3 envs ended), under the spike
    colour = image.pixelColor(at.toPoint())
    dones = QtGui.QColor(pal.DONES)
    truncs = QtGui.QColor(pal.TRUNCATEDS)

    def dist(c: QtGui.QColor, d: QtGui.QColor) -> int:
        return abs(c.red() - d.red()) + abs(c.green() - d.green()) + abs(c.blue() - d.blue())

    assert dist(colour, dones) < dist(colour, truncs), colour.name()


def test_log_counts_show_a_few_dones_beside_a_truncation_spike_of_thousands(qtbot) -> None:
    """At 4096 envs a truncation spike of 4,000 squeezed dones of about 15 into the axis line (linear scale)."""
    n = 4096
    history = History(n, capacity=2000, raster_capacity=120)
    panel = PlotsPanel(history)
    qtbot.addWidget(panel)
    panel.resize(900, 700)
    panel.show()
    qtbot.waitExposed(panel)
    rng = np.random.default_rng(1)
    for seq in range(1, 301):
        dones = np.zeros(n, np.uint8)
        dones[rng.choice(n, 15, replace=False)] = 1
        truncs = np.zeros(n, np.uint8)
        if seq == 150:
            truncs[:4000] = 1
        history.append(seq, seq / 50, np.zeros(n, np.float32), dones, truncs)
    vb = panel.counts_plot.getViewBox()

    def dones_height_px() -> float:
        """How high a bar of 15 dones stands on screen."""
        ys = curve_xy(panel.dones_curve)[1]
        top = vb.mapViewToScene(QtCore.QPointF(100.0, float(ys[99])))
        bottom = vb.mapViewToScene(QtCore.QPointF(100.0, 0.0))
        return bottom.y() - top.y()

    panel.update_view()
    QtWidgets.QApplication.processEvents()
    linear = dones_height_px()
    assert not panel.log_counts
    assert linear < 0.01 * vb.height()  # squeezed to the axis line
    panel.log_counts_box.click()
    assert panel.log_counts
    panel.update_view()
    QtWidgets.QApplication.processEvents()
    view = history.window(panel.window_seconds, raster=False)
    np.testing.assert_allclose(curve_xy(panel.dones_curve)[1], np.log10(1.0 + view.done_count))
    np.testing.assert_allclose(curve_xy(panel.truncs_curve)[1], np.log10(1.0 + view.trunc_count))
    assert dones_height_px() > 0.25 * vb.height()  # 15 of 4,000 stands a third of the way up
    low, high = vb.viewRange()[1]
    assert low <= 0.0 and np.log10(4001.0) <= high < np.log10(4001.0) + 1.0  # the spike in view, fitted
    assert panel.counts_plot.getAxis("left").labelText == "ended (log)"  # "envs ended (log)" was cut at 1280x800
    # Ticks name counts: 0 and whole decades, labelled as counts.
    axis = panel.count_axis
    values = [v for _, level in axis.tickValues(low, high, vb.height()) for v in level]
    labels = axis.tickStrings(values, 1.0, 1.0)
    assert {"1", "10", "100", "1000"} <= set(labels), labels
    for v, text in zip(values, labels, strict=True):
        assert np.log10(1.0 + int(text)) == pytest.approx(v)
    # On a short axis the labels keep clear of each other: the decades first, 0 only where it has room.
    for size in (40.0, 60.0, 90.0, 400.0):
        for top in (np.log10(65.0), np.log10(4097.0)):
            shown = sorted(v for _, level in axis.tickValues(0.0, top * 1.05, size) for v in level)
            gaps = np.diff(np.asarray(shown)) * size / (top * 1.05)
            assert shown and (gaps >= axis._label_px()).all(), (size, top, shown)
            assert np.log10(2.0) in shown or size * np.log10(11.0) / (top * 1.05) < 2 * axis._label_px()
    # Back to linear: the counts themselves again.
    panel.set_log_counts(False)
    assert not panel.log_counts_box.isChecked()
    panel.update_view()
    np.testing.assert_array_equal(curve_xy(panel.dones_curve)[1], view.done_count)
    assert panel.counts_plot.getAxis("left").labelText == "envs ended"
    assert axis.tickStrings([0.0, 1000.0], 1.0, 1000.0) == ["0", "1000"]


def test_switching_to_log_counts_hands_a_zoomed_counts_range_back_to_the_panel(panel: PlotsPanel) -> None:
    """A y range zoomed in counts means nothing in log10(1 + count): the panel fits the new scale."""
    feed(panel.history, 300)
    panel.update_view()
    vb = panel.counts_plot.getViewBox()
    vb.setYRange(0.0, 100.0, padding=0)  # the user's zoom, in counts
    vb.sigRangeChangedManually.emit([False, True])
    panel.update_view()
    assert vb.viewRange()[1][1] == pytest.approx(100.0)  # theirs while linear
    panel.set_log_counts(True)
    high = float(np.nanmax(curve_xy(panel.truncs_curve)[1]))
    assert vb.viewRange()[1][1] < 10.0 and vb.viewRange()[1][1] >= high


def test_switching_log_counts_while_paused_fits_the_new_scale(panel: PlotsPanel) -> None:
    """Paused, the curves were redrawn on the new scale but the y range stayed the old one's: flat, or cut off."""
    history = panel.history
    n = history.num_envs
    for seq in range(1, 301):
        truncs = np.zeros(n, np.uint8)
        if seq == 150:
            truncs[:] = 1  # 16 envs at once
        history.append(seq, seq / 50, np.zeros(n, np.float32), np.zeros(n, np.uint8), truncs)
    panel.update_view()
    vb = panel.counts_plot.getViewBox()
    assert 16.0 <= vb.viewRange()[1][1] < 30.0
    panel.set_paused(True)
    panel.set_log_counts(True)
    low, high = vb.viewRange()[1]
    assert low <= 0.0 and np.log10(17.0) <= high < 2.0  # log10(1 + 16) = 1.23 in view, not flat on the axis
    panel.set_log_counts(False)
    assert 16.0 <= vb.viewRange()[1][1] < 30.0  # the spike whole again, not cut at 1.4
