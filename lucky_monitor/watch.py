"""``lucky-monitor watch``: the monitor's session in a terminal, for SSH and for scripts.

The same :class:`~lucky_monitor.core.session.MonitorSession` the window uses,
stepped at 60 Hz, with no Qt and no writes: it never claims the tools channel
(it sends nothing), copies no pixels (image rates come from ``image_seq``)
and so can run beside a window. It prints

* a line on every change of link state (and of the segment's session), and
* a summary every ``--interval`` seconds: state, ``frame_seq``, frames/s,
  images/s, the lock-step turn split, reward mean/min/max and the done and
  truncated fractions over the interval, torn-read counts, the tools-channel
  owner, and the alarms raised since the previous line (NaN, ±Inf, large
  values in obs, actions and rewards: see ``core/inspector.py``).

``--json`` prints one JSON object per line instead, with the stable keys of
:data:`JSON_KEYS` (``event`` is ``"state"`` or ``"summary"``). Unknown values
are ``null``. It exits 0 after ``--seconds``, or on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from .core.argtypes import plain_number
from .core.pacing import paced
from .core.session import MonitorSession, Tick

__all__ = ["JSON_KEYS", "Watcher", "add_watch_arguments", "run_watch"]

#: Every key of a ``--json`` line, in order. A script may rely on each being present.
JSON_KEYS = (
    "event",  # "state" (the link state changed) or "summary" (every --interval)
    "time",  # wall clock, UTC ISO 8601
    "state",  # link state, e.g. "searching", "free-running", "connected", "engine exited"
    "text",  # the state line as the window shows it
    "reason",  # why (an error, a stall), or null
    "name",  # segment name (followed or attached), or null
    "session_id",  # 16 hex digits, or null while detached
    "generation",  # bumps on every attach and detach
    "num_envs",
    "image",  # "WxHxC format" of the image region, "none" without one
    "frame_seq",
    "action_seq",
    "frames_per_s",
    "images_per_s",
    "engine_alive",
    "trainer_alive",  # null: no trainer attached
    "trainer_pid",
    "heartbeat_age_s",
    "engine_turn_share",  # share of lock-step polls in the engine's turn, null without a trainer
    "reward_mean",  # of the newest frame's rewards
    "reward_min",
    "reward_max",
    "done_fraction",  # dones per env per frame seen during the interval
    "truncated_fraction",
    "frames_seen",
    "frames_skipped",
    "torn_hot",
    "torn_images",
    "tools_owner_pid",  # 0 free, null when the engine exports no tools channel
    "alarms",  # value alarms since the previous line: [{region, env, dim, kind, frame_seq}], at most MAX_LISTED
    "nonfinite_total",  # NaN and ±Inf values seen per region {obs, actions, rewards}, null while detached
)

#: Alarms listed per line at most (distinct region/env/dim/kind, the newest frame of each); the rest are counted.
MAX_LISTED = 64


def add_watch_arguments(p: argparse.ArgumentParser) -> None:
    """The ``watch`` subcommand's options."""
    p.add_argument(
        "name",
        metavar="NAME",
        nargs="?",
        default=None,
        help="segment to follow (default: $LUCKY_SHM_NAME, else the newest live one, and its successors)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line (keys in the README)")
    p.add_argument("--seconds", type=_positive, default=None, help="stop after this many seconds (exit 0)")
    p.add_argument("--interval", type=_positive, default=1.0, help="seconds between summaries (default 1)")
    p.add_argument(
        "--allow-other-user",
        action="store_true",
        help="follow a segment owned by another user (refused by default)",
    )


def _positive(text: str) -> float:
    try:
        v = plain_number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return v


def _num(v: float | None, digits: int = 3) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return round(float(v), digits)


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "—" if v is None else format(v, spec)


