"""Gymnasium environments for PPO: id checking, Atari wrappers, vector envs, and the space description the
agent is built from.

Vector envs use gymnasium 1.x `AutoresetMode.SAME_STEP`: a sub-env that ends an episode is reset inside the same
`step`, the returned observation is the new episode's first one and the last one is in `info["final_obs"]` (what
the truncation bootstrap needs). No step is wasted on NEXT_STEP's reset transition. Episode statistics come from
`gymnasium.wrappers.vector.RecordEpisodeStatistics` over the raw rewards (normalisation happens in the module).
"""

from __future__ import annotations

import ctypes.util
import difflib
import logging
import os
import sys
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from zoo.errors import ZooError

log = logging.getLogger(__name__)

SUPPORTED_ACTIONS = "Discrete and Box (continuous)"
_ATARI_REGISTERED = False


def _register_atari() -> None:
    global _ATARI_REGISTERED
    if not _ATARI_REGISTERED:
        try:
            import ale_py

            gym.register_envs(ale_py)
        except ImportError:  # Atari is optional; classic control works without it
            pass
        _ATARI_REGISTERED = True


def check_env_id(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec of `env_id`, or one ZooError line with the nearest known ids."""
    if env_id.startswith("ALE/"):
        _register_atari()
    try:
        return gym.spec(env_id)
    except gym.error.Error:
        if not env_id.startswith("ALE/"):
            _register_atari()
        near = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise ZooError(f"unknown gymnasium environment '{env_id}'{hint}; set task.env.id to a registered id, "
                       "e.g. CartPole-v1, Acrobot-v1, Pendulum-v1, ALE/Breakout-v5") from None


def is_atari(env_id: str) -> bool:
    spec = check_env_id(env_id)
    return "ale_py" in str(spec.entry_point)


def is_mujoco(env_id: str) -> bool:
    return ".mujoco" in str(check_env_id(env_id).entry_point)


def prepare_mujoco() -> None:
    """Import MuJoCo once, before gymnasium does, with an off-screen OpenGL backend on a headless machine.

    MuJoCo picks its GL backend from MUJOCO_GL when it is imported. Its default (GLFW) needs a display, so on a
    headless machine with libEGL (Mesa renders without a GPU too) the zoo chooses `egl` for videos; if EGL then
    fails to load, MuJoCo is imported again without it (training works, videos say why they are missing). A
    MUJOCO_GL the user set is kept, and a backend that fails to load is one line."""
    if "mujoco" in sys.modules:
        if sys.modules["mujoco"] is not None:  # None: an import that is known to fail
            _route_mujoco_warnings()
        return
    chosen = not os.environ.get("MUJOCO_GL") and not os.environ.get("DISPLAY") and ctypes.util.find_library("EGL")
    if chosen:
        os.environ["MUJOCO_GL"] = "egl"
    try:
        import mujoco  # noqa: F401
    except ImportError:
        raise ZooError(MUJOCO_MISSING) from None
    except Exception as e:  # noqa: BLE001 - PyOpenGL raises AttributeError/RuntimeError for a missing library
        for name in [m for m in sys.modules if m.split(".")[0] in ("mujoco", "OpenGL")]:
            del sys.modules[name]
        gl = os.environ.pop("MUJOCO_GL")
        if not chosen:
            raise ZooError(f"MuJoCo cannot load its MUJOCO_GL={gl} backend ({type(e).__name__}: {e}); unset "
                           "MUJOCO_GL, or install that backend (osmesa: the Debian package libosmesa6; egl: "
                           "libegl1)") from None
        import mujoco  # noqa: F401
    _route_mujoco_warnings()


def _route_mujoco_warnings() -> None:
    """MuJoCo's warnings (gymnasium's own models use a deprecated attribute) into the log at debug level: by
    default MuJoCo prints them and appends them to MUJOCO_LOG.TXT in the user's working folder."""
    import mujoco

    mujoco.set_mju_user_warning(lambda msg: log.debug("MuJoCo: %s", msg))


MUJOCO_MISSING = "needs the MuJoCo simulator, which is not installed: pip install 'mujoco>=3.1,<4'"


