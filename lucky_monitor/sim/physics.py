"""Vectorised cart-pole swing-up: ``N`` independent envs stepped as numpy arrays.

Theory of operation
-------------------
Every env is a cart of mass ``M`` on a straight track and a uniform rod of
mass ``m`` and length ``L`` hinged at the cart's centre. The state of env ``i``
is ``x[i]`` (cart position, m), ``x_dot[i]``, ``theta[i]`` (pole angle, rad, wrapped to ``[-pi, pi)``;
``0`` = upright, ``-pi`` = hanging down; a positive angle leans the tip
towards ``+x``, see :meth:`CartPoleBatch.pole_tip`) and ``theta_dot[i]``.
Episodes start hanging down (swing-up task).

Equations of motion (Lagrange, ``h = L/2``, ``J = m L² / 3`` about the hinge)::

    (M+m) ẍ + m h cosθ θ̈ = F − F_fric + m h sinθ θ̇²
    m h cosθ ẍ + J θ̈     = m g h sinθ − b θ̇

with ``F = FORCE_SCALE * clip(action[0], -1, 1)``, a tanh-smoothed Coulomb
cart friction ``F_fric = μ (M+m) g tanh(ẋ / 0.05)`` and a viscous hinge
damping ``b = 0.2 s · μ m g h``, where ``μ`` is the env's ``friction``. The
2×2 system is solved in closed form for all envs at once and integrated with
the explicit midpoint rule (RK2; the force is held over the step), so with
``μ = 0`` and no force the mechanical energy (:meth:`CartPoleBatch.energy`)
is conserved to within a small integration error over short horizons.

Per step the batch fills ``rewards`` (float32), ``dones`` (cart off the
track: ``|x| > X_LIMIT``, or a non-finite state) and ``truncateds``
(``t >= episode_length``). It never resets anything on its own: the caller
decides which envs to reset and calls :meth:`CartPoleBatch.reset` with a mask.

Observation layout (float32, ``obs_size >= MIN_OBS_SIZE``)::

    0 x   1 x_dot   2 cos θ   3 sin θ   4 θ_dot
    5 .. 5+E-1   echo of the actions applied in the last step (clipped to [-1, 1])
    then         time fraction t/episode_length, pole_length, pole_mass,
                 cart_mass, friction, as many as fit; zeros after that

where ``E = min(act_size, obs_size - 5)`` (:attr:`CartPoleBatch.echo_slice`).
The echo lets a test prove that the engine applied exactly the trainer's
actions: every action dimension is echoed, even the ones the dynamics ignore.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..protocol.errors import LuckyMonitorError
from ..protocol.header import MAX_ENVS, MAX_VEC

GRAVITY = 9.81
#: newtons for action[0] == 1
FORCE_SCALE = 10.0
#: the track ends at ±X_LIMIT metres; beyond that the episode is done
X_LIMIT = 2.0
#: features before the action echo
STATE_FEATURES = 5
#: the smallest obs_size: the state plus the echo of action[0]
MIN_OBS_SIZE = STATE_FEATURES + 1
#: names of the features that follow the echo, in order
EXTRA_FEATURES = ("time_fraction", "pole_length", "pole_mass", "cart_mass", "friction")

_V_EPS = 0.05  # m/s, smoothing of the Coulomb friction
_HINGE_DAMPING_TIME = 0.2  # s


class SimError(LuckyMonitorError):
    """Bad configuration or input handed to the reference simulation."""


def _range(name: str, value: Any, lo: float, hi: float, *, open_lo: bool = False) -> tuple[float, float]:
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise SimError(f"{name}: expected a (low, high) pair of numbers, got {value!r}") from exc
    for v in (a, b):
        bad_lo = v <= lo if open_lo else v < lo
        if not math.isfinite(v) or bad_lo or v > hi:
            bound = "(" if open_lo else "["
            raise SimError(f"{name}: {v} outside {bound}{lo}, {hi}]")
    if a > b:
        raise SimError(f"{name}: low {a} > high {b}")
    return (a, b)


@dataclass(frozen=True)
class Contract:
    """Domain-randomisation contract, mirroring ResetAgent's SimulationContract.

    Each ``*_range`` is a ``(low, high)`` pair; a reset draws every parameter
    of an env uniformly from its range. The contract applies to the envs reset
    after :meth:`CartPoleBatch.set_contract`.

    Attributes
    ----------
    pole_length_range : (float, float)
        Full rod length, metres, in (0, 5].
    pole_mass_range : (float, float)
        Rod mass, kg, in (0, 100].
    cart_mass_range : (float, float)
        Cart mass, kg, in (0, 100].
    friction_range : (float, float)
        Friction coefficient μ, in [0, 1].
    init_angle_noise : float
        Half-width (rad, in [0, pi]) of the uniform noise on the initial angle
        around hanging down and on the initial angular velocity (rad/s).
    episode_length : int
        Steps before truncation, 1..2**31-1.
    dt : float
        Step length, seconds, in (0, 0.1].
    seed : int or None
        When not None, :meth:`CartPoleBatch.set_contract` reseeds the random
        generator with it, so the following resets are reproducible.

    Raises
    ------
    SimError
        On any value outside the ranges above.
    """

    pole_length_range: tuple[float, float] = (0.4, 0.8)
    pole_mass_range: tuple[float, float] = (0.05, 0.2)
    cart_mass_range: tuple[float, float] = (0.8, 1.2)
    friction_range: tuple[float, float] = (0.0, 0.05)
    init_angle_noise: float = 0.3
    episode_length: int = 500
    dt: float = 0.02
    seed: int | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "pole_length_range", _range("pole_length_range", self.pole_length_range, 0.0, 5.0, open_lo=True))
        put(self, "pole_mass_range", _range("pole_mass_range", self.pole_mass_range, 0.0, 100.0, open_lo=True))
        put(self, "cart_mass_range", _range("cart_mass_range", self.cart_mass_range, 0.0, 100.0, open_lo=True))
        put(self, "friction_range", _range("friction_range", self.friction_range, 0.0, 1.0))
        try:
            noise = float(self.init_angle_noise)
            dt = float(self.dt)
            length = self.episode_length
            if isinstance(length, bool) or int(length) != length:
                raise ValueError
            length = int(length)
            seed = self.seed
            if seed is not None:
                if isinstance(seed, bool) or int(seed) != seed:
                    raise ValueError
                seed = int(seed)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SimError(f"contract has a non-numeric or non-integer field: {exc or self!r}") from exc
        if not (math.isfinite(noise) and 0.0 <= noise <= math.pi):
            raise SimError(f"init_angle_noise: {noise} outside [0, pi]")
        if not (math.isfinite(dt) and 0.0 < dt <= 0.1):
            raise SimError(f"dt: {dt} outside (0, 0.1]")
        if not 1 <= length <= 2**31 - 1:
            raise SimError(f"episode_length: {length} outside 1..2**31-1")
        if seed is not None and not 0 <= seed < 2**64:
            raise SimError(f"seed: {seed} outside 0..2**64-1")
        put(self, "init_angle_noise", noise)
        put(self, "dt", dt)
        put(self, "episode_length", length)
        put(self, "seed", seed)

    @classmethod
    def from_message(cls, msg: Any, base: Contract | None = None) -> Contract:
        """Build a contract from a ResetAgent ``SimulationContract`` message (duck-typed).

        Parameters
        ----------
        msg : object
            Anything with the message's attribute names: ``seed``, ``episode_length``,
            ``randomize``, ``friction_scale``, ``mass_scale``, ``joint_position_noise``
            (ranges are objects with ``min``/``max`` or None). Other fields are ignored.
        base : Contract, optional
            The contract in force; absent fields keep its setting.

        Returns
        -------
        Contract
            ``seed`` 0 keeps the base seed; ``episode_length`` 0 keeps the base length.
            ``friction_scale`` / ``mass_scale`` multiply the *default* ranges (so the
            same message always gives the same contract); ``joint_position_noise``
            sets ``init_angle_noise`` to its largest magnitude. ``randomize=False``
            pins every physical parameter to the middle of its range.

        Raises
        ------
        SimError
            On fields of the wrong type or giving values out of range.
        """
        base = cls() if base is None else base
        default = cls()

        def scaled(rng: tuple[float, float], scale: Any) -> tuple[float, float]:
            if scale is None:
                return rng
            try:
                lo, hi = float(scale.min), float(scale.max)
            except (AttributeError, TypeError, ValueError) as exc:
                raise SimError(f"contract: range {scale!r} lacks numeric min/max") from exc
            return (rng[0] * lo, rng[1] * hi)

        fields_: dict[str, Any] = {}
        try:
            seed = int(getattr(msg, "seed", 0) or 0)
            length = int(getattr(msg, "episode_length", 0) or 0)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SimError(f"contract: bad seed or episode_length: {exc}") from exc
        fields_["seed"] = seed if seed else base.seed
        fields_["episode_length"] = length if length else base.episode_length
        friction = getattr(msg, "friction_scale", None)
        mass = getattr(msg, "mass_scale", None)
        fields_["friction_range"] = (
            base.friction_range if friction is None else scaled(default.friction_range, friction)
        )
        fields_["pole_mass_range"] = base.pole_mass_range if mass is None else scaled(default.pole_mass_range, mass)
        fields_["cart_mass_range"] = base.cart_mass_range if mass is None else scaled(default.cart_mass_range, mass)
        fields_["pole_length_range"] = base.pole_length_range
        noise = getattr(msg, "joint_position_noise", None)
        if noise is not None:
            try:
                fields_["init_angle_noise"] = min(math.pi, max(abs(float(noise.min)), abs(float(noise.max))))
            except (AttributeError, TypeError, ValueError, OverflowError) as exc:
                raise SimError(f"contract: joint_position_noise {noise!r} lacks numeric min/max") from exc
        if not getattr(msg, "randomize", True):
            for name in ("friction_range", "pole_mass_range", "cart_mass_range", "pole_length_range"):
                lo, hi = fields_[name]
                fields_[name] = ((lo + hi) / 2.0,) * 2
        return dataclasses.replace(base, **fields_)


@dataclass
class Params:
    """Per-env physical parameters, each a float64 array of shape ``(n,)``.

    ``hue`` (in [0, 1)) is drawn per episode and only colours the pole, so a
    reset is visible in the camera image.
    """

    pole_length: np.ndarray
    pole_mass: np.ndarray
    cart_mass: np.ndarray
    friction: np.ndarray
    hue: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class SimInfo:
    """What GetMujocoInfo reports: generalised coordinates, velocities, actuators, step."""

    nq: int
    nv: int
    nu: int
    timestep: float


def _check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not lo <= int(value) <= hi:
        raise SimError(f"{name}: {value!r}, must be an integer in {lo}..{hi}")
    return int(value)


class CartPoleBatch:
    """``num_envs`` independent cart-pole swing-up envs, stepped together.

    Parameters
    ----------
    num_envs : int
        1..MAX_ENVS.
    obs_size : int
        Floats per observation, MIN_OBS_SIZE..MAX_VEC; layout in the module docstring.
    act_size : int
        Floats per action, 1..MAX_VEC; ``action[0]`` is the cart force in [-1, 1],
        the other dimensions are ignored by the dynamics but echoed.
    seed : int
        Seed of the random generator used by :meth:`reset` (unless the contract
        carries its own seed).
    contract : Contract, optional
        Randomisation ranges; defaults to ``Contract()``.

    Raises
    ------
    SimError
        On sizes out of range or a bad seed.

    Notes
    -----
    All envs are reset once on construction. State arrays (float64 unless noted)
    are public and may be read freely; write them only to set up tests.
    """

    def __init__(
        self, num_envs: int, obs_size: int, act_size: int, *, seed: int = 0, contract: Contract | None = None
    ) -> None:
        n = _check_int("num_envs", num_envs, 1, MAX_ENVS)
        self.num_envs = n
        self.obs_size = _check_int("obs_size", obs_size, MIN_OBS_SIZE, MAX_VEC)
        self.act_size = _check_int("act_size", act_size, 1, MAX_VEC)
        seed = _check_int("seed", seed, 0, 2**64 - 1)
        if contract is None:
            contract = Contract()
        if not isinstance(contract, Contract):
            raise SimError(f"contract must be a Contract, got {type(contract).__name__}")
        self._contract = contract
        self._rng = np.random.default_rng(seed if contract.seed is None else contract.seed)

        self.x = np.zeros(n)
        self.x_dot = np.zeros(n)
        self.theta = np.zeros(n)
        self.theta_dot = np.zeros(n)
        #: steps taken in the current episode, int64
        self.t = np.zeros(n, dtype=np.int64)
        self.params = Params(*(np.zeros(n) for _ in range(5)))
        #: actions applied in the last step, clipped to [-1, 1], float32 (n, act_size)
        self.last_actions = np.zeros((n, self.act_size), dtype=np.float32)
        self.rewards = np.zeros(n, dtype=np.float32)
        self.dones = np.zeros(n, dtype=bool)
        self.truncateds = np.zeros(n, dtype=bool)
        self._force = np.zeros(n)
        # cos θ and sin θ of the current state: computed once per step, shared by
        # the reward, write_obs and the first stage of the next step; reset()
        # refreshes the envs it touches. ``_trig_of`` holds the angles they were
        # computed from, so a state written from outside (tests set up states
        # that way) is noticed bit for bit and its cos/sin recomputed.
        self._cos = np.ones(n)
        self._sin = np.zeros(n)
        self._trig_of = np.zeros(n)
        # per-step scratch: every temporary of step() lives here, so a step allocates nothing of size n
        self._scratch = np.empty((18, n))
        (
            self._total,
            self._mh,
            self._mhg,
            self._j,
            self._tj,
            self._fric,
            self._damp,
            self._a12,
            self._r1,
            self._r2,
            self._det,
            self._tmp,
            self._v1,
            self._v2,
            self._v3,
            self._v4,
            self._c2,
            self._s2,
        ) = self._scratch
        self._flags = np.empty((3, n), dtype=bool)
        self._nan = np.empty((n, self.act_size), dtype=bool)
        self._head: np.ndarray | None = None  # contiguous scratch for write_obs
        n_echo = min(self.act_size, self.obs_size - STATE_FEATURES)
        self._echo = slice(STATE_FEATURES, STATE_FEATURES + n_echo)
        self._n_extra = min(len(EXTRA_FEATURES), self.obs_size - self._echo.stop)
        self.reset()

    # ------------------------------------------------------------------ properties
    @property
    def contract(self) -> Contract:
        """The randomisation contract in force."""
        return self._contract

    def set_contract(self, contract: Contract) -> None:
        """Replace the contract; it applies to the envs reset from now on.

        Parameters
        ----------
        contract : Contract
            New ranges. When ``contract.seed`` is not None the random generator
            is reseeded with it.

        Raises
        ------
        SimError
            If ``contract`` is not a :class:`Contract`.
        """
        if not isinstance(contract, Contract):
            raise SimError(f"contract must be a Contract, got {type(contract).__name__}")
        self._contract = contract
        if contract.seed is not None:
            self._rng = np.random.default_rng(contract.seed)

    @property
    def dt(self) -> float:
        """Step length in seconds."""
        return self._contract.dt

    @property
    def info(self) -> SimInfo:
        """Model facts as GetMujocoInfo reports them."""
        return SimInfo(nq=2, nv=2, nu=1, timestep=self._contract.dt)

    @property
    def echo_slice(self) -> slice:
        """Columns of the observation that echo the applied actions (``act[:, :E]``)."""
        return self._echo

    @property
    def extra_slice(self) -> slice:
        """Columns holding :data:`EXTRA_FEATURES` (possibly empty)."""
        return slice(self._echo.stop, self._echo.stop + self._n_extra)

    # ------------------------------------------------------------------ episode control
    def _mask(self, mask: Any) -> np.ndarray:
        if mask is None:
            return np.ones(self.num_envs, dtype=bool)
        m = np.asarray(mask)
        if m.shape != (self.num_envs,) or m.dtype.kind not in "bui":
            raise SimError(f"reset mask must be bool/int of shape ({self.num_envs},), got {m.dtype} {m.shape}")
        return m.astype(bool, copy=False)

    def reset(self, mask: np.ndarray | None = None) -> None:
        """Start a new episode in the selected envs, re-randomised from the contract.

        Parameters
        ----------
        mask : numpy.ndarray of bool, shape (num_envs,), optional
            Envs to reset (nonzero = reset); None resets all.

        Raises
        ------
        SimError
            On a mask of the wrong shape or type.

        Notes
        -----
        Reset envs get ``t = 0``, hanging-down initial state, zero echo, and
        their ``rewards``, ``dones`` and ``truncateds`` cleared. Other envs and
        their random draws are untouched; the generator advances by a number of
        draws that depends only on the count of reset envs.
        """
        m = self._mask(mask)
        idx = np.flatnonzero(m)
        k = idx.size
        if k == 0:
            return
        c = self._contract
        rng = self._rng
        p = self.params
        p.pole_length[idx] = rng.uniform(*c.pole_length_range, size=k)
        p.pole_mass[idx] = rng.uniform(*c.pole_mass_range, size=k)
        p.cart_mass[idx] = rng.uniform(*c.cart_mass_range, size=k)
        p.friction[idx] = rng.uniform(*c.friction_range, size=k)
        p.hue[idx] = rng.uniform(0.0, 1.0, size=k)
        noise = c.init_angle_noise
        theta = _wrap(np.pi + rng.uniform(-noise, noise, size=k))
        self.theta[idx] = theta
        self._trig_of[idx] = theta
        self._cos[idx] = np.cos(theta)
        self._sin[idx] = np.sin(theta)
        self.theta_dot[idx] = rng.uniform(-noise, noise, size=k)
        self.x[idx] = 0.0
        self.x_dot[idx] = 0.0
        self.t[idx] = 0
        self.last_actions[idx] = 0.0
        self.rewards[idx] = 0.0
        self.dones[idx] = False
        self.truncateds[idx] = False

    # ------------------------------------------------------------------ dynamics
    def _derive(self) -> None:
        """Recompute the per-env constants of the equations of motion from ``params``."""
        p = self.params
        m = p.pole_mass
        np.add(p.cart_mass, m, out=self._total)
        np.multiply(0.5, m, out=self._mh)
        self._mh *= p.pole_length
        np.multiply(self._mh, GRAVITY, out=self._mhg)
        np.square(p.pole_length, out=self._j)
        np.multiply(m, self._j, out=self._j)
        self._j /= 3.0
        np.multiply(self._total, self._j, out=self._tj)
        np.multiply(p.friction, self._total, out=self._fric)
        self._fric *= GRAVITY
        np.multiply(_HINGE_DAMPING_TIME, p.friction, out=self._damp)
        self._damp *= self._mhg

    def _accel(
        self, xd: np.ndarray, cos: np.ndarray, sin: np.ndarray, thd: np.ndarray, xdd: np.ndarray, thdd: np.ndarray
    ) -> None:
        """Write the accelerations at (``xd``, θ, ``thd``), with ``cos``/``sin`` of θ, into ``xdd``/``thdd``."""
        mh = self._mh
        a12, r1, r2, det, tmp = self._a12, self._r1, self._r2, self._det, self._tmp
        np.multiply(cos, mh, out=a12)
        np.divide(xd, _V_EPS, out=r1)
        np.tanh(r1, out=r1)
        r1 *= self._fric
        np.subtract(self._force, r1, out=r1)
        np.multiply(mh, sin, out=tmp)
        tmp *= thd
        tmp *= thd
        r1 += tmp
        np.multiply(self._mhg, sin, out=r2)
        np.multiply(self._damp, thd, out=tmp)
        r2 -= tmp
        np.multiply(a12, a12, out=det)
        np.subtract(self._tj, det, out=det)
        np.multiply(self._j, r1, out=xdd)
        np.multiply(a12, r2, out=tmp)
        xdd -= tmp
        xdd /= det
        np.multiply(self._total, r2, out=thdd)
        np.multiply(a12, r1, out=tmp)
        thdd -= tmp
        thdd /= det

    def _refresh_trig(self) -> None:
        """Recompute ``_cos``/``_sin`` where ``theta`` is not bit for bit the angle they belong to."""
        stale = np.not_equal(self.theta.view(np.int64), self._trig_of.view(np.int64), out=self._flags[0])
        if stale.any():
            idx = np.flatnonzero(stale)
            theta = self.theta[idx]
            self._trig_of[idx] = theta
            self._cos[idx] = np.cos(theta)
            self._sin[idx] = np.sin(theta)

    def step(self, actions: np.ndarray) -> None:
        """Apply actions and advance every env by one ``dt``.

        Parameters
        ----------
        actions : numpy.ndarray, shape (num_envs, act_size)
            Any real dtype. Values are clipped to [-1, 1]; NaN counts as 0.

        Raises
        ------
        SimError
            On a wrong shape or a non-numeric array.

        Notes
        -----
        Afterwards ``rewards`` holds ``0.5 (1 + cos θ) − 0.01 a₀² −
        0.001 min(θ̇², 100) − 0.05 (x / X_LIMIT)²`` (about −0.2..1), ``dones``
        marks envs whose cart left the track (or whose state went non-finite)
        and ``truncateds`` envs with ``t >= episode_length``. Both are
        independent of each other; done envs keep stepping until reset.

        A step allocates no temporary of size ``num_envs`` (all live in
        preallocated scratch; only the indices of the angles that wrap are
        gathered) and evaluates two sines and two cosines per env:
        those of the midpoint and of the new state, which the next step's
        first stage reuses.
        """
        a = np.asarray(actions)
        if a.shape != (self.num_envs, self.act_size) or a.dtype.kind not in "fiub":
            raise SimError(
                f"actions must be a real array of shape ({self.num_envs}, {self.act_size}), got {a.dtype} {a.shape}"
            )
        la = self.last_actions
        np.clip(a, -1.0, 1.0, out=la, casting="unsafe")
        if a.dtype.kind == "f":  # clip keeps NaN; it counts as 0
            nan = np.isnan(la, out=self._nan)
            if nan.any():
                np.copyto(la, 0.0, where=nan)
        np.multiply(la[:, 0], FORCE_SCALE, out=self._force)

        self._derive()
        self._refresh_trig()
        dt = self._contract.dt
        half = 0.5 * dt
        x, xd, th, thd = self.x, self.x_dot, self.theta, self.theta_dot
        xd2, thd2, th2, tmp = self._v1, self._v2, self._v3, self._tmp
        # explicit midpoint (RK2) on (x, ẋ, θ, θ̇): half the transcendental calls of RK4
        self._accel(xd, self._cos, self._sin, thd, xd2, thd2)
        xd2 *= half
        xd2 += xd
        thd2 *= half
        thd2 += thd
        np.multiply(thd, half, out=th2)
        th2 += th
        np.cos(th2, out=self._c2)
        np.sin(th2, out=self._s2)
        a2, b2 = self._v4, th2  # th2 is not needed after its cos and sin
        self._accel(xd2, self._c2, self._s2, thd2, a2, b2)
        np.multiply(dt, xd2, out=tmp)
        x += tmp
        np.multiply(dt, thd2, out=tmp)
        th += tmp
        a2 *= dt
        xd += a2
        b2 *= dt
        thd += b2
        _wrap(th, out=th, scratch=self._flags[1:])
        self.t += 1

        np.cos(th, out=self._cos)
        np.sin(th, out=self._sin)
        np.copyto(self._trig_of, th)
        finite = self._flags[0]
        np.add(x, xd, out=tmp)  # a sum is finite only if every term is
        tmp += thd
        tmp += th
        np.isfinite(tmp, out=finite)
        np.logical_not(finite, out=finite)
        np.abs(x, out=tmp)
        np.greater(tmp, X_LIMIT, out=self.dones)
        self.dones |= finite
        np.greater_equal(self.t, self._contract.episode_length, out=self.truncateds)
        r = self._v1  # xd2 is spent
        np.add(self._cos, 1.0, out=r)
        r *= 0.5
        np.copyto(tmp, la[:, 0])  # as float64: a cast copy needs no buffer, a casting square would
        np.square(tmp, out=tmp)
        tmp *= 0.01
        r -= tmp
        np.multiply(thd, thd, out=tmp)
        np.minimum(tmp, 100.0, out=tmp)
        tmp *= 0.001
        r -= tmp
        np.divide(x, X_LIMIT, out=tmp)
        np.square(tmp, out=tmp)
        tmp *= 0.05
        r -= tmp
        bad = np.isfinite(r, out=finite)
        if not bad.all():  # NaN and ±inf count as 0
            np.logical_not(bad, out=bad)
            np.copyto(r, 0.0, where=bad)
        self.rewards[:] = r

    def advance(
        self,
        actions: np.ndarray,
        obs: np.ndarray,
        rewards: np.ndarray,
        dones: np.ndarray,
        truncateds: np.ndarray | None = None,
        *,
        clear_tail: bool = True,
    ) -> None:
        """One vector-env step as the engine publishes it: step, report, auto-reset, observe.

        Parameters
        ----------
        actions : numpy.ndarray, shape (num_envs, act_size)
            As for :meth:`step`.
        obs, rewards, dones, truncateds : numpy.ndarray
            Destinations (e.g. the segment's regions): ``rewards``, ``dones``
            and ``truncateds`` (when given) receive this step's values, then the
            envs that ended (done or truncated) are reset and ``obs`` receives
            every env's observation, the first of the new episode for those.
        clear_tail : bool
            As for :meth:`write_obs`.

        Raises
        ------
        SimError
            As :meth:`step` and :meth:`write_obs` do.
        """
        self.step(actions)
        rewards[:] = self.rewards
        dones[:] = self.dones
        if truncateds is not None:
            truncateds[:] = self.truncateds
        ended = np.logical_or(self.dones, self.truncateds, out=self._flags[1])
        if ended.any():
            self.reset(ended)
        self.write_obs(obs, clear_tail=clear_tail)

    # ------------------------------------------------------------------ read-outs
    def write_obs(self, out: np.ndarray, *, clear_tail: bool = True) -> None:
        """Write every env's observation into ``out`` (layout in the module docstring).

        Parameters
        ----------
        out : numpy.ndarray, float32, shape (num_envs, obs_size)
            Destination, e.g. a view of the shared observation region; may be
            strided. Only temporaries of shape ``(num_envs,)`` are allocated.
        clear_tail : bool
            Zero the unused columns after the features. A caller that owns
            ``out`` and knows they are still zero (the engine, after its first
            write into the segment) passes False and saves a full-width write.

        Raises
        ------
        SimError
            On a wrong shape or dtype, or a read-only array.
        """
        if not isinstance(out, np.ndarray) or out.shape != (self.num_envs, self.obs_size) or out.dtype != np.float32:
            raise SimError(f"obs buffer must be float32 of shape ({self.num_envs}, {self.obs_size})")
        if not out.flags.writeable:
            raise SimError("obs buffer is read-only")
        # Assemble the used columns in a small contiguous buffer (column writes
        # there stay in cache), then copy them into ``out`` row by row: far
        # fewer cache lines touched than strided column writes into a wide row.
        e = self._echo
        width = e.stop + self._n_extra
        head = self._head
        if head is None or head.shape[1] != width:
            head = self._head = np.empty((self.num_envs, width), np.float32)
        head[:, 0] = self.x
        head[:, 1] = self.x_dot
        head[:, 2] = self._cos
        head[:, 3] = self._sin
        head[:, 4] = self.theta_dot
        _copy_rows(head[:, e], self.last_actions[:, : e.stop - e.start])
        col = e.stop
        p = self.params
        extras = (None, p.pole_length, p.pole_mass, p.cart_mass, p.friction)
        for i in range(self._n_extra):
            if i == 0:
                np.divide(self.t, self._contract.episode_length, out=head[:, col], casting="same_kind")
            else:
                head[:, col] = extras[i]
            col += 1
        _copy_rows(out[:, :width], head)
        if clear_tail and width < self.obs_size:
            out[:, width:] = 0.0

    def joint_state(self, env: int) -> tuple[np.ndarray, np.ndarray]:
        """Joint positions and velocities of one env, as GetJointState reports them.

        Parameters
        ----------
        env : int
            Env index, 0..num_envs-1.

        Returns
        -------
        positions, velocities : numpy.ndarray
            ``[x, theta]`` and ``[x_dot, theta_dot]``, float64.

        Raises
        ------
        SimError
            On an index out of range.
        """
        i = _check_int("env", env, 0, self.num_envs - 1)
        return (np.array([self.x[i], self.theta[i]]), np.array([self.x_dot[i], self.theta_dot[i]]))

    def energy(self) -> np.ndarray:
        """Mechanical energy of every env (J), zero potential at the hinge height."""
        p = self.params
        m = p.pole_mass
        h = 0.5 * p.pole_length
        j = m * p.pole_length**2 / 3.0
        c = np.cos(self.theta)
        kin = 0.5 * (p.cart_mass + m) * self.x_dot**2 + m * h * self.x_dot * self.theta_dot * c
        kin += 0.5 * j * self.theta_dot**2
        return kin + m * GRAVITY * h * c

    def pole_tip(self) -> tuple[np.ndarray, np.ndarray]:
        """World position ``(x, z)`` of every pole tip, hinge at ``(x, 0)``.

        ``x_tip = x + L sin θ``, ``z_tip = L cos θ``: a positive angle leans the
        tip towards ``+x``.
        """
        length = self.params.pole_length
        return self.x + length * np.sin(self.theta), length * np.cos(self.theta)


def _wrap(a: np.ndarray, out: np.ndarray | None = None, scratch: np.ndarray | None = None) -> np.ndarray:
    """Wrap angles to [-pi, pi): ``((a + pi) mod 2 pi) - pi``.

    ``mod`` (a floating-point remainder, slow) is applied only where ``a + pi`` lies
    outside ``[0, 2 pi)``: inside, it returns its argument exactly, so the result
    is the same as applying it everywhere (small arrays get it everywhere).
    ``scratch``: two bool rows of ``a``'s length, to allocate nothing.
    """
    r = np.add(a, np.pi, out=out)
    if r.size <= 256:  # a few resets: the masks would cost more than the remainder
        np.mod(r, 2.0 * np.pi, out=r)
        r -= np.pi
        return r
    if scratch is None:
        scratch = np.empty((2, r.size), dtype=bool)
    low, high = scratch[0], scratch[1]
    np.less(r, 0.0, out=low)
    np.greater_equal(r, 2.0 * np.pi, out=high)
    low |= high
    if low.any():
        idx = np.flatnonzero(low)
        r[idx] = np.mod(r[idx], 2.0 * np.pi)
    r -= np.pi
    return r


def _copy_rows(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for 2-d float32 arrays of the same shape, a row at a time.

    Where both have contiguous rows, each row is copied as one opaque item
    (a void view): a plain assignment of narrow rows runs numpy's inner
    loop once per row, which costs about twice as much.
    """
    if dst.strides[1] == src.strides[1] == src.itemsize and dst.dtype == src.dtype and dst.shape[1] > 0:
        item = np.dtype((np.void, src.itemsize * src.shape[1]))
        np.copyto(dst.view(item)[:, 0], src.view(item)[:, 0])
    else:
        dst[...] = src
