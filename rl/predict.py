"""`zoo predict` for rl/ppo: run a trained agent for a few episodes and write a video of the first.

    python -m zoo predict ckpt_path=<run>/checkpoints/last.ckpt predict.episodes=5 predict.out=agent.gif

Options (predict.*): episodes (5), seed (0), out (a .gif or .mp4 path; default <the checkpoint's run
dir>/episode.gif; "" for none), max_frames (1000), fps (30). `input` is not used (the environment is the checkpoint's).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from zoo.errors import ZooError
from zoo.rl.envs import no_video_hint
from zoo.rl.evaluate import record_episode, run_episodes, save_video

# The predict.* keys this task reads (every other predict.* key is refused, not dropped).
PREDICT_KEYS = ("episodes", "seed", "out", "max_frames", "fps")


def predict(model: Any, cfg: DictConfig, input: str | None) -> Iterator[dict]:
    env_id = model.env_cfg["id"]
    asked = cfg.task.get("env", {}).get("id") if cfg.get("task") else None
    if asked and asked != env_id:
        raise ZooError(f"the checkpoint's agent plays {env_id}, not {asked}; drop task.env.id=... or pass a "
                       f"checkpoint trained on {asked}")
    opts = cfg.get("predict") or {}
    episodes, seed = int(opts.get("episodes", 5)), int(opts.get("seed", 0))
    if episodes < 1:
        raise ZooError(f"predict.episodes must be >= 1, got {episodes}")
    out = opts.get("out", str(Path(cfg.run_dir) / "episode.gif"))
    check_video_path(out)  # before the episodes: a wrong name was found only after playing them all
    policy = model.collector.policy(model.agent, deterministic=True)
    returns, lengths = run_episodes(policy, env_id, episodes, seed, model.env_cfg["kwargs"])
    for i, (r, n) in enumerate(zip(returns, lengths)):
        yield {"env": env_id, "episode": i, "return": float(r), "length": int(n)}
    if out:
        frames, ret = record_episode(policy, env_id, seed, model.env_cfg["kwargs"],
                                     max_frames=int(opts.get("max_frames", 1000)))
        if frames is None:
            yield {"env": env_id, "video": None, "note": no_video_hint(env_id)}
        else:
            yield {"env": env_id, "video": save_video(frames, str(out), fps=int(opts.get("fps", 30))),
                   "frames": int(len(frames)), "return": ret}


VIDEO_SUFFIXES = (".gif", ".mp4")


def check_video_path(out: Any) -> None:
    """predict.out must name a .gif or .mp4 file (or be empty for none), not a folder or another kind of file."""
    if not out:
        return
    path = Path(str(out)).expanduser()
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise ZooError(f"predict.out={out}: the video is written as .gif or .mp4; name a file with one of those "
                       "suffixes (or predict.out='' for none)")
    if path.is_dir():
        raise ZooError(f"predict.out={out} is a folder; name the video file, e.g. predict.out={path / 'agent.gif'}")