def make_single(env_id: str, render_mode: str | None = None, env_kwargs: dict | None = None) -> gym.Env:
    """One environment with the standard wrappers for its family (Atari: the Nature DQN preprocessing)."""
    kwargs = dict(env_kwargs or {})
    if is_mujoco(env_id):
        try:
            prepare_mujoco()
        except ZooError as e:
            raise ZooError(f"{env_id} {e}" if str(e) == MUJOCO_MISSING else str(e)) from None
    if is_atari(env_id):
        from zoo.rl.atari import make_atari

        # noop starts, max-pool over 4 skipped frames, 84x84 grayscale, 4 stacked; uint8 (the CNN scales them).
        return make_atari(env_id, render_mode=render_mode, **kwargs)
    if render_mode is not None:  # only when asked: not every env's constructor takes it
        kwargs["render_mode"] = render_mode
    try:
        return gym.make(env_id, **kwargs)
    except TypeError as e:
        raise ZooError(f"cannot make {env_id} with task.env.kwargs={kwargs}: {e}; fix or drop the kwargs") from None
    except gym.error.DependencyNotInstalled as e:
        if is_mujoco(env_id):
            raise ZooError(f"{env_id} {MUJOCO_MISSING}") from None
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ZooError(f"{env_id} needs a package that is not installed: {first}") from None


def no_video_hint(env_id: str) -> str:
    """Why an episode of `env_id` has no video, and how to get one."""
    if is_mujoco(env_id):
        gl = os.environ.get("MUJOCO_GL") or "unset"
        return (f"no video: MuJoCo cannot render off-screen here (MUJOCO_GL={gl}); set MUJOCO_GL=egl (EGL: the "
                "Debian package libegl1, or a GPU driver's) or MUJOCO_GL=osmesa (the Debian package libosmesa6)")
    return f"no video: {env_id} does not render rgb_array frames here"


def make_vector_env(env_id: str, num_envs: int, vectorization: str = "sync", env_kwargs: dict | None = None,
                    ) -> gym.vector.VectorEnv:
    """`num_envs` copies of `env_id` in a Sync or Async vector env, with episode statistics."""
    if num_envs < 1:
        raise ZooError(f"task.env.num_envs must be >= 1, got {num_envs}")
    check_env_id(env_id)
    fns: list[Callable[[], gym.Env]] = [lambda: make_single(env_id, env_kwargs=env_kwargs) for _ in range(num_envs)]
    mode = gym.vector.AutoresetMode.SAME_STEP
    if vectorization == "sync":
        envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    elif vectorization == "async":
        # Sub-processes pay on slow environments (Atari, MuJoCo); for CartPole the pipes cost more than the step.
        envs = gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode, context="spawn")
    else:
        raise ZooError(f"task.env.vectorization must be sync or async, got '{vectorization}'")
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def space_spec(env: gym.Env | gym.vector.VectorEnv) -> dict:
    """Plain description of the (single) observation and action spaces, kept in the module's hparams.

    {"obs_shape": [4], "obs_dtype": "float32", "action": {"type": "discrete", "n": 2}} or
    {"action": {"type": "box", "shape": [1], "low": [-2.0], "high": [2.0]}}.
    """
    obs_space = getattr(env, "single_observation_space", env.observation_space)
    act_space = getattr(env, "single_action_space", env.action_space)
    name = env.spec.id if getattr(env, "spec", None) is not None else "this environment"
    if not isinstance(obs_space, gym.spaces.Box):
        raise ZooError(f"{name} has a {type(obs_space).__name__} observation space; the PPO agent reads Box "
                       "observations only (vectors, or stacked image frames)")
    if isinstance(act_space, gym.spaces.Discrete):
        action = {"type": "discrete", "n": int(act_space.n)}
    elif isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        action = {"type": "box", "shape": list(act_space.shape), "low": act_space.low.astype(float).tolist(),
                  "high": act_space.high.astype(float).tolist()}
    else:
        raise ZooError(f"{name} has a {type(act_space).__name__}{tuple(getattr(act_space, 'shape', ()) or ())} "
                       f"action space; the PPO agent supports {SUPPORTED_ACTIONS} (1-d) actions")
    return {"obs_shape": list(obs_space.shape), "obs_dtype": str(np.dtype(obs_space.dtype)), "action": action}


def describe_env(env_id: str, env_kwargs: dict | None = None) -> dict:
    """space_spec of `env_id` from one throwaway instance (fails early on bad ids and unsupported spaces)."""
    env = make_single(env_id, env_kwargs=env_kwargs)
    try:
        return space_spec(env)
    finally:
        env.close()