class Watcher:
    """Turns Ticks into ``watch`` lines (text or JSON); Qt-free and clock-free for tests.

    Parameters
    ----------
    out
        Where lines go.
    json_lines
        One JSON object per line instead of text.
    interval
        Seconds between summaries.
    wall
        Wall-clock seconds (for the ``time`` field).
    """

    def __init__(
        self, out: TextIO, *, json_lines: bool = False, interval: float = 1.0, wall: Callable[[], float] = time.time
    ) -> None:
        self.out = out
        self.json = json_lines
        self.interval = interval
        self.wall = wall
        self._last_key: tuple[Any, ...] | None = None
        self._next_summary: float | None = None
        self._rewards: np.ndarray | None = None
        self._dones = 0
        self._truncs = 0
        self._frames = 0
        self._envs = 0
        self._generation: int | None = None
        self._alarms: dict[tuple[Any, ...], dict[str, Any]] = {}

    def feed(self, tick: Tick) -> None:
        """Take one Tick; print what is due."""
        if tick.generation != self._generation:
            self._generation = tick.generation
            self._rewards = None  # a new attach: nothing of the old session is reported
            self._dones = self._truncs = self._frames = 0
            self._alarms.clear()
        for a in tick.alarms.new:
            if len(self._alarms) < MAX_LISTED or a.key in self._alarms:
                self._alarms.pop(a.key, None)
                self._alarms[a.key] = a.to_json()
        f = tick.frame
        if f is not None:
            if self._rewards is None or self._rewards.shape != f.rewards.shape:
                self._rewards = np.empty_like(f.rewards)
            np.copyto(self._rewards, f.rewards)
            self._dones += int(np.count_nonzero(f.dones))
            if f.truncateds is not None:
                self._truncs += int(np.count_nonzero(f.truncateds))
            self._frames += 1
            self._envs = f.rewards.shape[0]
        key = (tick.state, tick.reason, tick.name, None if tick.header is None else tick.header.session_id)
        if key != self._last_key:
            self._last_key = key
            self._emit("state", tick)
        if self._next_summary is None:
            self._next_summary = tick.t + self.interval
        elif tick.t >= self._next_summary:
            self._next_summary += self.interval * max(1, math.floor((tick.t - self._next_summary) / self.interval) + 1)
            self._emit("summary", tick)
            self._dones = self._truncs = self._frames = 0

    def finish(self, tick: Tick) -> None:
        """At exit: take the last Tick, and summarise the last interval where over half of it has passed.

        ``--seconds 2 --interval 0.5`` printed three summaries: the one due at
        2 s came after the end.
        """
        self.feed(tick)
        if self._next_summary is not None and tick.t >= self._next_summary - self.interval / 2:
            self._emit("summary", tick)

    def record(self, event: str, tick: Tick) -> dict[str, Any]:
        """The JSON object of one line (every key of :data:`JSON_KEYS`)."""
        h, live, r, c = tick.header, tick.live, tick.rates, tick.counters
        rewards = self._rewards if tick.header is not None else None
        finite = None if rewards is None else rewards[np.isfinite(rewards)]
        per = self._frames * self._envs
        have_trunc = h is not None and h.truncateds_offset != 0
        rec: dict[str, Any] = {
            "event": event,
            "time": datetime.datetime.fromtimestamp(self.wall(), datetime.UTC).isoformat(timespec="milliseconds"),
            "state": tick.state.value,
            "text": tick.text,
            "reason": tick.reason,
            "name": tick.name,
            "session_id": None if h is None else f"{h.session_id:016x}",
            "generation": tick.generation,
            "num_envs": None if h is None else h.num_envs,
            "image": None
            if h is None
            else (f"{h.image_width}x{h.image_height}x{h.image_channels} {h.pixel_format}" if h.has_images else "none"),
            "frame_seq": None if live is None else live.frame_seq,
            "action_seq": None if live is None else live.action_seq,
            "frames_per_s": _num(r.frames_per_s, 2),
            "images_per_s": None if h is not None and not h.has_images else _num(r.images_per_s, 2),
            "engine_alive": tick.engine_alive,
            "trainer_alive": tick.trainer_alive,
            "trainer_pid": None if live is None else live.client_pid,
            "heartbeat_age_s": _num(tick.heartbeat_age_s),
            "engine_turn_share": _num(tick.engine_share),
            # over the finite rewards, as the window's plots and `export` (NaN and ±Inf: `nonfinite_total`)
            "reward_mean": None if finite is None or not finite.size else _num(float(finite.mean(dtype=np.float64))),
            "reward_min": None if finite is None or not finite.size else _num(float(finite.min())),
            "reward_max": None if finite is None or not finite.size else _num(float(finite.max())),
            "done_fraction": _num(self._dones / per, 4) if per else None,
            "truncated_fraction": _num(self._truncs / per, 4) if per and have_trunc else None,
            "frames_seen": c.frames_seen,
            "frames_skipped": c.frames_skipped,
            "torn_hot": c.torn_hot,
            "torn_images": c.torn_images,
            "tools_owner_pid": tick.tools.owner_pid if tick.tools.exported else None,
            "alarms": list(self._alarms.values()),
            "nonfinite_total": None if h is None else dict(tick.alarms.nonfinite_total),
        }
        return rec

    def _emit(self, event: str, tick: Tick) -> None:
        with np.errstate(all="ignore"):
            rec = self.record(event, tick)
        if self.json:
            line = json.dumps(rec, separators=(",", ":"))
        else:
            line = self._text(rec, tick)
        print(line, file=self.out, flush=True)
        self._alarms.clear()

    @staticmethod
    def _text(rec: dict[str, Any], tick: Tick) -> str:
        clock = rec["time"][11:19]
        if rec["event"] == "state":
            where = f"{rec['name']} " if rec["name"] and not tick.text.startswith(rec["name"]) else ""
            sid = f" session {rec['session_id']}" if rec["session_id"] else ""
            reason = f" — {rec['reason']}" if rec["reason"] else ""
            return f"{clock}  {where}{tick.text}{reason}{sid}"
        if rec["num_envs"] is None:
            return f"{clock}  {tick.text}"
        share = rec["engine_turn_share"]
        turn = "no trainer" if share is None else f"turn engine {share:.0%} / trainer {1 - share:.0%}"
        rew = (
            "reward —"
            if rec["reward_mean"] is None
            else f"reward {rec['reward_mean']:.3f} [{rec['reward_min']:.3f}, {rec['reward_max']:.3f}]"
        )
        done = "—" if rec["done_fraction"] is None else f"{rec['done_fraction']:.2%}"
        owner = rec["tools_owner_pid"]
        tools = "tools none" if owner is None else ("tools free" if owner == 0 else f"tools pid {owner}")
        return (
            f"{clock}  {tick.state.value:<18} frame {rec['frame_seq']:>9}  "
            f"{_fmt(rec['frames_per_s']):>7} frames/s  {_fmt(rec['images_per_s']):>6} images/s  {turn}  "
            f"{rew}  done {done}  torn hot {rec['torn_hot']} img {rec['torn_images']}  {tools}"
            + "".join(f"\n{clock}  ALARM {_alarm_text(a)}" for a in rec["alarms"])
        )


def _alarm_text(a: dict[str, Any]) -> str:
    dim = "" if a["dim"] is None else f" dim {a['dim']}"
    env = "" if a["env"] is None else f" env {a['env']}"
    return f"frame {a['frame_seq']} {a['region']}{env}{dim} {a['kind']}"


def run_watch(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run ``watch`` until ``--seconds`` pass or Ctrl-C; exit status 0."""
    import os

    from .transport.shm import validate_name

    name = args.name or os.environ.get("LUCKY_SHM_NAME") or None
    if name is not None:
        validate_name(name)
    session = MonitorSession.read_only(name, allow_other_user=bool(getattr(args, "allow_other_user", False)))
    watcher = Watcher(out or sys.stdout, json_lines=args.json, interval=args.interval)
    try:
        for now in paced(60.0, args.seconds):
            watcher.feed(session.step(now))
        watcher.finish(session.step())
    finally:
        session.close()
    return 0
