"""Tiler: exact tiles against a naive per-env oracle, gaps, coordinates, geometry."""

from __future__ import annotations

import itertools
import tracemalloc
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lucky_monitor.core import tiler as tiler_module
from lucky_monitor.core.tiler import MAX_GRID_SIDE, Tiler, TilerError, shrink_tiles
from lucky_monitor.protocol.errors import LuckyMonitorError

FORMAT_CHANNELS = {"rgb": 3, "bgr": 3, "rgba": 4, "bgra": 4, "gray": 1}


def expected_tile(img: np.ndarray, fmt: str, flip: bool, swap: bool, alpha: bool) -> np.ndarray:
    """What one env's tile must hold, computed the slow obvious way."""
    img = img.reshape(img.shape[0], img.shape[1], -1)
    h, w, _ = img.shape
    out = np.empty((h, w, 4 if alpha else 3), np.uint8)
    if fmt == "gray":
        out[..., 0] = out[..., 1] = out[..., 2] = img[..., 0]
    else:
        r, g, b = (2, 1, 0) if fmt in ("bgr", "bgra") else (0, 1, 2)
        if swap:
            r, b = b, r
        out[..., 0], out[..., 1], out[..., 2] = img[..., r], img[..., g], img[..., b]
    if alpha:
        out[..., 3] = img[..., 3] if fmt in ("rgba", "bgra") else 255
    if flip:
        out = out[::-1]
    return out


def check_grid(t: Tiler, images: np.ndarray, fmt: str, flip: bool, swap: bool, alpha: bool, gap_rgb) -> None:
    grid = t.grid
    assert grid.flags.c_contiguous
    assert grid.shape == (t.grid_height, t.grid_width, 4 if alpha else 3)
    covered = np.zeros(grid.shape[:2], bool)
    for env in range(t.num_envs):
        x0, y0 = t.tile_origin(env)
        want = expected_tile(images[env], fmt, flip, swap, alpha)
        np.testing.assert_array_equal(grid[y0 : y0 + t.height, x0 : x0 + t.width], want, err_msg=f"env {env}")
        np.testing.assert_array_equal(t.tile_view(env), want)
        assert not covered[y0 : y0 + t.height, x0 : x0 + t.width].any(), "tiles overlap"
        covered[y0 : y0 + t.height, x0 : x0 + t.width] = True
    gaps = grid[~covered]
    np.testing.assert_array_equal(gaps[:, :3], np.broadcast_to(np.array(gap_rgb, np.uint8), (len(gaps), 3)))
    if alpha:
        assert (gaps[:, 3] == 255).all()


def random_images(rng, n, h, w, c):
    return rng.integers(0, 256, (n, h, w, c), dtype=np.uint8)


