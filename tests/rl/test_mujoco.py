"""MuJoCo locomotion for rl/ppo without the CLI (fast): the rl-zoo presets, the normaliser through a checkpoint, the
ONNX policy with the normalisation folded in, fine-tuning across robots, videos, and the bad-input lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from zoo.base import instantiate
from zoo.errors import ZooError
from zoo.rl.module import PPO
from zoo.testing import ROOT, compose

pytest.importorskip("mujoco")

# rl-baselines3-zoo's hyperparams/ppo.yml (Hopper-v4, HalfCheetah-v4, Walker2d-v4 entries), as SB3 names them.
RL_ZOO = {
    "rl_hopper_rlzoo": dict(env="Hopper-v5", batch_size=32, n_epochs=5, gamma=0.999, gae_lambda=0.99, clip_range=0.2,
                            ent_coef=0.00229519, vf_coef=0.835671, max_grad_norm=0.7, learning_rate=9.80828e-05,
                            net=[256, 256], act="relu", ortho=False, log_std=-2.0),
    "rl_halfcheetah_rlzoo": dict(env="HalfCheetah-v5", batch_size=64, n_epochs=20, gamma=0.98, gae_lambda=0.92,
                                 clip_range=0.1, ent_coef=0.000401762, vf_coef=0.58096, max_grad_norm=0.8,
                                 learning_rate=2.0633e-05, net=[256, 256], act="relu", ortho=False, log_std=-2.0),
    "rl_walker2d_rlzoo": dict(env="Walker2d-v5", batch_size=32, n_epochs=20, gamma=0.99, gae_lambda=0.95,
                              clip_range=0.1, ent_coef=0.000585045, vf_coef=0.871923, max_grad_norm=1.0,
                              learning_rate=5.05041e-05, net=[64, 64], act="tanh", ortho=True,
                              log_std=0.0),  # no policy_kwargs: SB3's defaults
}
TINY = ["task.module.num_steps=64", "task.module.num_minibatches=2", "task.module.total_timesteps=1024"]


def preset(name: str, *overrides: str) -> PPO:
    return instantiate(compose([f"experiment={name}", *TINY, *overrides]).task.module)


@pytest.mark.parametrize("name", sorted(RL_ZOO))
def test_presets_are_rl_zoo_recipes_key_by_key(name: str) -> None:
    want = RL_ZOO[name]
    cfg = compose([f"experiment={name}"])
    env, m = cfg.task.env, cfg.task.module
    assert env.id == want["env"] and env.num_envs == 1 and env.normalize_obs and env.normalize_reward
    assert env.clip_obs == env.clip_reward == 10.0 and env.action_type == "box"
    assert m.total_timesteps == 1_000_000 and m.num_steps == 512
    assert m.num_steps // m.num_minibatches == want["batch_size"] and m.update_epochs == want["n_epochs"]
    assert (m.gamma, m.gae_lambda, m.clip_coef, m.ent_coef) == (want["gamma"], want["gae_lambda"],
                                                                want["clip_range"], want["ent_coef"])
    assert m.vf_coef == pytest.approx(2 * want["vf_coef"])  # SB3's value loss is the MSE, the zoo's half of it
    assert m.max_grad_norm == want["max_grad_norm"] and m.optimizer.lr == want["learning_rate"]
    assert m.optimizer.eps == 1e-5 and not m.anneal_lr and not m.clip_vloss and m.target_kl is None and m.norm_adv
    assert list(m.pi_hidden_sizes) == list(m.vf_hidden_sizes) == want["net"]
    assert (m.activation, m.ortho_init, m.log_std_init) == (want["act"], want["ortho"], want["log_std"])


def test_the_ppo_paper_preset_is_cleanrls_continuous_recipe() -> None:
    """experiment=rl_mujoco: CleanRL's ppo_continuous_action.py defaults (the PPO paper's MuJoCo settings)."""
    cfg = compose(["experiment=rl_mujoco", "task.env.id=Hopper-v5"])
    env, m = cfg.task.env, cfg.task.module
    assert env.id == "Hopper-v5" and env.num_envs == 1 and env.normalize_obs and env.normalize_reward
    assert env.clip_obs == env.clip_reward == 10.0 and env.action_type == "box"
    assert (m.total_timesteps, m.num_steps, m.num_steps // m.num_minibatches, m.update_epochs) == (1_000_000, 2048,
                                                                                                   64, 10)
    assert (m.gamma, m.gae_lambda, m.clip_coef, m.ent_coef, m.vf_coef, m.max_grad_norm) == (0.99, 0.95, 0.2, 0.0,
                                                                                            0.5, 0.5)
    assert m.clip_vloss and m.norm_adv and m.anneal_lr and m.target_kl is None
    assert (m.optimizer.lr, m.optimizer.eps) == (3e-4, 1e-5)
    assert list(m.hidden_sizes) == [64, 64] and m.pi_hidden_sizes is None and m.vf_hidden_sizes is None
    assert (m.activation, m.ortho_init, m.log_std_init) == ("tanh", True, 0.0)


def test_the_robots_names_are_their_best_measured_recipes() -> None:
    """experiment=rl_hopper differs from rl_mujoco on Hopper-v5 in gamma alone; rl_walker2d is rl_mujoco on
    Walker2d-v5; rl_halfcheetah is rl-zoo's HalfCheetah entry (docs/results/rl.md has the measurements)."""
    from zoo.base import plain
    from zoo.core.recorded import flatten

    def task(*overrides: str) -> dict:
        return flatten(plain(compose(list(overrides)).task))

    hopper, paper = task("experiment=rl_hopper"), task("experiment=rl_mujoco", "task.env.id=Hopper-v5")
    assert hopper.keys() == paper.keys() and hopper["env.id"] == "Hopper-v5"
    assert {k: (paper[k], v) for k, v in hopper.items() if paper[k] != v} == {"module.gamma": (0.99, 0.995)}
    assert task("experiment=rl_walker2d") == task("experiment=rl_mujoco", "task.env.id=Walker2d-v5")
    assert task("experiment=rl_halfcheetah") == task("experiment=rl_halfcheetah_rlzoo")


