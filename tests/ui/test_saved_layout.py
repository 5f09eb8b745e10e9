"""A saved window layout meets a smaller screen: restored where it fits, the default layout where it cannot.

Seen: settings saved on a 1920x1080 screen with the Inspector split off into
its own dock (the right column then needed about 880 px of height) came back
on a 1280x800 screen as a window taller than the screen, its status bar and
the bottom of the RPC panel off it. The tests split off the Inspector and the
RPC panel below the command traffic: a right column of four docks.

The fit rule is checked directly (:func:`layout_fits`,
:func:`first_start_size`); the window itself in child processes, each on the
offscreen platform with one screen of a given size (its ``configfile``
option; the platform is chosen once per process), saving and restoring
through one settings file as consecutive starts of ``lucky-monitor`` do.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QRect, QSize

from lucky_monitor.ui.main_window import DEFAULT_SIZE, LAYOUT_RESET_TEXT, first_start_size, layout_fits

CHILD = Path(__file__).with_name("saved_layout_child.py")
SMALL = (1280, 800)
LARGE = (1920, 1080)

pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------------ the rule
@pytest.mark.parametrize(
    ("needed", "window", "fits"),
    [
        (QSize(1241, 738), None, True),  # the default layout on 1280x800
        (QSize(1241, 863), None, False),  # the Inspector in a dock of its own: too tall
        (QSize(1300, 700), None, False),  # too wide
        (QSize(1241, 738), QRect(0, 0, 1600, 1000), True),  # partly off: Qt moves and clamps a restored window
        (QSize(1241, 738), QRect(3000, 0, 1200, 700), False),  # wholly off the screen
        (QSize(1241, 738), QRect(-2000, -1000, 1200, 700), False),
    ],
)
def test_layout_fits_a_1280_by_800_screen(needed, window, fits) -> None:
    assert layout_fits(QRect(0, 0, *SMALL), needed, window, title_bar=24) is fits


def test_layout_fits_counts_the_title_bar_and_the_frame() -> None:
    available = QRect(0, 0, *SMALL)
    room = first_start_size(available, 24)
    assert layout_fits(available, room, None, 24)
    assert not layout_fits(available, room + QSize(0, 1), None, 24)
    assert not layout_fits(available, room + QSize(1, 0), None, 24)
    assert not layout_fits(available, room, None, 40)  # a taller title bar leaves less room


def test_first_start_size_is_the_default_where_the_screen_has_room() -> None:
    assert first_start_size(QRect(0, 0, *LARGE), 24) == QSize(*DEFAULT_SIZE)
    small = first_start_size(QRect(0, 0, *SMALL), 24)
    assert small.width() < SMALL[0] and small.height() + 24 < SMALL[1]
    assert small.width() > 1241 and small.height() > 738  # the default layout's least size fits in it
    short = first_start_size(QRect(0, 0, 1920, 900), 24)  # only the height is bounded
    assert short.width() == DEFAULT_SIZE[0] and short.height() + 24 < 900


# ---------------------------------------------------------------- the window
@pytest.fixture
def start(tmp_path, subprocess_env):
    """``start(screen, action)``: one start of the window on a screen of that size (one settings file for all)."""
    ini = tmp_path / "settings.ini"

    def run(screen: tuple[int, int], action: str = "report") -> dict:
        config = tmp_path / f"screen{screen[0]}x{screen[1]}.json"
        screens = [{"name": "screen", "x": 0, "y": 0, "width": screen[0], "height": screen[1], "logicalDpi": 96}]
        config.write_text(json.dumps({"screens": screens}))
        env = dict(subprocess_env, QT_QPA_PLATFORM=f"offscreen:configfile={config}", HOME=str(tmp_path))
        r = subprocess.run(
            [sys.executable, str(CHILD), str(ini), action], capture_output=True, text=True, env=env, timeout=90
        )
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    run.ini = ini  # type: ignore[attr-defined]
    return run


def _inside(frame: list[int], available: list[int]) -> bool:
    return QRect(*available).contains(QRect(*frame))


def test_a_saved_layout_too_tall_for_a_smaller_screen_gives_way_to_the_default_one(start) -> None:
    split = start(LARGE, "split")
    assert not split["inspector_tabbed"]
    saved = start.ini.read_bytes()

    shown = start(SMALL)
    assert shown["available"] == [0, 0, *SMALL]
    assert _inside(shown["frame"], shown["available"]), shown
    assert shown["inspector_tabbed"]  # the default layout: the Inspector a tab beside the RPC panel
    assert not shown["inspector_in_view"]  # ... behind it, as at a first start
    assert shown["needed"][1] < SMALL[1]
    assert shown["message"] == LAYOUT_RESET_TEXT
    assert not shown["state_label_visible"]  # the message is not drawn under the state label
    assert shown["settings_untouched_while_open"]  # the saved layout is replaced only at exit, as always
    assert start.ini.read_bytes() != saved

    again = start(SMALL)  # the layout saved at that exit fits: said once
    assert again["message"] == ""
    assert again["inspector_tabbed"] and _inside(again["frame"], again["available"]), again


def test_a_saved_layout_that_fits_the_screen_is_restored_as_saved(start) -> None:
    split = start(LARGE, "split")
    shown = start(LARGE)
    assert not shown["inspector_tabbed"] and shown["inspector_area"] == "RightDockWidgetArea"
    assert shown["inspector_in_view"]
    assert shown["frame"][2:] == split["frame"][2:]  # the saved size
    assert shown["needed"][1] > SMALL[1] - 24  # the layout the other test sets aside on 1280x800
    assert shown["message"] == ""


def test_a_saved_layout_that_fits_a_smaller_screen_is_restored_in_a_window_within_it(start) -> None:
    start(LARGE, "raise")  # the Inspector's tab in front: not the default, and it fits 1280x800
    shown = start(SMALL)
    assert shown["inspector_tabbed"] and shown["inspector_in_view"], shown
    assert _inside(shown["frame"], shown["available"]), shown
    assert shown["message"] == ""
