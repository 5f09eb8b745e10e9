"""Image-region checks: what a person verifies by eye, done once a second on a bounded sample.

Theory of operation
-------------------
Once per :attr:`ImageChecker.period_s` the session copies a sample of tiles
under the image seqlock (a consistent copy: one publication) and calls
:meth:`ImageChecker.check`. The sample is a window of at most ``sample``
consecutive envs (fewer when tiles are large: at most ``max_bytes`` are
copied) that advances by half its length each check, so every env is seen in
two consecutive checks and the whole grid is covered in turn. Findings:

* ``constant``: every byte of the tile is the same value (a camera that does
  not render: black, white or a clear colour);
* ``duplicate``: the tile is byte-identical to another sampled env's tile
  (an env-assignment bug), constant tiles excepted (reported as constant);
* ``frozen``: the tile is byte-identical to the same env's tile at the
  previous check although images were published in between, while its
  env's observation moved at least :data:`FROZEN_FACTOR` times as much as
  the other sampled envs on average and as the median of the envs whose tiles did change (at least
  :data:`MIN_MOVING` of them are needed as a reference). Each dim's change
  is measured in units of the mean change of that dim over the *other*
  sampled envs (so the average motion is about 1, one env's outlier does not
  set its own scale, and a clock-like feature every env shares counts the
  same for all): a balanced pole that stands still while its episode
  clock runs draws the same pixels and is not flagged, nor is a pole that
  sways by less than a pixel while its velocities change sign; a camera
  stuck on a swinging pole is. Measured on the reference engine with 64
  envs over a minute: half of the envs' motions are under 0.5, 99 % under
  12, swinging ones 5-36, and still tiles reached 2.2 (why the factor is 4,
  not 2, which raised an alarm on a healthy demo within seconds). The check prefers
  missing a frozen tile among envs that all move alike to calling a still
  scene frozen. The two sightings compared are at least :data:`MIN_FRAMES`
  image frames apart: an env seen again sooner (an engine slower than the
  checks, or an env in two consecutive sample windows) is compared with
  its older sighting later, the episode ends since then remembered. Over a
  few frames a nearly still env's velocities can change many times as much
  as the others' while its pixels stay put: at 4096 envs with the engine at
  5 frames a second, a balanced pole was called frozen on two sightings 5
  frames apart;
* ``lag``: ``frame_seq - image_frame_seq`` exceeds what the measured camera
  rate explains (``2 * frames_per_s / images_per_s + 2`` frames, or two
  seconds of frames when no image came in the last second) while the Camera
  service is on. The session reads ``frame_seq`` before it copies the sample
  (and ``image_frame_seq`` with it), so a monitor held up between the two
  reads sees less lag than there is, never more.

Tiles are compared by the CRC-32 of their bytes (per tile, so the cost is one
pass over the sample, a quarter of a 64-bit BLAKE2b's). Two tiles of one check
with the same CRC are compared byte for byte before they are called
duplicates; a tile whose CRC is the one of the previous check is taken as
unchanged (a changed tile keeps its CRC by chance once in 2^32, and must then
also pass the motion test above to raise an alarm). State kept between checks
is, per env seen (at most ``num_envs`` entries), the CRC and the first
:data:`OBS_KEPT` elements of its observation. This module is Qt-free
and does no I/O: the session hands it the sample.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from .inspector import Alarm

__all__ = ["FROZEN_FACTOR", "MIN_FRAMES", "MIN_MOVING", "OBS_KEPT", "ImageCheckResult", "ImageChecker"]

#: Sampled envs whose tiles changed, needed as the reference of the frozen check.
MIN_MOVING = 3
#: A frozen tile's env moved at least this many times the other envs' average and the median moving env.
FROZEN_FACTOR = 4.0
#: Image frames at least between the two sightings of an env the frozen check compares (half a second at 50 Hz).
MIN_FRAMES = 25
#: Elements of each env's observation kept between checks (as float64: 2 MiB of state at 4096 envs).
OBS_KEPT = 64


@dataclass(frozen=True, slots=True)
class ImageCheckResult:
    """One check: the alarms raised and the badges (env → kinds) of the sampled envs."""

    alarms: tuple[Alarm, ...]
    flags: dict[int, tuple[str, ...]]
    envs: tuple[int, ...]


def _motion(deltas: np.ndarray) -> np.ndarray:
    """Per env, the mean over dims of ``|change| / (mean |change| of that dim over the other envs)``; NaN-safe.

    Dims no other env changed are left out for that env (zero where none is left).
    """
    a = np.abs(deltas)
    a[~np.isfinite(a)] = 0.0
    k = a.shape[0]
    if k < 2:
        return np.zeros(k)
    others = (a.sum(axis=0) - a) / (k - 1)  # leave-one-out: an outlier does not dilute its own scale
    used = others > 0
    ratio = np.divide(a, others, out=np.zeros_like(a), where=used)
    count = used.sum(axis=1)
    return np.asarray(np.divide(ratio.sum(axis=1), count, out=np.zeros(k), where=count > 0), np.float64)


class ImageChecker:
    """Bounded, periodic checks of the image region.

    Parameters
    ----------
    num_envs, tile_bytes
        The region's geometry (``tile_bytes = W * H * C``).
    sample
        Envs per check at most.
    max_bytes
        Bytes copied per check at most (fewer envs for large tiles, at least one).
    period_s
        Seconds between checks.
    """

    def __init__(
        self,
        num_envs: int,
        tile_bytes: int,
        *,
        sample: int = 64,
        max_bytes: int = 8 * 1024 * 1024,
        period_s: float = 1.0,
    ) -> None:
        self.num_envs = int(num_envs)
        self.count = max(1, min(self.num_envs, int(sample), int(max_bytes) // max(1, int(tile_bytes))))
        self.period_s = float(period_s)
        self._start = 0
        self._next = 0.0
        # env -> its sighting the frozen check compares with: (CRC-32, obs head, image_seq, image_frame_seq,
        # an episode ended since)
        self._last: dict[int, tuple[int, np.ndarray | None, int, int, bool]] = {}
        self._flags: dict[int, tuple[str, ...]] = {}

    def due(self, now: float) -> bool:
        return now >= self._next

    def retry(self, now: float, after_s: float = 0.1) -> None:
        """The sample could not be copied consistently (the engine kept writing): try again soon."""
        self._next = now + after_s

    def envs(self) -> np.ndarray:
        """The envs of the next check (sorted)."""
        n, k = self.num_envs, self.count
        return np.sort((self._start + np.arange(k)) % n)

    def check(
        self,
        now: float,
        envs: np.ndarray,
        tiles: np.ndarray,
        *,
        image_seq: int,
        image_frame_seq: int,
        frame_seq: int,
        obs_rows: np.ndarray | None = None,
        frames_per_s: float | None = None,
        images_per_s: float | None = None,
        camera_on: bool = True,
        ended: np.ndarray | None = None,
    ) -> ImageCheckResult:
        """Check ``tiles`` (``(k, H, W, C)`` uint8, one consistent copy) of ``envs``.

        ``obs_rows`` are the same envs' observation rows of the newest frame
        (``None``: unknown, no frozen check). ``ended``: per env of ``envs``,
        whether its episode ended (done or truncated) since its last check: a
        reset's jump of the observation is not motion, so such an env is not
        judged frozen this time. Advances the sample window.
        """
        self._next = now + self.period_s
        if self.num_envs > self.count:
            self._start = (self._start + max(1, self.count // 2)) % self.num_envs
        k = len(envs)
        env_list = [int(e) for e in envs]
        alarms: list[Alarm] = []
        flags: dict[int, list[str]] = {}
        if k:
            flat = np.ascontiguousarray(tiles.reshape(k, -1))
            constant = (flat.min(axis=1) == flat.max(axis=1)).tolist()
            digests = [zlib.crc32(row) for row in flat]
            seen: dict[int, list[int]] = {}  # CRC -> indices in the sample of the distinct tiles with it
            for i, env in enumerate(env_list):
                if constant[i]:
                    value = int(flat[i, 0])
                    flags.setdefault(env, []).append("constant")
                    alarms.append(Alarm("image", env, None, "constant", image_frame_seq, f"every byte {value}"))
                    continue
                same = seen.setdefault(digests[i], [])
                twin = next((j for j in same if np.array_equal(flat[j], flat[i])), None)  # byte for byte
                if twin is None:
                    same.append(i)
                    continue
                first = env_list[twin]
                for e in (first, env):
                    if "duplicate" not in flags.get(e, []):
                        flags.setdefault(e, []).append("duplicate")
                alarms.append(Alarm("image", env, None, "duplicate", image_frame_seq, f"same as env {first}"))
            kept = None if obs_rows is None else np.array(obs_rows[:, :OBS_KEPT], np.float64)
            heads: list[np.ndarray | None] = [None] * k if kept is None else [row.copy() for row in kept]
            candidates: list[tuple[int, int, bool]] = []  # (index in sample, env, tile changed)
            deltas: list[np.ndarray] = []
            too_soon: set[int] = set()  # envs seen again too soon: their older sighting stays the reference
            for i, env in enumerate(env_list):
                head = heads[i]
                prev = self._last.get(env)
                ended_now = ended is not None and bool(ended[i])
                if prev is not None and 0 <= image_frame_seq - prev[3] < MIN_FRAMES:
                    self._last[env] = (*prev[:4], prev[4] or ended_now)
                    too_soon.add(env)
                    continue
                if (
                    prev is not None
                    and not constant[i]
                    and not ended_now
                    and not prev[4]
                    and image_seq != prev[2]
                    and head is not None
                    and prev[1] is not None
                    and prev[1].shape == head.shape
                ):
                    candidates.append((i, env, prev[0] != digests[i]))
                    deltas.append(head - prev[1])
            if candidates:
                motion = _motion(np.stack(deltas))
                moving = [m for (_, _, changed), m in zip(candidates, motion, strict=True) if changed]
                if len(moving) >= MIN_MOVING:
                    bar = FROZEN_FACTOR * max(1.0, float(np.median(moving)))
                    for (_, env, changed), m in zip(candidates, motion, strict=True):
                        if not changed and m >= bar:
                            flags.setdefault(env, []).append("frozen")
                            alarms.append(
                                Alarm(
                                    "image",
                                    env,
                                    None,
                                    "frozen",
                                    image_frame_seq,
                                    "tile unchanged while its obs changed",
                                )
                            )
            for i, env in enumerate(env_list):
                if env not in too_soon:
                    self._last[env] = (digests[i], heads[i], image_seq, image_frame_seq, False)
        lag = frame_seq - image_frame_seq
        if camera_on and frames_per_s is not None and frames_per_s > 0 and images_per_s is not None:
            explained = 2.0 * frames_per_s / images_per_s + 2 if images_per_s > 0 else 2.0 * frames_per_s + 2
            if lag > explained:
                alarms.append(
                    Alarm("image", None, None, "lag", frame_seq, f"lag {lag} frames, {math.ceil(explained)} explained")
                )
        for env in env_list:  # sampled envs' badges are replaced, others kept
            self._flags.pop(env, None)
        self._flags.update({e: tuple(v) for e, v in flags.items()})
        return ImageCheckResult(tuple(alarms), dict(self._flags), tuple(env_list))