def test_preset_builds_the_networks_it_names() -> None:
    m = preset("rl_hopper_rlzoo")
    linear = [layer for layer in m.agent.actor if isinstance(layer, torch.nn.Linear)]
    assert [layer.out_features for layer in linear] == [256, 256, 3] and linear[0].in_features == 11
    assert isinstance(m.agent.actor[1], torch.nn.ReLU)
    assert torch.equal(m.agent.head.log_std.detach(), torch.full((3,), -2.0))
    # PyTorch's default init (uniform, bound 1/sqrt(fan_in)), not the orthogonal one with its 0.01-gain head
    assert linear[-1].weight.abs().max() > 0.02 and linear[-1].bias.abs().max() > 0
    ortho = preset("rl_hopper_rlzoo", "task.module.ortho_init=true")
    assert torch.allclose(ortho.agent.actor[-1].weight.norm(dim=1), torch.full((3,), 0.01), atol=1e-5)
    walker = preset("rl_walker2d_rlzoo")
    assert [layer.out_features for layer in walker.agent.critic if isinstance(layer, torch.nn.Linear)] == [64, 64, 1]
    wide_vf = preset("rl_hopper_rlzoo", "task.module.vf_hidden_sizes=[32]")
    assert [x.out_features for x in wide_vf.agent.critic if isinstance(x, torch.nn.Linear)] == [32, 1]


def test_normaliser_is_saved_restored_and_used_by_the_policy() -> None:
    m = preset("rl_hopper")
    m.collector.start(seed=0)
    m.collector.collect(m.agent, 64)
    m.collector.close()
    rms = m.collector.obs_rms
    assert float(rms.count) > 64 and float(rms.var.min()) != 1.0 and float(m.collector.reward_scaler.rms.count) > 64
    ckpt: dict = {}
    m.on_save_checkpoint(ckpt)
    fresh = preset("rl_hopper")
    fresh.agent.load_state_dict(m.agent.state_dict())
    obs = np.random.default_rng(0).normal(size=(5, 11))
    assert not np.allclose(fresh.collector.policy(fresh.agent)(obs), m.collector.policy(m.agent)(obs))
    fresh.on_load_checkpoint(ckpt)
    for a, b in ((fresh.collector.obs_rms, rms), (fresh.collector.reward_scaler.rms, m.collector.reward_scaler.rms)):
        assert torch.equal(a.mean, b.mean) and torch.equal(a.var, b.var) and torch.equal(a.count, b.count)
    assert np.array_equal(fresh.collector.policy(fresh.agent)(obs), m.collector.policy(m.agent)(obs))


def test_onnx_policy_folds_the_normalisation_and_matches_the_module(tmp_path: Path) -> None:
    import onnxruntime as ort

    sys.path.insert(0, str(ROOT / "tests" / "deploy"))
    from helpers import save_checkpoint

    from zoo.cli import main

    overrides = ["task.env.id=Pendulum-v1", "task.env.normalize_obs=true", "task.env.num_envs=2",
                 "task.module.hidden_sizes=[16,16]", "task.module.num_steps=16", "task.module.num_minibatches=2",
                 "task.module.total_timesteps=64"]
    m = instantiate(compose(["task=rl/ppo", *overrides]).task.module)
    m.collector.obs_rms.update(torch.randn(256, 3, dtype=torch.float64) * torch.tensor([0.5, 3.0, 0.2]) + 1.0)
    with torch.no_grad():
        m.agent.actor[-1].weight.mul_(1000)  # actions spread over the bounds, some clipped
    ckpt = save_checkpoint(m, tmp_path / "run", "rl/ppo", overrides)
    main(["export", f"ckpt_path={ckpt}", "export.samples=64"])
    sess = ort.InferenceSession(str(tmp_path / "run" / "export" / "model.onnx"))
    obs = np.random.default_rng(1).normal(size=(32, 3)).astype(np.float32) * 4
    action, mean = sess.run(["action", "mean"], {"obs": obs})
    want = m.collector.policy(m.agent)(obs)  # the module's deterministic policy on raw observations
    np.testing.assert_allclose(action, want, atol=1e-5)
    assert np.abs(action).max() == pytest.approx(2.0) and np.abs(mean).max() > 2.0  # clipped to Pendulum's bounds
    raw = m.agent.policy_out(torch.as_tensor(obs)).detach().numpy()  # without the statistics: not what it plays
    assert not np.allclose(mean, raw, atol=1e-3)


