"""Screenshot of the inspector with alarms, for the README.

Runs the reference engine in this process with three faults injected where a
real engine would make them, before each frame is published: a NaN in env 5's
observation (dim 8), +Inf in env 7's reward, env 3's camera rendering nothing
and env 6 showing env 2's picture. A reference trainer drives it in lock-step
from a child process. The monitor window follows it; after a few seconds the
inspector is brought up with envs 5 and 2 selected and the window is saved.
Usage: ``python scripts/shot_inspector.py [OUT_DIR]`` (offscreen unless a
display is set; the README's picture was taken under Xvfb at 1920x1080).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FAULTY_ENGINE = """
import signal, sys
import numpy as np
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine

eng = ReferenceEngine(EngineConfig(name=sys.argv[1], num_envs=16, obs_size=12, act_size=2, image=(64, 64), hz=50.0))
advance, render = eng.sim.advance, eng.renderer.render


def faulty_advance(actions, obs, rewards, *rest, **kw):
    advance(actions, obs, rewards, *rest, **kw)
    obs[5, 8] = np.nan  # before the engine publishes the frame
    rewards[7] = np.inf


def faulty_render(sim, buf):
    render(sim, buf)
    buf[3] = 0  # env 3's camera renders nothing
    buf[6] = buf[2]  # env 6 shows env 2's picture


eng.sim.advance, eng.renderer.render = faulty_advance, faulty_render
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
print(eng.name, flush=True)
try:
    eng.run(lambda: bool(stop))
finally:
    eng.close()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description="Screenshot of the inspector with alarms, for the README.")
    parser.add_argument("out_dir", nargs="?", default="assets/screenshots", help="where the PNGs go")
    out = parser.parse_args().out_dir
    os.makedirs(out, exist_ok=True)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from _shot_window import open_window
    from PySide6 import QtCore

    name = f"LuckyEngine_shot_{os.getpid()}"
    engine = subprocess.Popen([sys.executable, "-c", FAULTY_ENGINE, name], stdout=subprocess.PIPE, text=True)
    assert engine.stdout is not None
    if engine.stdout.readline().strip() != name:
        raise SystemExit("the engine did not start")
    trainer = subprocess.Popen(
        [sys.executable, "-m", "lucky_monitor", "train", "--shm", name, "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        win, run = open_window(name)

        run(4.0)
        win.session.select([2, 5])
        win.grid.set_selection([2, 5])
        win.show_inspector()
        win.resizeDocks([win.inspector_dock], [560], QtCore.Qt.Orientation.Horizontal)
        run(3.0)
        path = os.path.join(out, "inspector_alarms.png")
        win.grab().save(path)
        print(path, *win.inspector.alarm_lines[:6], sep="\n", flush=True)
        win.close()
    finally:
        for child in (trainer, engine):
            child.terminate()
            child.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
