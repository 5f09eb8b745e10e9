"""Qt set-up for the GUI tests: offscreen platform before any Qt import, shared fixtures."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest


@pytest.fixture
def grid_widget(qtbot):
    """A shown :class:`ImageGridWidget`, 640x520, exposed and ready to paint."""
    from lucky_monitor.ui.image_grid import ImageGridWidget

    widget = ImageGridWidget()
    qtbot.addWidget(widget)
    widget.resize(640, 520)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


@pytest.fixture
def solid_images():
    """Factory: ``(n, h, w, 3)`` images, each env one distinct solid colour."""

    def make(n: int, h: int, w: int, channels: int = 3) -> np.ndarray:
        env = np.arange(n)
        colours = np.stack([(env * 37 + 20) % 256, (env * 91 + 60) % 256, (env * 53 + 100) % 256], axis=1)
        if channels == 4:
            colours = np.concatenate([colours, np.full((n, 1), 255)], axis=1)
        return np.broadcast_to(colours[:, None, None, :], (n, h, w, channels)).astype(np.uint8)

    return make


def pytest_collection_modifyitems(config, items):
    """The offscreen platform warns about window-manager calls it cannot do; that is not a failure."""
    here = os.path.dirname(__file__)
    marker = pytest.mark.qt_log_ignore(r"^This plugin does not support ")
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(marker)