def test_finetune_across_robots_with_the_same_observations(tmp_path: Path) -> None:
    src = preset("rl_halfcheetah")  # 17 observations, 6 actions
    src.collector.obs_rms.update(torch.randn(64, 17, dtype=torch.float64) + 3.0)
    ckpt = {"state_dict": src.state_dict(), "hyper_parameters": dict(src.hparams), "zoo": {"task": "rl/ppo"}}
    src.on_save_checkpoint(ckpt)
    torch.save(ckpt, tmp_path / "cheetah.ckpt")
    walker = preset("rl_walker2d", f"task.module.pretrained={tmp_path / 'cheetah.ckpt'}",
                     "task.module.pi_hidden_sizes=[256,256]", "task.module.vf_hidden_sizes=[256,256]")
    assert all(torch.equal(v, walker.agent.state_dict()[k]) for k, v in src.agent.state_dict().items())
    assert torch.equal(walker.collector.obs_rms.mean, src.collector.obs_rms.mean)
    assert float(walker.collector.reward_scaler.rms.count) < 1  # another robot's return scale is not carried over
    with pytest.raises(ZooError, match=r"trained on HalfCheetah-v5 \(obs \(17,\).*Hopper-v5 \(obs \(11,\)") as e:
        preset("rl_hopper", f"task.module.pretrained={tmp_path / 'cheetah.ckpt'}")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("overrides,message", [
    (["experiment=rl_cartpole", "task.env.id=Hopper-v5"],
     "this recipe is for Discrete actions but Hopper-v5 has continuous (Box) actions"),
    (["experiment=rl_hopper", "task.env.id=CartPole-v1"],
     "this recipe is for continuous (Box) actions but CartPole-v1 has Discrete actions"),
    (["experiment=rl_hopper", "task.module.activation=gelu"], "unknown task.module.activation 'gelu'"),
    (["experiment=rl_hopper", "task.module.pi_hidden_sizes=[]"], "pi_hidden_sizes must be a non-empty list"),
])
def test_recipe_and_env_mismatches_are_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ZooError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        instantiate(compose([*overrides, *TINY]).task.module)
    assert "\n" not in str(e.value)


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    import os

    base = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}  # this process may have chosen one
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**base, **env})


def test_missing_simulator_is_the_install_line() -> None:
    p = python("import sys; sys.modules['mujoco'] = None\n"  # as if the simulator were not installed
               "from zoo.errors import ZooError\nfrom zoo.rl.envs import describe_env\n"
               "try:\n    describe_env('Hopper-v5')\nexcept ZooError as e:\n    print(e)")
    assert p.stdout.strip() == "Hopper-v5 needs the MuJoCo simulator, which is not installed: " \
                               "pip install 'mujoco>=3.1,<4'", p.stderr[-2000:]


RECORD = ("import logging; logging.basicConfig(level=logging.WARNING, format='%(message)s')\n"
          "import numpy as np\nfrom zoo.rl.evaluate import record_episode\n"
          "frames, ret = record_episode(lambda o: np.zeros((len(o), 3)), 'Hopper-v5', 0, max_frames=5)\n"
          "print('FRAMES', None if frames is None else (frames.shape, int(np.ptp(frames))))")


def test_video_without_an_off_screen_gl_is_one_line_with_the_fix() -> None:
    p = python(RECORD, MUJOCO_GL="glfw", DISPLAY="")  # GLFW needs a display: no frames here
    assert "FRAMES None" in p.stdout, p.stderr[-2000:]
    hint = [line for line in p.stderr.splitlines() if line.startswith("no video")]
    assert hint == ["no video: MuJoCo cannot render off-screen here (MUJOCO_GL=glfw); set MUJOCO_GL=egl (EGL: "
                    "the Debian package libegl1, or a GPU driver's) or MUJOCO_GL=osmesa (the Debian package "
                    "libosmesa6)"]


def test_video_renders_off_screen_where_egl_loads() -> None:
    import ctypes.util

    if not ctypes.util.find_library("EGL"):
        pytest.skip("no libEGL on this machine (the Debian package libegl1)")
    p = python(RECORD, DISPLAY="")  # MUJOCO_GL unset: the zoo picks egl on a headless machine
    if "no video" in p.stderr:
        pytest.skip(f"EGL present but cannot render here: {p.stderr.strip().splitlines()[-1]}")
    assert "FRAMES ((5, 240, 240, 3)" in p.stdout, p.stderr[-2000:]


def test_mujoco_warnings_go_to_the_log_not_a_file_in_the_working_folder(tmp_path: Path, monkeypatch) -> None:
    from zoo.rl.envs import make_single

    monkeypatch.chdir(tmp_path)
    make_single("HalfCheetah-v5").close()  # gymnasium's model uses an attribute MuJoCo 3.x warns about
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