@pytest.mark.parametrize("fmt", ["rgb", "bgr", "rgba", "bgra", "gray"])
@pytest.mark.parametrize(("flip", "swap", "alpha"), list(itertools.product([False, True], repeat=3)))
def test_tiles_equal_source_for_every_format(fmt, flip, swap, alpha):
    rng = np.random.default_rng(zlib.crc32(repr((fmt, flip, swap, alpha)).encode()))
    n, h, w = 7, 5, 6  # 7 envs: 3 columns, partial last row with two empty slots
    c = FORMAT_CHANNELS[fmt]
    t = Tiler(n, h, w, c, gap=2, gap_value=40)
    images = random_images(rng, n, h, w, c)
    out = t.tile(images, src_format=fmt, flip_rows=flip, swap_rb=swap, show_alpha=alpha)
    assert out is t.grid
    check_grid(t, images, fmt, flip, swap, alpha, (40, 40, 40))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    h=st.integers(1, 9),
    w=st.integers(1, 9),
    fmt=st.sampled_from(sorted(FORMAT_CHANNELS)),
    gap=st.integers(0, 3),
    columns=st.one_of(st.none(), st.integers(1, 40)),
    flip=st.booleans(),
    swap=st.booleans(),
    alpha=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_tiles_exact_for_random_geometry(n, h, w, fmt, gap, columns, flip, swap, alpha, seed):
    c = FORMAT_CHANNELS[fmt]
    cols = None if columns is None else min(columns, n)
    t = Tiler(n, h, w, c, columns=cols, gap=gap, gap_value=(10, 20, 30))
    images = random_images(np.random.default_rng(seed), n, h, w, c)
    t.tile(images, src_format=fmt, flip_rows=flip, swap_rb=swap, show_alpha=alpha)
    check_grid(t, images, fmt, flip, swap, alpha, (10, 20, 30))
    assert t.rows == -(-n // t.columns)
    if cols is not None:
        assert t.columns == cols


def test_auto_format_follows_channels_and_gray_accepts_3d():
    rng = np.random.default_rng(1)
    for c, fmt in [(1, "gray"), (3, "rgb"), (4, "rgba")]:
        t = Tiler(3, 4, 4, c)
        images = random_images(rng, 3, 4, 4, c)
        t.tile(images)
        check_grid(t, images, fmt, False, False, False, (40, 40, 40))
    t = Tiler(3, 4, 4, 1)
    images = random_images(rng, 3, 4, 4, 1)
    t.tile(images[..., 0])
    check_grid(t, images, "gray", False, False, False, (40, 40, 40))


def test_read_only_and_strided_sources_are_fine():
    rng = np.random.default_rng(2)
    base = random_images(rng, 10, 8, 8, 3)
    src = base[::2]  # non-contiguous along env axis
    src.flags.writeable = False
    t = Tiler(5, 8, 8, 3, gap=1)
    t.tile(src, src_format="bgr", flip_rows=True)
    check_grid(t, src, "bgr", True, False, False, (40, 40, 40))


def test_grid_is_allocated_once_per_geometry():
    rng = np.random.default_rng(3)
    t = Tiler(6, 4, 4, 4, columns=3)
    grid = t.grid
    for _ in range(3):
        assert t.tile(random_images(rng, 6, 4, 4, 4)) is grid
    t.columns = 3  # same value: nothing to do
    assert t.grid is grid
    t.tile(random_images(rng, 6, 4, 4, 4), show_alpha=True)
    rgba = t.grid
    assert rgba is not grid and rgba.shape[2] == 4 and t.shows_alpha
    assert t.tile(random_images(rng, 6, 4, 4, 4), show_alpha=True) is rgba
    t.tile(random_images(rng, 6, 4, 4, 4))
    assert t.grid.shape[2] == 3


def test_tile_makes_no_frame_sized_temporary():
    rng = np.random.default_rng(4)
    n, h, w = 64, 48, 64
    cases = [(3, "rgb", False), (3, "bgr", True), (4, "bgra", False), (1, "gray", True)]
    for c, fmt, flip in cases:
        t = Tiler(n, h, w, c)
        images = random_images(rng, n, h, w, c)
        t.tile(images, src_format=fmt, flip_rows=flip)  # warm up
        tracemalloc.start()
        try:
            t.tile(images, src_format=fmt, flip_rows=flip)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < t.grid.nbytes // 16, (fmt, peak)


def test_columns_setter_replans_and_stays_exact():
    rng = np.random.default_rng(5)
    t = Tiler(10, 3, 5, 3, gap=1)
    images = random_images(rng, 10, 3, 5, 3)
    for cols in [1, 2, 3, 4, 7, 10]:
        before = t.grid
        t.columns = cols
        assert t.columns == cols and t.columns_setting == cols
        assert t.rows == -(-10 // cols)
        assert t.grid_width == cols * 6 - 1
        assert t.grid_height == t.rows * 4 - 1
        if before.shape != t.grid.shape:
            assert t.grid is not before
        t.tile(images)
        check_grid(t, images, "rgb", False, False, False, (40, 40, 40))
    t.columns = None
    assert t.columns_setting is None
    assert t.columns == Tiler(10, 3, 5, 3, gap=1).columns


@pytest.mark.parametrize(
    ("n", "h", "w", "cols"),
    [
        (1, 8, 8, 1),
        (2, 8, 8, 2),
        (3, 8, 8, 2),
        (5, 8, 8, 3),
        (16, 8, 8, 4),
        (17, 8, 8, 5),
        (256, 8, 8, 16),
        (16, 8, 32, 2),
        (16, 32, 8, 8),
    ],
)
def test_auto_columns_make_a_near_square_grid(n, h, w, cols):
    assert Tiler(n, h, w, 3, gap=0).columns == cols


def test_env_at_inverts_tile_origin_everywhere():
    t = Tiler(7, 3, 4, 3, columns=3, gap=2)
    seen = {}
    for y in range(-2, t.grid_height + 2):
        for x in range(-2, t.grid_width + 2):
            hit = t.env_at(x, y)
            if hit is None:
                continue
            env, px, py = hit
            x0, y0 = t.tile_origin(env)
            assert (x0 + px, y0 + py) == (x, y)
            assert 0 <= px < 4 and 0 <= py < 3
            seen[env] = seen.get(env, 0) + 1
            # fractions floor to the same pixel
            assert t.env_at(x + 0.99, y + 0.5) == hit
    assert seen == dict.fromkeys(range(7), 12)
    # gaps, empty slots, outside and junk are None
    assert t.env_at(4, 0) is None and t.env_at(5, 0) is None  # vertical gap
    assert t.env_at(0, 3) is None  # horizontal gap
    assert t.env_at(t.tile_origin(6)[0] + 6, t.tile_origin(6)[1]) is None  # empty slot after env 6
    for bad in [
        (-0.5, 0),
        (0, -1),
        (t.grid_width, 0),
        (0, t.grid_height),
        (float("nan"), 0),
        (0, float("inf")),
        ("x", 0),
        (None, 1),
    ]:
        assert t.env_at(*bad) is None


def test_env_and_parameter_errors_are_typed():
    t = Tiler(4, 2, 2, 3)
    for bad in [-1, 4, 1.5, True, "0"]:
        with pytest.raises(TilerError):
            t.tile_origin(bad)
        with pytest.raises(TilerError):
            t.tile_view(bad)
    bad_ctor = [
        dict(num_envs=0, height=2, width=2, channels=3),
        dict(num_envs=4097, height=2, width=2, channels=3),
        dict(num_envs=2, height=0, width=2, channels=3),
        dict(num_envs=2, height=2, width=5000, channels=3),
        dict(num_envs=2, height=2, width=2, channels=2),
        dict(num_envs=2, height=2, width=2, channels=5),
        dict(num_envs=2, height=2, width=2, channels=3, gap=-1),
        dict(num_envs=2, height=2, width=2, channels=3, gap=65),
        dict(num_envs=2, height=2, width=2, channels=3, gap_value=256),
        dict(num_envs=2, height=2, width=2, channels=3, gap_value=(1, 2)),
        dict(num_envs=2, height=2, width=2, channels=3, gap_value="red"),
        dict(num_envs=2, height=2, width=2, channels=3, columns=3),
        dict(num_envs=2, height=2, width=2, channels=3, columns=0),
        dict(num_envs="2", height=2, width=2, channels=3),
    ]
    for kw in bad_ctor:
        with pytest.raises(TilerError):
            Tiler(**kw)
    with pytest.raises(TilerError):
        t.columns = 5
    assert issubclass(TilerError, LuckyMonitorError)


def test_bad_images_are_typed_errors():
    t = Tiler(4, 2, 2, 3)
    good = np.zeros((4, 2, 2, 3), np.uint8)
    bad = [
        [[0]],
        good.astype(np.float32),
        good[:3],
        good[..., :2],
        np.zeros((4, 2, 2), np.uint8),
        np.zeros((4, 2, 3, 3), np.uint8),
    ]
    for images in bad:
        with pytest.raises(TilerError):
            t.tile(images)
    for fmt in ["rgba", "bgra", "gray", "yuv", ""]:
        with pytest.raises(TilerError):
            t.tile(good, src_format=fmt)


def test_oversized_grids_are_refused_without_allocating():
    # 4096 envs of 4096x4096 would be 200 GB: refused before any allocation.
    with pytest.raises(TilerError):
        Tiler(4096, 4096, 4096, 4)
    # one row of wide images would exceed the side limit
    t = Tiler(64, 4, 1024, 3)
    assert t.max_columns() * (1024 + 2) - 2 <= MAX_GRID_SIDE
    with pytest.raises(TilerError):
        t.columns = 64
    assert 1 <= t.min_columns() <= t.columns <= t.max_columns()


# ---------------------------------------------------------------------------
# Screen-bounded tiling: a region of tiles, downscaled by a fixed sample
# ---------------------------------------------------------------------------


def test_region_copies_only_the_tiles_in_view() -> None:
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (10, 4, 5, 3), dtype=np.uint8)
    t = Tiler(10, 4, 5, 3, columns=4, gap=1, gap_value=9)
    before = t.grid.copy()
    t.tile(images, region=(1, 2, 1, 3))  # tile row 1, columns 1..2: envs 5 and 6
    changed = {env for env in range(10) if not np.array_equal(t.tile_view(env), before[:4, :5] * 0 + 9)}
    assert changed == {5, 6}
    np.testing.assert_array_equal(t.tile_view(5), images[5])
    np.testing.assert_array_equal(t.tile_view(6), images[6])
    t.tile(images, region=(2, 9, 0, 9))  # the partial last row, clamped
    np.testing.assert_array_equal(t.tile_view(8), images[8])
    np.testing.assert_array_equal(t.tile_view(9), images[9])


def test_step_two_is_the_exact_area_average() -> None:
    rng = np.random.default_rng(4)
    images = rng.integers(0, 256, (6, 8, 10, 3), dtype=np.uint8)
    t = Tiler(6, 4, 5, 3, columns=3, gap=1)
    t.tile(images, step=2)
    blocks = images.reshape(6, 4, 2, 5, 2, 3).astype(np.uint16).sum(axis=(2, 4))
    want = ((blocks + 2) >> 2).astype(np.uint8)
    for env in range(6):
        np.testing.assert_array_equal(t.tile_view(env), want[env])


def test_a_one_pixel_checkerboard_downscales_to_its_mean_not_moire() -> None:
    yy, xx = np.mgrid[0:64, 0:64]
    board = np.where((yy + xx) % 2 == 0, 255, 0).astype(np.uint8)
    images = np.repeat(board[None, :, :, None], 3, axis=3).repeat(4, axis=0)
    for step in (2, 3, 4, 5, 8):
        t = Tiler(4, -(-64 // step), -(-64 // step), 3, gap=0)
        t.tile(images, step=step)
        assert int(t.grid.min()) >= 120 and int(t.grid.max()) <= 135, step


def test_the_4096_env_overview_shows_each_tiles_colour() -> None:
    rng = np.random.default_rng(5)
    colours = rng.integers(0, 256, (4096, 3), dtype=np.uint8)
    images = np.broadcast_to(colours[:, None, None, :], (4096, 64, 64, 3))
    step = 9  # 64 is not a multiple: the last display row and column cover the rest
    t = Tiler(4096, -(-64 // step), -(-64 // step), 3, gap=1)
    t.tile(images, step=step)
    for env in (0, 1, 63, 64, 2047, 4095):
        tile = t.tile_view(env)
        assert (tile == colours[env]).all(), env
    assert t.grid.shape[0] < 600 and t.grid.shape[1] < 600  # screen-sized, not 4096x4096


def test_a_colour_image_shrinks_as_its_channels_do_one_by_one() -> None:
    # RGB pixels are gathered channel by channel (a 6-byte pixel is no machine word), gray and RGBA ones
    # as whole pixels: each way, a channel's output is that channel shrunk on its own.
    rng = np.random.default_rng(7)
    for big_h, big_w, h, w in ((64, 64, 38, 38), (64, 64, 20, 27), (13, 50, 4, 49), (7, 9, 7, 1), (30, 30, 15, 15)):
        for c in (3, 4):
            images = rng.integers(0, 256, (5, big_h, big_w, c), dtype=np.uint8)
            shrunk = shrink_tiles(images, h, w).copy()
            assert shrunk.shape == (5, h, w, c)
            for k in range(c):
                np.testing.assert_array_equal(shrunk[..., k], shrink_tiles(images[..., k : k + 1], h, w)[..., 0])


def test_a_batch_shrunk_in_passes_equals_one_pass(monkeypatch) -> None:
    rng = np.random.default_rng(6)
    images = rng.integers(0, 256, (37, 12, 10, 3), dtype=np.uint8)
    whole = shrink_tiles(images, 5, 4).copy()
    monkeypatch.setattr(tiler_module, "SHRINK_PASS_BYTES", 5 * 12 * 10 * 3)  # 5 envs a pass: 8 passes, the last short
    np.testing.assert_array_equal(shrink_tiles(images, 5, 4), whole)
    assert whole.shape == (37, 5, 4, 3)


def test_automatic_columns_fit_the_views_shape() -> None:
    # 64 tiles of 64x64 (gap 2) in a view 864x341 px: 13 columns of 5 rows show them at full size; the
    # near-square 8x8 would shrink them to 0.65x.
    t = Tiler(64, 64, 64, 3, aspect=864 / 341)
    assert t.columns == 13 and t.rows == 5
    assert min(864 / t.grid_width, 341 / t.grid_height) >= 1.0
    for cols in range(1, 65):  # no other count shows larger tiles
        rows = -(-64 // cols)
        assert min(864 / (cols * 66 - 2), 341 / (rows * 66 - 2)) <= min(864 / t.grid_width, 341 / t.grid_height)
    t.aspect = None
    assert t.columns == 8  # near-square again
    t.aspect = 0.25  # a tall, narrow view: few columns
    assert t.columns < 8
    t.columns = 5
    t.aspect = 4.0  # an explicit count stays
    assert t.columns == 5 and t.columns_setting == 5
    for bad in (0, -1.0, float("nan"), float("inf"), True, "2"):
        with pytest.raises(TilerError):
            Tiler(4, 2, 2, 3, aspect=bad)


def test_geometry_is_a_value_with_the_tilers_layout() -> None:
    t = Tiler(7, 4, 5, 3, columns=3, gap=2)
    g = t.geometry
    assert (g.columns, g.rows, g.grid_width, g.grid_height) == (3, 3, t.grid_width, t.grid_height)
    for env in range(7):
        assert g.tile_origin(env) == t.tile_origin(env)
        x0, y0 = g.tile_origin(env)
        assert g.env_at(x0 + 1, y0 + 2) == (env, 1, 2)
    assert g.tiles_in(0, 0, 1, 1, margin=0) == (0, 1, 0, 1)
    assert g.tiles_in(-50, -50, 1e6, 1e6) == (0, 3, 0, 3)
    assert g.tiles_in(8, 7, 8, 7, margin=1) == (0, 3, 0, 3)


def test_a_shrink_of_tile_rows_of_two_shapes_allocates_nothing_after_the_first_frame() -> None:
    """A grid whose last tile row is partial asks the downscale for work arrays of two shapes per frame:
    they are views of one buffer each, not arrays reallocated at every call (fresh pages: 3x the work)."""
    t = Tiler(64, 38, 38, 3, columns=11)  # 5 full rows of 11 and a last row of 9, each shrunk from 64x64
    src = np.random.default_rng(3).integers(0, 256, (64, 64, 64, 3), dtype=np.uint8)
    want = t.tile(src, step=None).copy()
    scratch = dict(t._scratch._arrays)
    tracemalloc.start()
    try:
        for _ in range(3):
            got = t.tile(src, step=None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, want)
    assert peak < 64 << 10, peak  # views and small index arrays only
    assert all(t._scratch._arrays[k] is scratch[k] for k in scratch)
