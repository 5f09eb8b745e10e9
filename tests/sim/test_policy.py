"""The reference trainer's PD policy really swings the poles up (the demo's plots depend on it)."""

from __future__ import annotations

import numpy as np

from lucky_monitor.sim.physics import CartPoleBatch
from lucky_monitor.sim.trainer import PDPolicy, RandomPolicy


def run(policy, steps=400, seed=1):
    sim = CartPoleBatch(64, 16, 4, seed=seed)
    obs = np.zeros((64, 16), np.float32)
    upright = []
    for t in range(steps):
        sim.write_obs(obs)
        sim.step(policy(obs))
        ended = sim.dones | sim.truncateds
        if ended.any():
            sim.reset(ended)
        if t >= steps - 100:
            upright.append((np.cos(sim.theta) > 0.9).mean())
    return float(np.mean(upright))


def test_pd_policy_swings_most_envs_up():
    assert run(PDPolicy(4)) > 0.8


def test_random_policy_does_not():
    assert run(RandomPolicy(4, seed=0)) < 0.2


def test_policies_return_actions_of_the_right_shape():
    obs = np.zeros((5, 16), np.float32)
    obs[:, 2] = -1.0
    for p in (PDPolicy(3), RandomPolicy(3)):
        a = p(obs)
        assert a.shape == (5, 3) and a.dtype == np.float32 and np.all(np.abs(a) <= 1)
