"""write_obs stays exact under the step's cached cos/sin and the engine's no-clear fast path."""

from __future__ import annotations

import numpy as np

from lucky_monitor.sim.physics import CartPoleBatch


def test_observation_matches_state_through_steps_and_resets():
    sim = CartPoleBatch(257, 24, 3, seed=4)
    rng = np.random.default_rng(0)
    out = np.full((257, 24), 7.0, np.float32)
    for step in range(60):
        sim.step(rng.uniform(-1, 1, (257, 3)))
        if step % 7 == 3:
            sim.reset(rng.random(257) < 0.3)
        sim.write_obs(out, clear_tail=step == 0)
        np.testing.assert_allclose(out[:, 2], np.cos(sim.theta), rtol=0, atol=1e-6)
        np.testing.assert_allclose(out[:, 3], np.sin(sim.theta), rtol=0, atol=1e-6)
        np.testing.assert_array_equal(out[:, 0], sim.x.astype(np.float32))
        np.testing.assert_array_equal(out[:, 5:8], sim.last_actions)
        assert not out[:, 13:].any()  # cleared once, never written again


def test_reward_uses_the_new_angle():
    sim = CartPoleBatch(64, 8, 1, seed=1)
    sim.step(np.zeros((64, 1)))
    expected = 0.5 * (1 + np.cos(sim.theta)) - 0.001 * np.minimum(sim.theta_dot**2, 100) - 0.05 * (sim.x / 2.0) ** 2
    np.testing.assert_allclose(sim.rewards, expected.astype(np.float32), rtol=1e-5, atol=1e-6)
