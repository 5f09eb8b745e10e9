"""Screenshots of the 4096-env overview and a zoomed-in view, for the README.

Starts the reference engine at 4096 envs x 64x64 RGB, opens the monitor window
(offscreen unless a display is set), lets it follow for a few seconds, saves the
whole window with the grid fitted, then zooms the grid onto a few tiles and saves
again. Usage: ``python scripts/shots_4096.py OUT_DIR``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    parser = argparse.ArgumentParser(description="Screenshots of the 4096-env overview and a zoomed-in view (README).")
    parser.add_argument("out_dir", nargs="?", default="assets/screenshots", help="where the PNGs go")
    out = parser.parse_args().out_dir
    os.makedirs(out, exist_ok=True)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    name = f"LuckyEngine_shots_{os.getpid()}"
    eng = subprocess.Popen(
        [sys.executable, "-m", "lucky_monitor", "sim", "--name", name, "--envs", "4096", "--image", "64x64"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert eng.stdout is not None
        if eng.stdout.readline().strip() != name:
            raise SystemExit("the engine did not start")
        from _shot_window import open_window
        from PySide6 import QtCore

        win, run = open_window(name)

        run(6.0)
        win.grid.reset_zoom()
        run(2.0)
        win.grab().save(os.path.join(out, "overview_4096.png"))
        if win.last_tick and win.last_tick.image:
            img = win.last_tick.image
            print(
                f"overview: step {img.step}, display {img.grid.shape[1]}x{img.grid.shape[0]} px, "
                f"view {win.grid.view_request}",
                flush=True,
            )
        geo = win.last_tick.image.layout if win.last_tick and win.last_tick.image else None
        if geo is not None:
            x0, y0 = geo.tile_origin(geo.columns * 3 + 3)
            win.grid.view_box.setRange(
                QtCore.QRectF(x0, y0, 4 * (geo.width + geo.gap), 2 * (geo.height + geo.gap)), padding=0
            )
            run(6.0)  # the zoom's own work (a new layout, the helper's shrink stopped) out of the CPU line
            win.grab().save(os.path.join(out, "zoomed_4096.png"))
        win.close()
    finally:
        eng.terminate()
        eng.wait(10)
        if eng.stdout is not None:
            eng.stdout.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
