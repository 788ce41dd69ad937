"""The standard Atari preprocessing (Machado et al. 2018; "37 details", Atari list) without OpenCV.

gymnasium's AtariPreprocessing needs opencv-python, which the zoo does not depend on: frames are grayscale from
ALE itself (obs_type="grayscale") and resized to 84x84 with Pillow.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from PIL import Image


class NoopReset(gym.Wrapper):
    """1..noop_max no-op actions after a reset: varied start states (detail #1)."""

    def __init__(self, env: gym.Env, noop_max: int = 30) -> None:
        super().__init__(env)
        self.noop_max = noop_max

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = self.env.reset(**kwargs)
        for _ in range(int(self.np_random.integers(1, self.noop_max + 1))):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class MaxAndSkip(gym.Wrapper):
    """Repeat each action `skip` frames, sum the rewards, max-pool the last two frames (flicker; detail #2)."""

    def __init__(self, env: gym.Env, skip: int = 4) -> None:
        super().__init__(env)
        self.skip = skip

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        total, frames = 0.0, []
        terminated = truncated = False
        info: dict = {}
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            frames.append(obs)
            if terminated or truncated:
                break
        return np.maximum(frames[-1], frames[-2]) if len(frames) > 1 else frames[-1], total, terminated, \
            truncated, info


class FireReset(gym.Wrapper):
    """Press FIRE after a reset in games that wait for it (Breakout): detail #5."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(1)
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        return obs, info


class Resize(gym.ObservationWrapper):
    """(210, 160) grayscale uint8 -> (size, size) uint8 with Pillow's bilinear filter."""

    def __init__(self, env: gym.Env, size: int = 84) -> None:
        super().__init__(env)
        self.size = size
        self.observation_space = gym.spaces.Box(0, 255, (size, size), np.uint8)

    def observation(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(Image.fromarray(obs).resize((self.size, self.size), Image.BILINEAR), dtype=np.uint8)


def make_atari(env_id: str, render_mode: str | None = None, **kwargs: Any) -> gym.Env:
    """ALE env -> (4, 84, 84) uint8 stacked frames; rewards stay raw (the module can train on their sign)."""
    env = gym.make(env_id, frameskip=1, obs_type="grayscale", render_mode=render_mode, **kwargs)
    env = MaxAndSkip(NoopReset(env, 30), 4)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    return gym.wrappers.FrameStackObservation(Resize(env, 84), 4)
