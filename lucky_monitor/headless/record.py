"""``lucky-monitor record``: the image grid (or one env) to a video file through ffmpeg.

Theory of operation
-------------------
The session follows the segment at the poll rate without copying pixels
(``images=False``: it follows ``image_seq``). Output frame ``k`` is due at
``start + k / fps``. When it is due and the engine has published a new image
since the last frame, one consistent copy is taken under the image seqlock
(:meth:`~lucky_monitor.core.session.MonitorSession.snapshot`, the same copy
``snapshot`` writes as PNG: RGB, row 0 at the top, ``ceil(sqrt(N))`` columns,
no gaps); otherwise, or when every attempt of that copy was torn, the previous
frame is repeated. A torn copy never reaches the file. So the video runs at
wall-clock speed, and each of its frames is an image the engine published
whole.

Frames go to ``imageio-ffmpeg``'s writer (H.264 in yuv420p, the format every
player reads), padded by at most one black row and column to even sides, which
yuv420p needs. The ffmpeg child runs in its own process group, so Ctrl-C in
the terminal reaches only this process: it stops taking frames, closes the
writer (ffmpeg writes the index) and exits 0 with a playable file. A progress
bar (tqdm) on stderr counts frames.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.argtypes import ranged, seconds_between
from ..core.outputs import check_output_path
from ..core.session import MonitorSession, Tick
from ..protocol.errors import LuckyMonitorError, UnavailableError, UsageError
from ._common import COLS_ARG, ENV_ARG, HOPELESS_GRACE_S, TIMEOUT_ARG, hopeless, image_target, require

__all__ = ["RecordStats", "add_record_arguments", "even_frame", "record", "run_record"]

#: Largest catch-up: frames repeated at once when the loop fell behind (more are dropped from the timeline).
MAX_CATCH_UP = 8


class RecordError(LuckyMonitorError):
    """ffmpeg could not be started or refused the frames."""


@dataclass
class RecordStats:
    """What a recording holds."""

    frames: int = 0  # written to the file
    new_images: int = 0  # frames that carried an image not written before
    repeats: int = 0  # frames that repeat the previous one (no new image, or a torn copy)
    torn: int = 0  # due frames whose copy was torn every time (never written)
    width: int = 0
    height: int = 0
    interrupted: bool = False
    ended: str = (
        "done"  # or "stopped by Ctrl-C" / "by SIGTERM", the link's state when it let go (e.g. "engine exited
        # (engine pid N is gone)", "incompatible: ..."), "segment recreated with another geometry"
    )


def add_record_arguments(p: argparse.ArgumentParser) -> None:
    """The ``record`` subcommand's options (the segment NAME is added by the CLI)."""
    p.add_argument(
        "-o", "--output", metavar="FILE.mp4", required=True, help="the video file to write (.mp4, .mkv or .mov)"
    )
    p.add_argument(
        "--seconds",
        type=seconds_between(0.01, 1e7),
        default=None,
        metavar="S",
        help="stop after S seconds of video (default: Ctrl-C)",
    )
    p.add_argument(
        "--fps",
        type=ranged(float, 0.1, 240, "frames per second, 0.1 to 240"),
        default=30.0,
        metavar="F",
        help="frames per second of the video, 0.1 to 240 (default 30)",
    )
    p.add_argument("--env", type=ENV_ARG, default=None, metavar="I", help="only env I's image (default: the grid)")
    p.add_argument("--cols", type=COLS_ARG, default=None, metavar="C", help="grid columns (default: ceil(sqrt(envs)))")
    p.add_argument(
        "--timeout",
        type=TIMEOUT_ARG,
        default=5.0,
        metavar="S",
        help="seconds to wait for the segment and its first consistent image, 0.01 to 3600 (default 5)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def even_frame(img: np.ndarray) -> np.ndarray:
    """``img`` padded with black to even width and height (yuv420p halves both for colour)."""
    h, w = img.shape[:2]
    if h % 2 == 0 and w % 2 == 0:
        return np.ascontiguousarray(img)
    out = np.zeros((h + h % 2, w + w % 2, 3), np.uint8)
    out[:h, :w] = img
    return out


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[dict[str, bool]]:
    stop = {"now": False}

    def on_signal(signum: int, _frame: object) -> None:
        stop["now"] = True
        stop["term"] = signum == signal.SIGTERM

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def record(
    session: MonitorSession,
    path: str,
    *,
    fps: float,
    seconds: float | None,
    env: int | None,
    columns: int | None,
    timeout_s: float,
    stop: dict[str, bool],
    progress: Callable[[int | None], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RecordStats:
    """Record until ``seconds`` of video are written or ``stop["now"]`` is set; return what was written.

    Raises
    ------
    UsageError
        ``env`` or ``columns`` out of range for the segment.
    UnavailableError
        No image region, or no consistent copy of the first frame within ``timeout_s``.
    RecordError
        ffmpeg failed.
    """
    import imageio_ffmpeg

    tick, cols = image_target(session, timeout_s, env, columns)

    def copy() -> np.ndarray | None:
        return session.snapshot(env, columns=None if env is not None else cols, gap=None if env is not None else 0)

    first: np.ndarray | None = None
    began = clock()
    deadline = began + timeout_s
    while first is None:
        tick = session.step(clock())
        if tick.live is not None and tick.live.image_seq >= 2:
            first = copy()
        if first is None:
            why = f" ({tick.reason})" if tick.reason else ""
            if clock() >= deadline or stop["now"]:
                raise UnavailableError(f"no consistent copy of the images within {timeout_s:g} s: {tick.text}{why}")
            if clock() - began >= HOPELESS_GRACE_S and hopeless(tick):  # an engine dead inside a write: for good
                raise UnavailableError(f"no consistent copy of the images: {tick.text}{why}")
            time.sleep(1 / 60)
    last_seq = tick.live.image_seq if tick.live is not None else 0
    frame = even_frame(first)
    stats = RecordStats(width=frame.shape[1], height=frame.shape[0])
    total = None if seconds is None else max(1, round(seconds * fps))
    try:
        writer = imageio_ffmpeg.write_frames(
            path,
            (frame.shape[1], frame.shape[0]),
            fps=fps,
            codec="libx264",
            pix_fmt_in="rgb24",
            pix_fmt_out="yuv420p",
            macro_block_size=1,
            quality=None,
            output_params=["-crf", "18", "-preset", "veryfast"],
            ffmpeg_log_level="error",
        )
        writer.send(None)
    except (OSError, RuntimeError) as exc:
        raise RecordError(f"could not start ffmpeg: {_ffmpeg_text(exc)}") from None
    start = clock()
    pending_new = True  # the first frame is a new image
    try:
        while not stop["now"] and (total is None or stats.frames < total):
            now = clock()
            due = math.floor((now - start) * fps) + 1 - stats.frames
            if due <= 0:
                time.sleep(min(1 / 60, (stats.frames - (now - start) * fps) / fps + 1e-4))
                tick = session.step(clock())
                if tick.header is None:
                    stats.ended = _detached(tick)  # the video ends with its last image
                    break
                continue
            tick = session.step(now)
            if tick.header is None:
                stats.ended = _detached(tick)
                break
            if not pending_new and tick.live is not None and tick.live.image_seq != last_seq:
                img = copy()
                if img is None:
                    stats.torn += 1
                else:
                    frame = even_frame(img)
                    if frame.shape[:2] != (stats.height, stats.width):
                        stats.ended = "segment recreated with another geometry"  # the video ends here
                        break
                    last_seq, pending_new = tick.live.image_seq, True
            writes = min(due, MAX_CATCH_UP)
            if total is not None:
                writes = min(writes, total - stats.frames)
            for _ in range(writes):
                writer.send(frame)
                stats.frames += 1
                if pending_new:
                    stats.new_images += 1
                    pending_new = False
                else:
                    stats.repeats += 1
            if due > writes and total is None:
                start += (due - writes) / fps  # fell behind by more than the catch-up: move the timeline on
            if progress is not None:
                progress(writes)
    except (OSError, RuntimeError) as exc:
        raise RecordError(f"ffmpeg stopped taking frames: {_ffmpeg_text(exc)}") from None
    finally:
        stats.interrupted = stop["now"]
        if stats.interrupted:
            stats.ended = "stopped by SIGTERM" if stop.get("term") else "stopped by Ctrl-C"
        try:
            writer.close()
        except (OSError, RuntimeError) as exc:
            raise RecordError(f"ffmpeg could not finish {path!r}: {_ffmpeg_text(exc)}") from None
    return stats


#: Containers ffmpeg picks by the file's extension that take H.264 in yuv420p.
VIDEO_EXTENSIONS = (".mp4", ".mkv", ".mov")


def _detached(tick: Tick) -> str:
    """Why the recording ends when the session lets go of the segment: the link's own words.

    (``engine gone`` had been said for a header rewritten under a live engine as well.)
    """
    text = tick.text or "engine gone"
    return f"{text} ({tick.reason})" if tick.reason else text


def _ffmpeg_text(exc: BaseException) -> str:
    """An ffmpeg failure in one line: imageio-ffmpeg appends the whole command (ffmpeg has printed its own words)."""
    text = str(exc).split(" FFMPEG COMMAND:", 1)[0].strip()
    return (text.splitlines() or ["no reason given"])[0]


def check_record_arguments(args: argparse.Namespace) -> None:
    """What can be checked before the segment is looked up (a usage error, exit 2)."""
    check_output_path(args.output, "-o", "recording.mp4")
    if not str(args.output).lower().endswith(VIDEO_EXTENSIONS):
        raise UsageError(
            f"-o {args.output}: the video's format comes from its extension: {', '.join(VIDEO_EXTENSIONS)}"
        )
    if args.env is not None and args.cols is not None:
        raise UsageError(f"--cols lays out the grid; with --env {args.env} one env is recorded")
    if args.seconds is not None and args.seconds * args.fps < 1:
        # one frame would be a video of 1/fps seconds, longer than asked for
        raise UsageError(f"--seconds {args.seconds:g} at --fps {args.fps:g} is less than one frame")


def run_record(args: argparse.Namespace, name: str) -> int:
    """``record``: write the video, with a progress bar; exit 0 when done or stopped by Ctrl-C."""
    check_record_arguments(args)
    require("imageio_ffmpeg", "record")
    require("tqdm", "record")
    from tqdm import tqdm

    session = MonitorSession.read_only(name, allow_other_user=bool(getattr(args, "allow_other_user", False)))
    total = None if args.seconds is None else max(1, round(args.seconds * args.fps))
    bars: list[Any] = []  # the bar appears with the first frame written, never before an error about the setup

    def progress(n: int | None) -> None:
        if not bars:
            bars.append(tqdm(total=total, unit="frame", file=sys.stderr, disable=args.quiet, desc=f"recording {name}"))
        bars[0].update(n)

    try:
        with _stop_on_signals() as stop:
            stats = record(
                session,
                args.output,
                fps=args.fps,
                seconds=args.seconds,
                env=args.env,
                columns=args.cols,
                timeout_s=args.timeout,
                stop=stop,
                progress=progress,
            )
    finally:
        for bar in bars:
            bar.close()
        session.close()
    print(
        f"{stats.ended}: {stats.frames} frame{'' if stats.frames == 1 else 's'} "
        f"({stats.frames / args.fps:.1f} s at {args.fps:g} fps, "
        f"{stats.width}x{stats.height}) written to {args.output}: {stats.new_images} new images, "
        f"{stats.repeats} repeats, {stats.torn} torn copies skipped"
    )
    return 0
