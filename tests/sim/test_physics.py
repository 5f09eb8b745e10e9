"""Tests of the vectorised cart-pole batch (the reference engine's physics)."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lucky_monitor.protocol.errors import LuckyMonitorError
from lucky_monitor.sim.physics import (
    EXTRA_FEATURES,
    MIN_OBS_SIZE,
    X_LIMIT,
    CartPoleBatch,
    Contract,
    SimError,
)


def zeros(sim: CartPoleBatch) -> np.ndarray:
    return np.zeros((sim.num_envs, sim.act_size), np.float32)


def angle_diff(a: np.ndarray, b: float) -> np.ndarray:
    return np.abs((a - b + np.pi) % (2 * np.pi) - np.pi)


# ---------------------------------------------------------------------------- dynamics
def test_energy_conserved_without_force_or_friction():
    sim = CartPoleBatch(64, 8, 1, seed=3, contract=Contract(friction_range=(0.0, 0.0), init_angle_noise=1.0))
    sim.theta_dot[:] = np.linspace(-3.0, 3.0, 64)
    sim.x_dot[:] = np.linspace(0.5, -0.5, 64)
    e0 = sim.energy()
    scale = sim.params.pole_mass * 9.81 * sim.params.pole_length  # typical energy swing
    for _ in range(50):
        sim.step(zeros(sim))
    drift = np.abs(sim.energy() - e0) / scale
    assert drift.max() < 1e-2
    # the state really moved: this is not a trivially frozen system
    assert np.abs(sim.theta_dot - np.linspace(-3.0, 3.0, 64)).max() > 0.5


def test_friction_dissipates_energy():
    sim = CartPoleBatch(32, 8, 1, seed=1, contract=Contract(friction_range=(0.5, 0.5)))
    sim.theta_dot[:] = 2.0
    sim.x_dot[:] = 1.0
    e0 = sim.energy()
    for _ in range(50):
        sim.step(zeros(sim))
    assert (sim.energy() < e0 - 1e-3).all()


def test_momentum_conserved_without_force_or_friction():
    # with no external horizontal force, horizontal momentum of cart + rod is conserved
    # (to integration error: the midpoint rule does not preserve this nonlinear invariant exactly)
    sim = CartPoleBatch(16, 8, 1, seed=2, contract=Contract(friction_range=(0.0, 0.0), init_angle_noise=1.0))
    p = sim.params

    def momentum() -> np.ndarray:
        return (p.cart_mass + p.pole_mass) * sim.x_dot + p.pole_mass * 0.5 * p.pole_length * np.cos(
            sim.theta
        ) * sim.theta_dot

    m0 = momentum()
    swing = np.abs(p.pole_mass * 0.5 * p.pole_length * sim.theta_dot).max() + 1e-3
    for _ in range(30):
        sim.step(zeros(sim))
    np.testing.assert_allclose(momentum(), m0, atol=5e-3 * swing)
    # a force breaks it: the check above is not vacuous
    sim.step(np.ones((16, 1), np.float32))
    assert (np.abs(momentum() - m0) > 0.1).all()


def test_sign_conventions():
    sim = CartPoleBatch(2, 8, 1, contract=Contract(friction_range=(0.0, 0.0), init_angle_noise=0.0))
    sim.theta[:] = 0.1  # leaning towards +x from upright
    sim.theta_dot[:] = 0.0
    tip_x, tip_z = sim.pole_tip()
    assert (tip_x > sim.x).all() and (tip_z > 0).all()
    sim.step(np.array([[1.0], [0.0]], np.float32))
    assert sim.x_dot[0] > 0.0  # positive force pushes the cart towards +x
    assert sim.theta[1] > 0.1  # gravity makes the pole fall further


def test_starts_hanging_down_within_noise():
    noise = 0.25
    sim = CartPoleBatch(500, 8, 1, seed=9, contract=Contract(init_angle_noise=noise))
    assert (angle_diff(sim.theta, np.pi) <= noise + 1e-12).all()
    assert (np.abs(sim.theta_dot) <= noise).all()
    assert (sim.theta >= -np.pi).all() and (sim.theta < np.pi).all()
    assert (sim.x == 0).all() and (sim.t == 0).all()


def test_done_when_cart_leaves_track():
    sim = CartPoleBatch(4, 8, 1)
    sim.x[1] = X_LIMIT + 0.1
    sim.x[2] = -X_LIMIT - 0.1
    sim.step(zeros(sim))
    assert sim.dones.tolist() == [False, True, True, False]
    # a steady push eventually drives the cart off the track
    sim.reset()
    push = np.ones((4, 1), np.float32)
    for _ in range(200):
        sim.step(push)
        if sim.dones.all():
            break
    assert sim.dones.all()
    assert (sim.x > X_LIMIT).all()


def test_non_finite_state_is_done():
    sim = CartPoleBatch(3, 8, 1)
    sim.theta_dot[0] = np.nan
    sim.step(zeros(sim))
    assert sim.dones.tolist() == [True, False, False]
    assert np.isfinite(sim.rewards).all()


def test_truncation_at_episode_length():
    sim = CartPoleBatch(5, 8, 1, contract=Contract(episode_length=4))
    for _ in range(3):
        sim.step(zeros(sim))
        assert not sim.truncateds.any()
    sim.step(zeros(sim))
    assert sim.truncateds.all()
    assert (sim.t == 4).all()
    mask = np.array([True, False, True, False, False])
    sim.reset(mask)
    assert sim.truncateds.tolist() == [False, True, False, True, True]
    assert sim.t.tolist() == [0, 4, 0, 4, 4]


def test_reset_mask_only_touches_masked_envs():
    sim = CartPoleBatch(10, 8, 2, seed=4)
    rng = np.random.default_rng(0)
    for _ in range(20):
        sim.step(rng.uniform(-1, 1, (10, 2)).astype(np.float32))
    mask = np.zeros(10, bool)
    mask[[1, 4, 7]] = True
    before = {
        name: getattr(sim, name).copy()
        for name in ("x", "x_dot", "theta", "theta_dot", "t", "last_actions", "rewards", "dones", "truncateds")
    }
    params_before = {k: v.copy() for k, v in vars(sim.params).items()}
    sim.reset(mask)
    keep = ~mask
    for name, old in before.items():
        np.testing.assert_array_equal(getattr(sim, name)[keep], old[keep], err_msg=name)
    for name, old in params_before.items():
        np.testing.assert_array_equal(getattr(sim.params, name)[keep], old[keep], err_msg=name)
        assert (getattr(sim.params, name)[mask] != old[mask]).all(), name
    assert (sim.t[mask] == 0).all() and (sim.x[mask] == 0).all()
    assert (sim.last_actions[mask] == 0).all() and (sim.rewards[mask] == 0).all()
    # an all-false mask changes nothing, an int mask works like a bool one
    snap = sim.x.copy(), sim.params.pole_length.copy()
    sim.reset(np.zeros(10, np.uint8))
    np.testing.assert_array_equal(sim.x, snap[0])
    np.testing.assert_array_equal(sim.params.pole_length, snap[1])


# ---------------------------------------------------------------------------- contract
def test_contract_ranges_respected_and_changeable():
    sim = CartPoleBatch(2000, 8, 1, seed=5)
    c = sim.contract
    p = sim.params
    for arr, (lo, hi) in (
        (p.pole_length, c.pole_length_range),
        (p.pole_mass, c.pole_mass_range),
        (p.cart_mass, c.cart_mass_range),
        (p.friction, c.friction_range),
    ):
        assert lo <= arr.min() and arr.max() <= hi
        assert arr.max() - arr.min() > 0.8 * (hi - lo)  # actually spread over the range
    old_mean = p.pole_length.mean()
    new = Contract(pole_length_range=(1.5, 2.0), pole_mass_range=(0.3, 0.3), friction_range=(0.2, 0.3))
    sim.set_contract(new)
    assert sim.contract is new
    # the contract applies to envs reset afterwards only
    assert p.pole_length.max() <= 0.8
    half = np.arange(2000) < 1000
    sim.reset(half)
    assert ((p.pole_length[half] >= 1.5) & (p.pole_length[half] <= 2.0)).all()
    assert (p.pole_mass[half] == 0.3).all()
    assert ((p.friction[half] >= 0.2) & (p.friction[half] <= 0.3)).all()
    assert (p.pole_length[~half] <= 0.8).all()
    assert p.pole_length[half].mean() > old_mean + 0.9


def test_contract_episode_length_and_dt_apply():
    sim = CartPoleBatch(3, 8, 1)
    sim.set_contract(Contract(episode_length=2, dt=0.01))
    assert sim.dt == 0.01 and sim.info.timestep == 0.01
    sim.step(zeros(sim))
    sim.step(zeros(sim))
    assert sim.truncateds.all()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pole_length_range": (0.8, 0.4)},
        {"pole_length_range": (0.0, 0.4)},
        {"pole_mass_range": (-1.0, 0.4)},
        {"cart_mass_range": (1.0, math.inf)},
        {"friction_range": (0.0, math.nan)},
        {"friction_range": (0.0,)},
        {"friction_range": "ab"},
        {"init_angle_noise": -0.1},
        {"init_angle_noise": 4.0},
        {"episode_length": 0},
        {"episode_length": 2.5},
        {"episode_length": "long"},
        {"dt": 0.0},
        {"dt": 1.0},
        {"seed": -1},
        {"seed": 1.5},
    ],
)
def test_bad_contract_is_a_typed_error(kwargs):
    with pytest.raises(SimError):
        Contract(**kwargs)
    assert issubclass(SimError, LuckyMonitorError)


def test_contract_from_message():
    default = Contract()
    msg = NS(
        seed=11,
        episode_length=0,
        randomize=True,
        friction_scale=NS(min=0.5, max=2.0),
        mass_scale=NS(min=2.0, max=2.0),
        joint_position_noise=NS(min=-0.5, max=0.1),
    )
    c = Contract.from_message(msg, base=Contract(episode_length=77))
    assert c.seed == 11 and c.episode_length == 77
    assert c.friction_range == (default.friction_range[0] * 0.5, default.friction_range[1] * 2.0)
    assert c.pole_mass_range == (default.pole_mass_range[0] * 2, default.pole_mass_range[1] * 2)
    assert c.init_angle_noise == 0.5
    # the same message twice gives the same contract (scales apply to the defaults)
    assert Contract.from_message(msg, base=c) == c
    fixed = Contract.from_message(NS(seed=0, episode_length=9, randomize=False))
    assert fixed.seed is None and fixed.episode_length == 9
    assert fixed.pole_length_range[0] == fixed.pole_length_range[1] == pytest.approx(0.6)
    with pytest.raises(SimError):
        Contract.from_message(NS(friction_scale=NS(min=0.0, max=1000.0)))
    with pytest.raises(SimError):
        Contract.from_message(NS(mass_scale=NS(low=1, high=2)))


# ---------------------------------------------------------------------------- determinism
def _run(seed: int, steps: int = 40) -> tuple[np.ndarray, ...]:
    sim = CartPoleBatch(32, 10, 2, seed=seed)
    rng = np.random.default_rng(123)
    rewards = []
    for _ in range(steps):
        sim.step(rng.uniform(-1, 1, (32, 2)).astype(np.float32))
        rewards.append(sim.rewards.copy())
        sim.reset(sim.dones | sim.truncateds | (rng.random(32) < 0.05))
    obs = np.empty((32, 10), np.float32)
    sim.write_obs(obs)
    return obs, np.array(rewards), sim.params.pole_length.copy()


def test_deterministic_with_seed():
    a, b, c = _run(7), _run(7), _run(8)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[2], c[2])


def test_contract_seed_reseeds():
    s1 = CartPoleBatch(16, 8, 1, seed=1)
    s2 = CartPoleBatch(16, 8, 1, seed=2)
    assert not np.array_equal(s1.params.pole_length, s2.params.pole_length)
    for s in (s1, s2):
        s.set_contract(Contract(seed=99))
        s.reset()
    np.testing.assert_array_equal(s1.params.pole_length, s2.params.pole_length)
    np.testing.assert_array_equal(s1.theta, s2.theta)


# ---------------------------------------------------------------------------- observations
def test_action_echo_and_layout():
    sim = CartPoleBatch(6, 16, 3, seed=0)
    assert sim.echo_slice == slice(5, 8)
    assert sim.extra_slice == slice(8, 8 + len(EXTRA_FEATURES))
    act = np.random.default_rng(1).uniform(-1, 1, (6, 3)).astype(np.float32)
    sim.step(act)
    obs = np.full((6, 16), np.nan, np.float32)
    sim.write_obs(obs)
    np.testing.assert_array_equal(obs[:, 5:8], act)  # exactly the trainer's actions
    np.testing.assert_array_equal(obs[:, 0], sim.x.astype(np.float32))
    np.testing.assert_array_equal(obs[:, 1], sim.x_dot.astype(np.float32))
    np.testing.assert_allclose(obs[:, 2], np.cos(sim.theta), atol=1e-6)
    np.testing.assert_allclose(obs[:, 3], np.sin(sim.theta), atol=1e-6)
    np.testing.assert_array_equal(obs[:, 4], sim.theta_dot.astype(np.float32))
    np.testing.assert_allclose(obs[:, 8], 1 / 500)
    np.testing.assert_array_equal(obs[:, 9], sim.params.pole_length.astype(np.float32))
    np.testing.assert_array_equal(obs[:, 12], sim.params.friction.astype(np.float32))
    assert (obs[:, 13:] == 0).all()


def test_echo_clips_and_sanitises():
    sim = CartPoleBatch(2, 8, 2)
    sim.step(np.array([[5.0, -7.0], [np.nan, 0.25]]))
    np.testing.assert_array_equal(sim.last_actions, [[1.0, -1.0], [0.0, 0.25]])
    obs = np.empty((2, 8), np.float32)
    sim.write_obs(obs)
    np.testing.assert_array_equal(obs[:, sim.echo_slice], sim.last_actions)


def test_echo_truncated_when_obs_is_small():
    sim = CartPoleBatch(2, MIN_OBS_SIZE + 1, 5)
    assert sim.echo_slice == slice(5, 7)
    assert sim.extra_slice == slice(7, 7)
    act = np.arange(10, dtype=np.float32).reshape(2, 5) / 10
    sim.step(act)
    obs = np.empty((2, MIN_OBS_SIZE + 1), np.float32)
    sim.write_obs(obs)
    np.testing.assert_array_equal(obs[:, 5:7], act[:, :2])


def test_write_obs_into_strided_view():
    sim = CartPoleBatch(4, 8, 1)
    big = np.zeros((4, 20), np.float32)
    view = big[:, ::2][:, :8]
    sim.write_obs(view)
    assert (big[:, 1::2] == 0).all()
    np.testing.assert_allclose(view[:, 2], np.cos(sim.theta), atol=1e-6)


def test_rewards_range_and_spread():
    sim = CartPoleBatch(256, 8, 1, seed=3)
    rng = np.random.default_rng(0)
    seen = []
    for _ in range(300):
        sim.step(rng.uniform(-1, 1, (256, 1)).astype(np.float32))
        seen.append(sim.rewards.copy())
        sim.reset(sim.dones | sim.truncateds)
    r = np.array(seen)
    assert r.dtype == np.float32
    assert np.isfinite(r).all()
    assert r.min() >= -0.5 and r.max() <= 1.0
    assert r[-1].std() > 0.01  # envs differ from each other
    assert r.max() > 0.5  # some envs swing up a good way


def test_joint_state_and_info():
    sim = CartPoleBatch(3, 8, 1)
    sim.x[2], sim.theta[2], sim.x_dot[2], sim.theta_dot[2] = 0.5, 1.0, -0.2, 3.0
    pos, vel = sim.joint_state(2)
    assert pos.tolist() == [0.5, 1.0] and vel.tolist() == [-0.2, 3.0]
    info = sim.info
    assert (info.nq, info.nv, info.nu, info.timestep) == (2, 2, 1, 0.02)
    for bad in (-1, 3, 1.0, True, "0"):
        with pytest.raises(SimError):
            sim.joint_state(bad)


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("n", "obs", "act"),
    [(0, 8, 1), (4097, 8, 1), (4, 5, 1), (4, 8, 0), (4, 1 << 17, 1), (2.0, 8, 1), (True, 8, 1)],
)
def test_bad_sizes(n, obs, act):
    with pytest.raises(SimError):
        CartPoleBatch(n, obs, act)


def test_bad_step_and_obs_and_mask_inputs():
    sim = CartPoleBatch(3, 8, 2)
    for bad in (np.zeros((3, 1)), np.zeros((2, 2)), np.zeros(6), np.array([["a", "b"]] * 3), np.zeros((3, 2), complex)):
        with pytest.raises(SimError):
            sim.step(bad)
    for bad in (np.zeros((3, 8)), np.zeros((3, 7), np.float32), [[0.0] * 8] * 3):
        with pytest.raises(SimError):
            sim.write_obs(bad)
    ro = np.zeros((3, 8), np.float32)
    ro.setflags(write=False)
    with pytest.raises(SimError):
        sim.write_obs(ro)
    for bad in (np.zeros(2, bool), np.zeros((3, 1), bool), np.zeros(3, float)):
        with pytest.raises(SimError):
            sim.reset(bad)
    with pytest.raises(SimError):
        sim.set_contract({"episode_length": 3})
    with pytest.raises(SimError):
        CartPoleBatch(3, 8, 1, contract="fast")
    with pytest.raises(SimError):
        CartPoleBatch(3, 8, 1, seed=-1)


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float64, (4, 2), elements=st.floats(allow_nan=True, allow_infinity=True, width=64)))
def test_any_actions_keep_state_finite(actions):
    sim = CartPoleBatch(4, 8, 2, seed=0)
    for _ in range(5):
        sim.step(actions)
    assert np.isfinite(sim.x).all() and np.isfinite(sim.theta).all()
    assert np.isfinite(sim.rewards).all()
    assert (np.abs(sim.last_actions) <= 1).all()


def test_many_envs_step():
    sim = CartPoleBatch(4096, 12, 4, seed=0)
    act = np.random.default_rng(0).uniform(-1, 1, (4096, 4)).astype(np.float32)
    obs = np.empty((4096, 12), np.float32)
    for _ in range(20):
        sim.step(act)
        sim.write_obs(obs)
    assert np.isfinite(obs).all()
