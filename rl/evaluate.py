"""Deterministic evaluation episodes and episode videos, shared by validation, `zoo test` and `zoo predict`."""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from zoo.rl.envs import is_mujoco, make_single, make_vector_env, no_video_hint

log = logging.getLogger(__name__)
MUJOCO_FRAME = {"width": 240, "height": 240}  # software EGL renders 480x480 in ~110 ms, 240x240 in a quarter

Policy = Callable[[np.ndarray], np.ndarray]  # (N, *obs_shape) observations -> (N, ...) env-ready actions


def run_episodes(policy: Policy, env_id: str, episodes: int, seed: int, env_kwargs: dict | None = None,
                 max_parallel: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """`episodes` full episodes -> (returns, lengths), each (episodes,).

    Each of the n parallel envs runs a fixed quota of episodes, so short episodes are not over-represented (taking
    the first K episodes to finish would be biased towards them).
    """
    n = max(1, min(episodes, max_parallel))
    quota = np.array([episodes // n + (i < episodes % n) for i in range(n)])
    envs = make_vector_env(env_id, n, "sync", env_kwargs)
    returns: list[list[float]] = [[] for _ in range(n)]
    lengths: list[list[int]] = [[] for _ in range(n)]
    try:
        obs, _ = envs.reset(seed=seed)
        while any(len(r) < q for r, q in zip(returns, quota)):
            obs, _, _, _, info = envs.step(policy(obs))
            if "_episode" in info:
                for i in np.flatnonzero(info["_episode"]):
                    if len(returns[i]) < quota[i]:
                        returns[i].append(float(info["episode"]["r"][i]))
                        lengths[i].append(int(info["episode"]["l"][i]))
    finally:
        envs.close()
    return np.array(sum(returns, [])), np.array(sum(lengths, []))


@contextlib.contextmanager
def quiet_gl() -> Iterator[None]:
    """GLFW's warnings without a display ('X11: The DISPLAY environment variable is missing', then 'not
    initialized') go to the log at debug level: the one 'no video' line says what they mean and what to do."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.filterwarnings("always", module="glfw")
        yield
    for w in seen:
        if w.filename and "glfw" in w.filename:
            log.debug("GLFW: %s", w.message)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def record_episode(policy: Policy, env_id: str, seed: int, env_kwargs: dict | None = None,
                   max_frames: int = 1000, every: int = 1) -> tuple[np.ndarray | None, float]:
    """One episode rendered as rgb_array -> (frames (T, H, W, 3) uint8 or None if the env cannot render, return).

    `every`: render every n-th step only (rendering costs more than the step); the return covers the steps played,
    up to `max_frames * every` of them. No frames (a missing renderer, or a blank first frame from a broken GL
    context): one warning line saying how to get videos, and None."""
    # Off-screen rendering: no window, no sound device (pygame otherwise complains about XDG_RUNTIME_DIR).
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    kwargs = {**(MUJOCO_FRAME if is_mujoco(env_id) else {}), **(env_kwargs or {})}
    try:
        with quiet_gl():
            env = make_single(env_id, render_mode="rgb_array", env_kwargs=kwargs)
    except Exception:  # noqa: BLE001 - no renderer (pygame missing, headless backend): a video is optional
        log.warning(no_video_hint(env_id))
        return None, float("nan")
    frames, total = [], 0.0
    try:
        obs, _ = env.reset(seed=seed)
        try:
            with quiet_gl():
                frame = env.render()
        except Exception:  # noqa: BLE001 - MuJoCo without an off-screen GL context raises here
            frame = None
        if frame is None or np.ptp(np.asarray(frame)) == 0:
            log.warning(no_video_hint(env_id))
            return None, float("nan")
        frames.append(frame)
        for t in range(1, max_frames * every):
            obs, reward, terminated, truncated, _ = env.step(policy(np.asarray(obs)[None])[0])
            total += float(reward)
            if t % every == 0:
                frames.append(env.render())
            if terminated or truncated:
                break
    finally:
        env.close()
    return np.stack(frames).astype(np.uint8), total


def save_video(frames: np.ndarray, path: str, fps: int = 30) -> str:
    """frames (T, H, W, 3) uint8 -> a .gif or .mp4 (by the path's suffix) through imageio."""
    import imageio.v2 as imageio

    from zoo.core import owned

    target = Path(path)
    fd, tmp = owned.temp_file(owned.make_dirs(target.parent), prefix=f".{target.name}.", suffix=target.suffix)
    os.close(fd)
    try:  # through a temp file: a stop mid-write never leaves half a video under the name asked for
        if target.suffix.lower() == ".gif":
            imageio.mimsave(tmp, list(frames), duration=1000 / fps, loop=0)
        else:
            imageio.mimsave(tmp, list(frames), fps=fps, macro_block_size=1)
        os.replace(tmp, target)
    except BaseException:
        owned.remove(tmp)
        raise
    return path
