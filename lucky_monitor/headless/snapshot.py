"""``lucky-monitor snapshot``: the image region, exactly, as a PNG (no display, no Qt).

One consistent copy under the image seqlock
(:meth:`~lucky_monitor.core.session.MonitorSession.snapshot`): with ``--env``
that env's image as the engine wrote it, normalised to RGB with row 0 at the
top (BGR/BGRA reordered, alpha dropped, gray expanded, bottom-up rows
flipped); without it the grid of every env in row-major order with
``ceil(sqrt(N))`` columns (``--cols``), tiles touching, no labels. With
``--labels`` tiles are 2 pixels apart and each carries its env index in its
top-left corner. The pixels are never scaled or blended: a test can compare
them byte for byte with what the engine wrote.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from ..core.outputs import check_output_path
from ..core.session import MonitorSession
from ..protocol.errors import UsageError
from ..sim.font import render_text
from ._common import COLS_ARG, ENV_ARG, TIMEOUT_ARG, hopeless, image_target, wait_for
from .png import write_png

__all__ = ["LABEL_GAP", "add_snapshot_arguments", "label_tiles", "run_snapshot", "take_snapshot"]

#: Pixels between tiles with ``--labels`` (none without).
LABEL_GAP = 2


def add_snapshot_arguments(p: argparse.ArgumentParser) -> None:
    """The ``snapshot`` subcommand's options (the segment NAME is added by the CLI)."""
    p.add_argument("-o", "--output", metavar="FILE.png", required=True, help="the PNG to write (name it .png)")
    p.add_argument("--env", type=ENV_ARG, metavar="I", default=None, help="only env I's image (default: the grid)")
    p.add_argument("--cols", type=COLS_ARG, metavar="C", default=None, help="grid columns (default: ceil(sqrt(envs)))")
    p.add_argument("--labels", action="store_true", help="2-pixel gaps and each tile's env index in its corner")
    p.add_argument(
        "--timeout",
        type=TIMEOUT_ARG,
        default=5.0,
        metavar="S",
        help="seconds to wait for a consistent copy, 0.01 to 3600 (default 5)",
    )


def check_snapshot_arguments(args: argparse.Namespace) -> None:
    """What can be checked before the segment is looked up (a usage error, exit 2)."""
    check_output_path(args.output, "-o", "snapshot.png")
    if not os.fspath(args.output).lower().endswith(".png"):
        raise UsageError(f"-o {args.output}: snapshot writes a PNG; name the file .png")
    grid_only = [o for o, given in (("--cols", args.cols is not None), ("--labels", args.labels)) if given]
    if args.env is not None and grid_only:
        verb = "lays" if len(grid_only) == 1 else "lay"
        raise UsageError(f"{' and '.join(grid_only)} {verb} out the grid; with --env {args.env} one env is written")


def label_tiles(grid: np.ndarray, num_envs: int, height: int, width: int, columns: int, gap: int) -> None:
    """Stamp each tile's env index (white on black) into its top-left corner, in place."""
    scale = max(1, min(height, width) // 48)
    for env in range(num_envs):
        mask = render_text(str(env), scale)
        mh, mw = mask.shape
        pad = scale
        bh, bw = min(height, mh + 2 * pad), min(width, mw + 2 * pad)
        row, col = divmod(env, columns)
        y0, x0 = row * (height + gap), col * (width + gap)
        box = grid[y0 : y0 + bh, x0 : x0 + bw]
        box[...] = 0
        ink = mask[: bh - pad, : bw - pad]
        box[pad : pad + ink.shape[0], pad : pad + ink.shape[1]][ink] = 255


def take_snapshot(
    session: MonitorSession, *, env: int | None, columns: int | None, labels: bool, timeout_s: float
) -> np.ndarray:
    """One consistent copy of the attached segment's images (see the module docstring).

    Raises
    ------
    UsageError
        ``env`` or ``columns`` out of range for this segment.
    UnavailableError
        No image region, no image published, or no consistent copy within ``timeout_s``.
    """
    gap = LABEL_GAP if labels else 0
    tick, cols = image_target(session, timeout_s, env, columns, gap)
    wait_for(
        session,
        lambda t: t.live is not None and t.live.image_seq >= 2,
        timeout_s,
        "no image was published (image_seq 0)",
        hopeless=hopeless,
    )
    shot: list[np.ndarray] = []

    def copied(_: object) -> bool:
        img = session.snapshot(env, columns=None if env is not None else cols, gap=None if env is not None else gap)
        if img is not None:
            shot.append(img)
        return bool(shot)

    # An engine that dies inside a write leaves its images torn for good: said a second after, not at the timeout.
    what = "no consistent copy of the images (the engine never paused writing them)"
    wait_for(session, copied, timeout_s, what, hopeless=hopeless)
    out = shot[0]
    if labels:
        h = tick.header
        assert h is not None
        n = 1 if env is not None else h.num_envs
        label_tiles(out, n, h.image_height, h.image_width, 1 if env is not None else cols, gap)
    return out


def run_snapshot(args: argparse.Namespace, name: str) -> int:
    """``snapshot``: write the PNG; print its path and size."""
    check_snapshot_arguments(args)
    session = MonitorSession.read_only(name, allow_other_user=bool(getattr(args, "allow_other_user", False)))
    try:
        img = take_snapshot(session, env=args.env, columns=args.cols, labels=args.labels, timeout_s=args.timeout)
    finally:
        session.close()
    write_png(args.output, img)
    what = f"env {args.env}" if args.env is not None else "grid"
    print(f"{what} {img.shape[1]}x{img.shape[0]} written to {os.fspath(args.output)}")
    return 0
