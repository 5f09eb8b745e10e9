"""Tests of the vectorised per-env camera renderer and its debug-draw overlay."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from lucky_monitor.sim import font, render
from lucky_monitor.sim.physics import CartPoleBatch, SimError
from lucky_monitor.sim.render import CAMERAS, Renderer

W, H = 64, 48


# duck-typed stand-ins with the attribute names of the decoded FlatBuffers messages
@dataclass(frozen=True)
class Vec3:
    x: float = 0.0
    y: float = 0.0
    z: float = 0.0


@dataclass(frozen=True)
class Color:
    r: float = 0.0
    g: float = 0.0
    b: float = 0.0
    a: float = 1.0


@dataclass(frozen=True)
class Line:
    start: Vec3 | None = None
    end: Vec3 | None = None
    color: Color | None = None


@dataclass(frozen=True)
class Arrow:
    origin: Vec3 | None = None
    direction: Vec3 | None = None
    color: Color | None = None
    scale: float = 0.0


@dataclass(frozen=True)
class VelocityCommand:
    origin: Vec3 | None = None
    lin_vel_x: float = 0.0
    lin_vel_y: float = 0.0
    ang_vel_z: float = 0.0
    scale: float = 0.0


def make_sim(n: int = 6, seed: int = 0, steps: int = 15) -> CartPoleBatch:
    sim = CartPoleBatch(n, 8, 1, seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        sim.step(rng.uniform(-1, 1, (n, 1)).astype(np.float32))
    return sim


def draw(r: Renderer, sim: CartPoleBatch) -> np.ndarray:
    out = np.zeros((r.num_envs, r.height, r.width, r.channels), np.uint8)
    r.render(sim, out)
    return out


def uniform_sim(n: int) -> CartPoleBatch:
    """Every env in exactly the same state with the same parameters."""
    sim = make_sim(n)
    for arr in (sim.x, sim.x_dot, sim.theta, sim.theta_dot, *vars(sim.params).values()):
        arr[:] = arr[0]
    return sim


# ---------------------------------------------------------------------------- per-env identity
def test_images_differ_per_env_even_in_identical_states():
    n = 12
    sim = uniform_sim(n)
    out = draw(Renderer(n, W, H, 3), sim)
    assert len({img.tobytes() for img in out}) == n


def test_env_index_marker_matches_font():
    n = 120
    sim = make_sim(n)
    r = Renderer(n, W, H, 3)
    out = draw(r, sim)
    marks = font.number_masks(np.arange(n), scale=1)
    mh, mw = marks.shape[1:]
    for env in (0, 7, 42, 119):
        patch = out[env, 1 : 1 + mh, 1 : 1 + mw]
        white = (patch == 255).all(axis=-1)
        np.testing.assert_array_equal(white, marks[env])
        assert (patch[~marks[env]] == [20, 20, 20]).all()


def test_band_tint_is_per_env_and_stable_across_resets():
    n = 8
    sim = make_sim(n)
    r = Renderer(n, W, H, 3)
    out = draw(r, sim)
    band = out[:, 2, W // 2]  # a pixel of the top band, right of the marker
    assert len({tuple(c) for c in band}) == n
    sim.reset()
    np.testing.assert_array_equal(draw(r, sim)[:, 2, W // 2], band)


def test_reset_changes_the_pole_colour():
    sim = make_sim(4)
    r = Renderer(4, 128, 96, 3)
    before = draw(r, sim)
    sim.reset()
    after = draw(r, sim)
    for env in range(4):
        assert not np.array_equal(before[env], after[env])


# ---------------------------------------------------------------------------- formats and row order
def test_channel_orders_and_alpha():
    sim = make_sim(5)
    rgb = draw(Renderer(5, W, H, 3, fmt="rgb"), sim)
    bgr = draw(Renderer(5, W, H, 3, fmt="bgr"), sim)
    rgba = draw(Renderer(5, W, H, 4, fmt="rgba"), sim)
    bgra = draw(Renderer(5, W, H, 4, fmt="bgra"), sim)
    np.testing.assert_array_equal(bgr, rgb[..., ::-1])
    np.testing.assert_array_equal(rgba[..., :3], rgb)
    np.testing.assert_array_equal(bgra[..., :3], bgr)
    assert (rgba[..., 3] == 255).all() and (bgra[..., 3] == 255).all()
    # defaults by channel count
    np.testing.assert_array_equal(draw(Renderer(5, W, H, 3), sim), rgb)
    np.testing.assert_array_equal(draw(Renderer(5, W, H, 4), sim), rgba)


def test_gray_is_luminance():
    sim = make_sim(3)
    rgb = draw(Renderer(3, W, H, 3), sim).astype(np.int32)
    gray = draw(Renderer(3, W, H, 1), sim)
    assert gray.shape == (3, H, W, 1)
    expected = 0.299 * rgb[..., 0] + 0.587 * rgb[..., 1] + 0.114 * rgb[..., 2]
    assert np.abs(gray[..., 0] - expected).max() <= 1.0
    assert np.unique(gray).size > 8


def test_red_cue_is_red_and_turns_blue_when_swapped():
    sim = make_sim(2)
    r = Renderer(2, W, H, 3)
    row = H // 2
    rgb = draw(r, sim)
    assert (rgb[:, row, 0] == [255, 0, 0]).all()
    bgr = draw(Renderer(2, W, H, 3, fmt="bgr"), sim)
    assert (bgr[:, row, 0] == [0, 0, 255]).all()  # stored bytes: a swap reader would see blue
    assert not (rgb[:, row, W - 1] == [255, 0, 0]).all(axis=-1).any()  # only on the left


@pytest.mark.parametrize(("channels", "fmt"), [(3, "rgb"), (3, "bgr"), (4, "rgba"), (4, "bgra"), (1, "gray")])
@pytest.mark.parametrize("camera", CAMERAS)
def test_bottom_up_is_row_flip(channels, fmt, camera):
    sim = make_sim(4)
    top = Renderer(4, W, H, channels, fmt=fmt)
    bottom = Renderer(4, W, H, channels, fmt=fmt, bottom_up=True)
    for r in (top, bottom):
        r.camera = camera
        r.set_debug([((-1, 0.3, 0.5), (1, -0.3, -0.5), (0, 1, 0, 0.5))])
    np.testing.assert_array_equal(draw(bottom, sim), draw(top, sim)[:, ::-1])


def test_top_band_is_at_the_top():
    sim = make_sim(2)
    img = draw(Renderer(2, W, H, 3), sim)
    # top rows: the blue-ish tinted band; bottom rows: the brown ground
    assert (img[:, 3, W // 2, 2] > img[:, H - 1, W // 2, 2]).all()
    assert (img[:, H - 1, W // 2] == [120, 86, 50]).all()


def test_writes_into_a_strided_out():
    sim = make_sim(3)
    ref = draw(Renderer(3, W, H, 3), sim)
    big = np.zeros((6, H, W, 3), np.uint8)
    Renderer(3, W, H, 3).render(sim, big[::2])
    np.testing.assert_array_equal(big[::2], ref)
    assert (big[1::2] == 0).all()


# ---------------------------------------------------------------------------- scene and cameras
def test_same_state_same_bytes_and_state_changes_image():
    sim = make_sim(5)
    r = Renderer(5, W, H, 3)
    a = draw(r, sim)
    b = draw(r, sim)
    np.testing.assert_array_equal(a, b)
    for _ in range(15):  # far enough to move the cart by a few pixels
        sim.step(np.ones((5, 1), np.float32))
    c = draw(r, sim)
    for env in range(5):
        assert not np.array_equal(a[env], c[env])


def test_camera_switch_changes_image_and_back():
    sim = make_sim(4)
    r = Renderer(4, W, H, 3)
    assert r.camera == "front" and r.cameras == CAMERAS
    front = draw(r, sim)
    r.camera = "top"
    top = draw(r, sim)
    for env in range(4):
        assert not np.array_equal(front[env], top[env])
    r.camera = "front"
    np.testing.assert_array_equal(draw(r, sim), front)
    with pytest.raises(SimError):
        r.camera = "side"
    assert r.camera == "front"


def test_cart_and_pole_drawn_where_projected():
    sim = make_sim(2)
    sim.x[:] = [-1.0, 1.0]
    sim.theta[:] = 0.0  # upright
    sim.params.pole_length[:] = 0.8
    r = Renderer(2, 256, 192, 3)
    img = draw(r, sim)
    grey = [228, 228, 228]
    for env, x in enumerate((-1.0, 1.0)):
        # the cart box straddles the hinge
        px, py = r.project(x - 0.15, 0.0)
        assert (img[env, round(py), round(px)] == [50, 55, 72]).all()
        # pixels straight above the hinge carry the pole colour, the same all along
        px, ptip = r.project(x, 0.6)
        pole = img[env, round(ptip), round(px)]
        _, pmid = r.project(x, 0.3)
        np.testing.assert_array_equal(img[env, round(pmid), round(px)], pole)
        assert not np.array_equal(pole, grey)
        # beside the pole at the same height: background
        qx, _ = r.project(x + 0.5, 0.0)
        assert (img[env, round(pmid), round(qx)] == grey).all()
    # hanging down: the pole is below the hinge instead
    sim.theta[:] = -np.pi
    img = draw(r, sim)
    px, pabove = r.project(1.0, 0.3)
    _, pbelow = r.project(1.0, -0.3)
    assert (img[1, round(pabove), round(px)] == grey).all()
    assert not (img[1, round(pbelow), round(px)] == grey).all()


def test_project_geometry():
    r = Renderer(1, 200, 100, 3)
    px, py = r.project(0.0, render.FRONT_Z_CENTRE)
    assert (px, py) == (99.5, 49.5)
    s = r.pixels_per_metre
    px2, py2 = r.project(1.0, render.FRONT_Z_CENTRE + 1.0, y=123.0)
    assert (px2 - px, py - py2) == pytest.approx((s, s))  # z up, y ignored
    xs, _ = r.project(np.array([-1.0, 0.0, 1.0]), 0.0)
    assert np.all(np.diff(xs) > 0)
    r.camera = "top"
    px3, py3 = r.project(1.0, 5.0, y=0.5)
    assert px3 == pytest.approx(99.5 + r.pixels_per_metre)
    assert py3 == pytest.approx(49.5 - 0.5 * r.pixels_per_metre)  # y up, z ignored


# ---------------------------------------------------------------------------- debug draw
def line_pixels(r: Renderer, start, end, k: int = 15) -> tuple[np.ndarray, np.ndarray]:
    t = np.linspace(0.0, 1.0, k)
    pts = np.asarray(start)[None] + t[:, None] * (np.asarray(end) - np.asarray(start))[None]
    px, py = r.project(pts[:, 0], pts[:, 2], y=pts[:, 1])
    return np.rint(py).astype(int), np.rint(px).astype(int)


@pytest.mark.parametrize("camera", CAMERAS)
def test_debug_line_takes_its_colour_and_clear_removes_it(camera):
    n = 5
    sim = make_sim(n)
    r = Renderer(n, W, H, 3)
    r.camera = camera
    plain = draw(r, sim)
    start, end = (-2.0, 0.8, 0.9), (1.5, -0.6, -0.7)
    r.set_debug([Line(Vec3(*start), Vec3(*end), Color(1.0, 0.0, 1.0, 1.0))], [], None, clear_previous=False)
    lined = draw(r, sim)
    rows, cols = line_pixels(r, start, end)
    assert (lined[:, rows, cols] == [255, 0, 255]).all()  # in every env's image
    changed = (lined != plain).any(axis=-1)
    assert changed.any(axis=(1, 2)).all()
    # every changed pixel is magenta and near the segment
    assert (lined[changed] == [255, 0, 255]).all()
    ys, xs = np.nonzero(changed[0])
    (x0, y0), (x1, y1) = ((float(v) for v in r.project(p[0], p[2], y=p[1])) for p in (start, end))
    d = np.abs((x1 - x0) * (y0 - ys) - (x0 - xs) * (y1 - y0)) / np.hypot(x1 - x0, y1 - y0)
    assert d.max() <= 2.0
    # a new draw with clear_previous removes the old line
    r.set_debug([], [], None, clear_previous=True)
    np.testing.assert_array_equal(draw(r, sim), plain)


def test_debug_accumulates_until_cleared():
    sim = make_sim(2)
    r = Renderer(2, W, H, 3)
    a = ((-2.0, 0.0, 0.8), (2.0, 0.0, 0.8), (0.0, 1.0, 0.0))
    b = ((-2.0, 0.0, -0.8), (2.0, 0.0, -0.8), (0.0, 0.0, 1.0))
    r.set_debug([a])
    r.set_debug([b])
    assert r.debug_count == 2
    img = draw(r, sim)
    ra, ca = line_pixels(r, a[0], a[1])
    rb, cb = line_pixels(r, b[0], b[1])
    assert (img[:, ra, ca] == [0, 255, 0]).all()
    assert (img[:, rb, cb] == [0, 0, 255]).all()
    r.set_debug([b], clear_previous=True)
    img = draw(r, sim)
    assert not (img[:, ra, ca] == [0, 255, 0]).all(axis=-1).any()
    assert (img[:, rb, cb] == [0, 0, 255]).all()
    r.clear_debug()
    assert r.debug_count == 0


def test_debug_line_alpha_blends_and_last_wins():
    sim = uniform_sim(1)
    r = Renderer(1, W, H, 3)
    plain = draw(r, sim)
    seg = ((-2.0, 0.0, 0.8), (2.0, 0.0, 0.8))
    r.set_debug([(*seg, (1.0, 0.0, 0.0, 0.5))])
    img = draw(r, sim).astype(int)
    rows, cols = line_pixels(r, *seg)
    expected = np.rint(plain[0, rows, cols] * 0.5 + np.array([255, 0, 0]) * 0.5)
    assert np.abs(img[0, rows, cols] - expected).max() <= 1
    r.set_debug([(*seg, (0.0, 0.0, 1.0))])  # opaque, 3-component colour, drawn later
    img = draw(r, sim)
    assert (img[0, rows, cols] == [0, 0, 255]).all()
    r.set_debug([(*seg, (0.0, 1.0, 0.0, 0.0))], clear_previous=True)  # fully transparent
    np.testing.assert_array_equal(draw(r, sim), plain)


def test_arrow_and_velocity_command_drawn():
    sim = uniform_sim(2)
    r = Renderer(2, 128, 96, 3)
    plain = draw(r, sim)
    r.set_debug(arrows=[Arrow(Vec3(-1.5, 0, 0.7), Vec3(1.0, 0, 0), Color(0, 1, 0, 1), 1.0)])
    img = draw(r, sim)
    rows, cols = line_pixels(r, (-1.5, 0, 0.7), (-0.5, 0, 0.7))
    assert (img[:, rows, cols] == [0, 255, 0]).all()
    # the head reaches back from the tip on both sides of the shaft
    green = (img[0] == [0, 255, 0]).all(axis=-1)
    tip_r, tip_c = rows[-1], cols[-1]
    assert green[tip_r - 2, tip_c - 3] and green[tip_r + 2, tip_c - 3]
    # scale 0 means 1 (unset proto3 float): same picture
    r.set_debug(arrows=[Arrow(Vec3(-1.5, 0, 0.7), Vec3(1.0, 0, 0), Color(0, 1, 0, 1), 0.0)], clear_previous=True)
    np.testing.assert_array_equal(draw(r, sim), img)

    r.set_debug(velocity_command=VelocityCommand(Vec3(0.5, 0, -0.6), 1.0, 0.0, 0.0, 1.0), clear_previous=True)
    lin = draw(r, sim)
    rows, cols = line_pixels(r, (0.5, 0, -0.6), (1.5, 0, -0.6))
    assert (lin[:, rows, cols] == np.rint(np.array(render._VEL_COLOR[:3]) * 255)).all()
    r.set_debug(velocity_command=VelocityCommand(Vec3(0.5, 0, -0.6), 1.0, 0.0, 2.0, 1.0))  # replaces, adds an arc
    arc = draw(r, sim)
    yaw = np.rint(np.array(render._YAW_COLOR[:3]) * 255)
    assert (arc == yaw).all(axis=-1).sum() > 10
    assert not (lin == yaw).all(axis=-1).any()
    assert not np.array_equal(arc, plain)


def test_velocity_arrow_uses_y_in_top_view():
    sim = uniform_sim(1)
    r = Renderer(1, 128, 96, 3)
    r.camera = "top"
    r.set_debug(velocity_command=(Vec3(-1.0, 0.0, 0.0), 0.0, 0.8, 0.0, 1.0))
    img = draw(r, sim)
    rows, cols = line_pixels(r, (-1.0, 0.0, 0.0), (-1.0, 0.8, 0.0))
    assert rows[0] > rows[-1]  # +y is up the image
    assert (img[0, rows, cols] == np.rint(np.array(render._VEL_COLOR[:3]) * 255)).all()


def test_missing_fields_default():
    sim = uniform_sim(1)
    r = Renderer(1, W, H, 3)
    r.set_debug([Line(Vec3(-2, 0, 0.8), Vec3(2, 0, 0.8), None)])  # no colour: opaque white
    rows, cols = line_pixels(r, (-2, 0, 0.8), (2, 0, 0.8))
    assert (draw(r, sim)[0, rows, cols] == 255).all()
    r.set_debug([Line(None, Vec3(0, 0, 0), Color(1, 1, 0))], clear_previous=True)  # from the origin
    draw(r, sim)


def test_huge_coordinates_are_clamped_not_slow():
    sim = uniform_sim(1)
    r = Renderer(1, W, H, 3)
    r.set_debug([((-1e30, 0, 0.8), (1e30, 0, 0.8), (1, 0, 1, 1)), ((1e20, 5e19, 1e21), (-3e25, 0, 0), (1, 1, 1))])
    img = draw(r, sim)
    rows, cols = line_pixels(r, (-2.5, 0, 0.8), (2.5, 0, 0.8))
    assert (img[0, rows, cols] == [255, 0, 255]).all()


@pytest.mark.parametrize(
    "bad",
    [
        {"lines": [((0, 0, 0), (1, 1))]},
        {"lines": [((0, 0, float("nan")), (1, 1, 1), (1, 1, 1))]},
        {"lines": [((0, 0, 0), (1, 1, 1))]},
        {"lines": [((0, 0, 0), (1, 1, 1), "red")]},
        {"lines": [object()]},
        {"lines": [Line(Vec3(0, 0, 0), Vec3(1, 1, 1), Color(float("inf"), 0, 0))]},
        {"arrows": [((0, 0, 0), (1, 0, 0))]},
        {"arrows": [((0, 0, 0), (1, 0, 0), (1, 1, 1), "big")]},
        {"velocity_command": (Vec3(), 1.0)},
        {"velocity_command": (Vec3(), 1.0, 0.0, float("nan"), 1.0)},
        {"lines": 5},
    ],
)
def test_malformed_debug_is_a_typed_error_and_changes_nothing(bad):
    sim = uniform_sim(1)
    r = Renderer(1, W, H, 3)
    r.set_debug([((-2, 0, 0.8), (2, 0, 0.8), (1, 0, 0))])
    before = draw(r, sim)
    with pytest.raises(SimError):
        r.set_debug(**bad, clear_previous=True)
    assert r.debug_count == 1
    np.testing.assert_array_equal(draw(r, sim), before)


def test_debug_primitive_count_is_bounded(monkeypatch):
    monkeypatch.setattr(render, "MAX_DEBUG_PRIMITIVES", 10)
    sim = uniform_sim(1)
    r = Renderer(1, W, H, 3)
    lines = [((-2, 0, z), (2, 0, z), (1, 0, 0)) for z in np.linspace(-0.9, 0.9, 8)]
    r.set_debug(lines)
    r.set_debug(arrows=[((0, 0, 0), (1, 0, 0), (0, 1, 0))] * 5)
    assert r.debug_count == 10 and r.debug_dropped == 3
    img = draw(r, sim)
    # the three oldest lines were dropped, the newest remain
    for z, kept in ((-0.9, False), (0.9, True)):
        rows, cols = line_pixels(r, (-1.8, 0, z), (1.8, 0, z))
        assert bool((img[0, rows, cols] == [255, 0, 0]).all()) is kept


# ---------------------------------------------------------------------------- chunking, sizes, bad input
def test_chunked_render_equals_whole(monkeypatch):
    n = 10
    sim = make_sim(n)
    whole = Renderer(n, W, H, 3)
    whole.set_debug([((-2, 0.3, 0.5), (1, -0.3, -0.5), (0, 1, 0, 0.5))])
    ref = draw(whole, sim)
    monkeypatch.setattr(render, "CHUNK_PIXELS", 3 * W * H)  # 3 envs per chunk
    chunked = Renderer(n, W, H, 3)
    chunked.set_debug([((-2, 0.3, 0.5), (1, -0.3, -0.5), (0, 1, 0, 0.5))])
    np.testing.assert_array_equal(draw(chunked, sim), ref)


@pytest.mark.parametrize(("w", "h"), [(1, 1), (3, 2), (2, 7), (300, 20), (16, 200)])
def test_tiny_and_odd_sizes(w, h):
    sim = make_sim(3)
    for cam in CAMERAS:
        r = Renderer(3, w, h, 3)
        r.camera = cam
        r.set_debug([((-2, 0, 0.8), (2, 0, 0.8), (1, 0, 0))], velocity_command=((0, 0, 0), 1, 1, 1, 1))
        draw(r, sim)


def test_nonfinite_state_does_not_break_rendering():
    sim = make_sim(3)
    sim.x[0] = np.nan
    sim.theta[1] = np.inf
    sim.x[2] = 1e300
    r = Renderer(3, W, H, 3)
    out = draw(r, sim)
    assert out.shape == (3, H, W, 3)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((0, W, H, 3), {}),
        ((4097, W, H, 3), {}),
        ((2, 0, H, 3), {}),
        ((2, W, 5000, 3), {}),
        ((2, W, H, 2), {}),
        ((2, W, H, 3), {"fmt": "rgba"}),
        ((2, W, H, 1), {"fmt": "rgb"}),
        ((2, W, H, 3), {"fmt": "hsv"}),
        ((2.0, W, H, 3), {}),
        ((2, W, H, [3]), {}),
        ((2, W, H, 3), {"fmt": ["rgb"]}),
    ],
)
def test_bad_renderer_config(args, kwargs):
    with pytest.raises(SimError):
        Renderer(*args, **kwargs)


def test_bad_render_targets():
    sim = make_sim(2)
    r = Renderer(2, W, H, 3)
    for bad in (
        np.zeros((2, H, W, 4), np.uint8),
        np.zeros((2, W, H, 3), np.uint8),
        np.zeros((2, H, W, 3), np.float32),
        np.zeros((3, H, W, 3), np.uint8),
        [[0]],
    ):
        with pytest.raises(SimError):
            r.render(sim, bad)
    ro = np.zeros((2, H, W, 3), np.uint8)
    ro.setflags(write=False)
    with pytest.raises(SimError):
        r.render(sim, ro)
    with pytest.raises(SimError):
        r.render(make_sim(3), np.zeros((2, H, W, 3), np.uint8))


def test_many_envs_render():
    n = 300
    sim = make_sim(n, steps=3)
    r = Renderer(n, 32, 32, 3)
    out = draw(r, sim)
    assert len({img.tobytes() for img in out}) == n


# ---------------------------------------------------------------------------- font
def test_font_digits():
    assert font.ATLAS.shape == (len(font.CHARS), font.GLYPH_H, font.GLYPH_W)
    glyphs = {font.ATLAS[i].tobytes() for i in range(10)}
    assert len(glyphs) == 10
    m = font.number_masks(np.array([0, 7, 42, 1234]), scale=2)
    assert m.shape == (4, 10, font.text_size(4, 2)[1])
    np.testing.assert_array_equal(m[2], font.render_text("42  ", 2))
    np.testing.assert_array_equal(font.render_text("7"), font.ATLAS[7])
    assert font.number_masks(np.array([5]), n_digits=3).shape == (1, 5, 11)
    for call in (
        lambda: font.render_text("x"),
        lambda: font.number_masks(np.array([-1])),
        lambda: font.number_masks(np.array([100]), n_digits=2),
        lambda: font.render_text("1", 0),
    ):
        with pytest.raises(SimError):
            call()
