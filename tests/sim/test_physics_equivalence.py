"""The optimised physics step against a plain reference kept here: bit for bit over many random steps.

``Reference`` is the straightforward implementation the batch had before its step
was made allocation-free (one numpy expression per line, a fresh ``sin``/``cos``
at every stage, ``np.mod`` over every angle, ``nan_to_num``): the batch must
reproduce its states, rewards, flags, random draws and observations exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from lucky_monitor.sim import physics
from lucky_monitor.sim.physics import (
    _HINGE_DAMPING_TIME,
    _V_EPS,
    EXTRA_FEATURES,
    FORCE_SCALE,
    GRAVITY,
    STATE_FEATURES,
    X_LIMIT,
    CartPoleBatch,
    Contract,
)


def ref_wrap(a: np.ndarray) -> np.ndarray:
    return np.mod(a + np.pi, 2.0 * np.pi) - np.pi


class Reference:
    """The plain implementation: same state layout and random draws, nothing reused or preallocated."""

    def __init__(self, n: int, obs_size: int, act_size: int, seed: int, contract: Contract) -> None:
        self.n, self.obs_size, self.act_size = n, obs_size, act_size
        self.contract = contract
        self.rng = np.random.default_rng(seed if contract.seed is None else contract.seed)
        self.x, self.x_dot, self.theta, self.theta_dot = (np.zeros(n) for _ in range(4))
        self.t = np.zeros(n, np.int64)
        self.pole_length, self.pole_mass, self.cart_mass, self.friction, self.hue = (np.zeros(n) for _ in range(5))
        self.last_actions = np.zeros((n, act_size), np.float32)
        self.rewards = np.zeros(n, np.float32)
        self.dones = np.zeros(n, bool)
        self.truncateds = np.zeros(n, bool)
        self.cos, self.sin = np.ones(n), np.zeros(n)
        self.n_echo = min(act_size, obs_size - STATE_FEATURES)
        self.n_extra = min(len(EXTRA_FEATURES), obs_size - STATE_FEATURES - self.n_echo)
        self.reset(np.ones(n, bool))

    def set_contract(self, contract: Contract) -> None:
        self.contract = contract
        if contract.seed is not None:
            self.rng = np.random.default_rng(contract.seed)

    def reset(self, mask: np.ndarray) -> None:
        idx = np.flatnonzero(mask)
        k = idx.size
        if k == 0:
            return
        c, rng = self.contract, self.rng
        self.pole_length[idx] = rng.uniform(*c.pole_length_range, size=k)
        self.pole_mass[idx] = rng.uniform(*c.pole_mass_range, size=k)
        self.cart_mass[idx] = rng.uniform(*c.cart_mass_range, size=k)
        self.friction[idx] = rng.uniform(*c.friction_range, size=k)
        self.hue[idx] = rng.uniform(0.0, 1.0, size=k)
        noise = c.init_angle_noise
        self.theta[idx] = ref_wrap(np.pi + rng.uniform(-noise, noise, size=k))
        self.cos[idx] = np.cos(self.theta[idx])
        self.sin[idx] = np.sin(self.theta[idx])
        self.theta_dot[idx] = rng.uniform(-noise, noise, size=k)
        for arr in (self.x, self.x_dot, self.t, self.last_actions, self.rewards, self.dones, self.truncateds):
            arr[idx] = 0

    def accel(self, force: np.ndarray, xd: np.ndarray, th: np.ndarray, thd: np.ndarray) -> tuple[np.ndarray, ...]:
        m, length = self.pole_mass, self.pole_length
        total = self.cart_mass + m
        mh = 0.5 * m * length
        mhg = mh * GRAVITY
        j = m * length**2 / 3.0
        fric = self.friction * total * GRAVITY
        damp = _HINGE_DAMPING_TIME * self.friction * mhg
        s, a12 = np.sin(th), np.cos(th) * mh
        r1 = (force - np.tanh(xd / _V_EPS) * fric) + mh * s * thd * thd
        r2 = mhg * s - damp * thd
        det = total * j - a12 * a12
        return (j * r1 - a12 * r2) / det, (total * r2 - a12 * r1) / det

    def step(self, actions: np.ndarray) -> None:
        la = self.last_actions
        np.clip(actions, -1.0, 1.0, out=la, casting="unsafe")
        np.nan_to_num(la, copy=False, nan=0.0)
        force = la[:, 0] * FORCE_SCALE
        dt = self.contract.dt
        half = 0.5 * dt
        x, xd, th, thd = self.x, self.x_dot, self.theta, self.theta_dot
        a1, b1 = self.accel(force, xd, th, thd)
        xd2, thd2, th2 = a1 * half + xd, b1 * half + thd, thd * half + th
        a2, b2 = self.accel(force, xd2, th2, thd2)
        x += dt * xd2
        th += dt * thd2
        xd += a2 * dt
        thd += b2 * dt
        th[:] = ref_wrap(th)
        self.t += 1
        self.cos, self.sin = np.cos(th), np.sin(th)
        finite = np.isfinite(x + xd + thd + th)
        self.dones[:] = (np.abs(x) > X_LIMIT) | ~finite
        self.truncateds[:] = self.t >= self.contract.episode_length
        r = (self.cos + 1.0) * 0.5
        r -= 0.01 * np.square(la[:, 0], dtype=np.float64)
        r -= 0.001 * np.minimum(thd * thd, 100.0)
        r -= 0.05 * np.square(x / X_LIMIT)
        self.rewards[:] = np.nan_to_num(r, nan=0.0, posinf=0.0, neginf=0.0)

    def obs(self) -> np.ndarray:
        out = np.zeros((self.n, self.obs_size), np.float32)
        for col, arr in enumerate((self.x, self.x_dot, self.cos, self.sin, self.theta_dot)):
            out[:, col] = arr
        e = STATE_FEATURES + self.n_echo
        out[:, STATE_FEATURES:e] = self.last_actions[:, : self.n_echo]
        extras = [self.t / self.contract.episode_length, self.pole_length, self.pole_mass, self.cart_mass]
        for i, arr in enumerate([*extras, self.friction][: self.n_extra]):
            out[:, e + i] = arr
        return out


STATE = ("x", "x_dot", "theta", "theta_dot", "t", "last_actions", "rewards", "dones", "truncateds")
PARAMS = ("pole_length", "pole_mass", "cart_mass", "friction", "hue")


def assert_same(sim: CartPoleBatch, ref: Reference, obs: np.ndarray, where: str) -> None:
    """Equal bit for bit (NaN payloads and signed zeros included)."""
    for name in STATE:
        a, b = getattr(sim, name), getattr(ref, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f"{name} differs {where}"
    for name in PARAMS:
        assert getattr(sim.params, name).tobytes() == getattr(ref, name).tobytes(), f"{name} differs {where}"
    assert obs.tobytes() == ref.obs().tobytes(), f"observation differs {where}"


def random_actions(rng: np.random.Generator, n: int, act: int, i: int) -> np.ndarray:
    kind = i % 5
    if kind == 0:  # out of range, with NaN and infinities
        a = rng.uniform(-3.0, 3.0, (n, act)).astype(np.float32)
        a[rng.random((n, act)) < 0.05] = np.nan
        a[rng.random((n, act)) < 0.02] = np.inf
        a[rng.random((n, act)) < 0.02] = -np.inf
        return a
    if kind == 1:  # another dtype
        return rng.integers(-2, 3, (n, act)).astype(np.int32)
    if kind == 2:
        return rng.uniform(-1.0, 1.0, (n, act))  # float64
    return rng.uniform(-1.0, 1.0, (n, act)).astype(np.float32)


@pytest.mark.parametrize(
    ("n", "obs_size", "act_size", "seed", "steps"),
    [
        (4096, 100, 12, 0, 200),  # the benchmark's configuration; every step resets some envs
        (257, 8, 12, 3, 400),  # echo cut short, part of the extras
        (33, 6, 1, 5, 400),  # the smallest observation
        (64, 16, 4, 9, 600),  # the demo's
        (1, 7, 3, 2, 300),
    ],
)
def test_step_reset_and_obs_equal_the_reference_bit_for_bit(n, obs_size, act_size, seed, steps) -> None:
    contract = Contract(episode_length=97, init_angle_noise=0.8)
    sim = CartPoleBatch(n, obs_size, act_size, seed=seed, contract=contract)
    ref = Reference(n, obs_size, act_size, seed, contract)
    rng = np.random.default_rng(seed + 100)
    obs = np.full((n, obs_size), np.nan, np.float32)
    sim.write_obs(obs)
    assert_same(sim, ref, obs, "after construction")
    for i in range(steps):
        actions = random_actions(rng, n, act_size, i)
        sim.step(actions)
        ref.step(actions)
        if i % 41 == 7:  # states and parameters written from outside, as tests set them up
            rows = rng.random(n) < 0.3
            x = rng.uniform(-2.5, 2.5, rows.sum())
            for target in (sim, ref):
                target.theta[rows] += 2.5
                target.theta_dot[rows] *= -1.0
                target.x[rows] = x
            sim.params.pole_mass[rows] *= 1.5
            ref.pole_mass[rows] *= 1.5
        if i % 97 == 50:  # a new contract, sometimes with its own seed
            c = Contract(
                friction_range=(0.0, 0.5),
                init_angle_noise=float(rng.uniform(0.0, np.pi)),
                episode_length=int(rng.integers(5, 60)),
                dt=float(rng.uniform(0.001, 0.1)),
                seed=int(rng.integers(0, 100)) if i % 2 else None,
            )
            sim.set_contract(c)
            ref.set_contract(c)
        mask = sim.dones | sim.truncateds | (rng.random(n) < 0.03)
        sim.reset(mask)
        ref.reset(mask)
        sim.write_obs(obs)
        assert_same(sim, ref, obs, f"at step {i}")


def test_non_finite_states_stay_equal() -> None:
    n = 64
    sim = CartPoleBatch(n, 10, 2, seed=1)
    ref = Reference(n, 10, 2, 1, Contract())
    for target in (sim, ref):
        target.x[:4] = [np.nan, np.inf, -np.inf, 1e300]
        target.theta[4:8] = [np.nan, np.inf, -np.inf, 1e300]
        target.theta_dot[8:12] = [np.nan, np.inf, -np.inf, 1e300]
        target.x_dot[12:16] = [np.nan, np.inf, -np.inf, 1e300]
        target.theta[16:20] = [-0.0, np.pi, -np.pi, 2 * np.pi]
    obs = np.zeros((n, 10), np.float32)
    for i in range(20):
        actions = np.full((n, 2), 0.5 if i % 2 else -0.5, np.float32)
        # cos(inf), inf - inf, 1e300 as float32: warnings on both sides alike
        with np.errstate(invalid="ignore", over="ignore"):
            sim.step(actions)
            ref.step(actions)
            sim.write_obs(obs)
            assert_same(sim, ref, obs, f"at step {i}")


@pytest.mark.parametrize("size", [7, 256, 257, 5000])
def test_wrap_equals_the_remainder_everywhere(size) -> None:
    rng = np.random.default_rng(size)
    edges = [0.0, -0.0, np.pi, -np.pi, 2 * np.pi, -2 * np.pi, 3 * np.pi, np.nextafter(np.pi, 0), np.nan, np.inf]
    edges += [-np.inf, 1e300, -1e300, 5e-324, np.nextafter(-np.pi, 0), np.nextafter(-np.pi, -4)]
    a = np.concatenate([edges, rng.uniform(-10, 10, size), rng.normal(np.pi, 1e-9, size)])[:size]
    rng.shuffle(a)
    with np.errstate(invalid="ignore"):  # inf mod 2 pi
        expected = ref_wrap(a)
        got = physics._wrap(a.copy())
        inplace = a.copy()
        physics._wrap(inplace, out=inplace, scratch=np.empty((2, size), bool))
    assert got.tobytes() == expected.tobytes()
    assert inplace.tobytes() == expected.tobytes()


def test_advance_is_step_report_reset_observe() -> None:
    n, obs_size, act = 300, 24, 5
    a, b = CartPoleBatch(n, obs_size, act, seed=4), CartPoleBatch(n, obs_size, act, seed=4)
    rng = np.random.default_rng(0)
    obs_a, obs_b = np.zeros((n, obs_size), np.float32), np.zeros((n, obs_size), np.float32)
    rew, done, trunc = np.zeros(n, np.float32), np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    for _ in range(200):
        actions = rng.uniform(-1, 1, (n, act)).astype(np.float32)
        a.advance(actions, obs_a, rew, done, trunc, clear_tail=False)
        b.step(actions)
        np.testing.assert_array_equal(rew, b.rewards)
        np.testing.assert_array_equal(done, b.dones)
        np.testing.assert_array_equal(trunc, b.truncateds)
        b.reset(b.dones | b.truncateds)
        b.write_obs(obs_b)
        assert obs_a.tobytes() == obs_b.tobytes()
    a.advance(actions, obs_a, rew, done)  # no truncateds region: still steps
    assert a.t.max() >= 1


def test_step_allocates_no_temporary_of_the_batch_size() -> None:
    import tracemalloc

    n = 4096
    sim = CartPoleBatch(n, 100, 12, seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (n, 12)).astype(np.float32)
    sim.step(actions)
    tracemalloc.start()
    try:
        sim.step(actions)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # a casting buffer of numpy's and the indices of the few angles that wrap,
    # but not one float64 array of n entries (the plain step made dozens)
    assert peak < n * 8, peak
