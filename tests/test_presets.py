"""Renamed presets: a run recorded under an old name replays its own recipe, never the one that holds the name now.

`rl_hopper` was rl-baselines3-zoo's Hopper entry (now `rl_hopper_rlzoo`); the name went to the recipe that meets the
aim (once `rl_mujoco_hopper`). A checkpoint written before that rename records `experiment=rl_hopper` and no presets
generation: test, predict, export, resume, a continued sweep and reproduce must all read it as `rl_hopper_rlzoo`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from zoo.errors import ZooError

OLD = ["task=rl/ppo", "experiment=rl_hopper", "seed=3"]  # what a run of the old rl_hopper recorded


def task_of(overrides: list[str]) -> dict:
    from zoo.base import plain
    from zoo.core.config import compose, register_resolvers
    from zoo.core.recorded import flatten

    register_resolvers()
    kept = [o for o in overrides if not o.startswith(("hydra.", "ckpt_path", "run_dir"))]
    return flatten(plain(compose([*kept, "run_dir=/run"]))["task"])


def recipe(preset: str) -> dict:
    return task_of([f"experiment={preset}", "seed=3"])


def old_checkpoint(path: Path, presets: int | None = None, overrides: list[str] = OLD) -> Path:
    """A tiny checkpoint whose metadata says what an old run recorded (`presets`: the generation, None: none)."""
    from zoo.base import plain
    from zoo.core.config import compose, register_resolvers

    register_resolvers()
    zoo = {"task": "rl/ppo", "overrides": list(overrides), "config": plain(compose(["experiment=rl_hopper_rlzoo",
                                                                                              "run_dir=/run"]))}
    if presets is not None:
        zoo["presets"] = presets
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "zoo": zoo}, path)
    return path


def test_the_rename_changed_what_the_name_means():
    """The premise of every test below: without the mapping, the old override would select another recipe."""
    assert recipe("rl_hopper") != recipe("rl_hopper_rlzoo")
    assert recipe("rl_hopper")["module.gamma"] == 0.995 and recipe("rl_hopper_rlzoo")["module.gamma"] == 0.999


def test_an_old_checkpoint_tests_predicts_and_exports_with_its_own_recipe(monkeypatch):
    from zoo.core import presets
    from zoo.core.recorded import checkpoint_overrides

    ckpt = {"zoo": {"task": "rl/ppo", "overrides": OLD, "config": None}}
    assert task_of(checkpoint_overrides(ckpt, "rl/ppo", [], [])) == recipe("rl_hopper_rlzoo")
    ckpt["zoo"]["overrides"] = ["task=rl/ppo", "experiment=rl_mujoco_hopper", "seed=3"]  # the recipe that took the name
    assert task_of(checkpoint_overrides(ckpt, "rl/ppo", [], [])) == recipe("rl_hopper")
    new = {"zoo": {"task": "rl/ppo", "overrides": OLD, "config": None, "presets": presets.GENERATION}}
    assert task_of(checkpoint_overrides(new, "rl/ppo", [], [])) == recipe("rl_hopper")  # written today: as it says
    monkeypatch.setattr(presets, "RENAMES", {})  # without the mapping the old run silently gets the new recipe
    old = {"zoo": {"task": "rl/ppo", "overrides": OLD, "config": None}}
    assert task_of(checkpoint_overrides(old, "rl/ppo", [], [])) == recipe("rl_hopper")


def test_an_old_run_resumes_with_its_own_recipe(tmp_path, monkeypatch):
    from zoo.core import presets
    from zoo.core.resume import resolve_resume

    run = tmp_path / "outputs" / "rl" / "ppo" / "2026-01-01_00-00-00_0001"
    old_checkpoint(run / "checkpoints" / "last.ckpt")
    resumed = resolve_resume([f"ckpt_path={run}", "trainer.max_time=00:01:00:00"])
    assert "experiment=rl_hopper_rlzoo" in resumed and "experiment=rl_hopper" not in resumed
    assert task_of(resumed) == recipe("rl_hopper_rlzoo")
    monkeypatch.setattr(presets, "RENAMES", {})
    assert task_of(resolve_resume([f"ckpt_path={run}"])) == recipe("rl_hopper")  # the mistake the mapping prevents


def test_a_continued_sweep_refuses_an_old_trial_under_the_new_name(tmp_path):
    """An old sweep's trial of `experiment=rl_hopper` is another recipe than today's command of the same words."""
    from omegaconf import OmegaConf

    from zoo.core.sweeps import continue_trial

    old_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    cfg = OmegaConf.create({"run_dir": str(tmp_path), "ckpt_path": None})
    with pytest.raises(ZooError, match="holds a trial with other values"):
        continue_trial(cfg, OLD)
    continue_trial(cfg, ["task=rl/ppo", "experiment=rl_hopper_rlzoo", "seed=3"])
    assert cfg.ckpt_path == str(tmp_path / "checkpoints" / "last.ckpt")


def test_reproduce_reads_an_old_record_in_todays_names(tmp_path):
    from zoo.core.presets import GENERATION
    from zoo.verbs.reproduce import read_record

    run = tmp_path / "run"
    old_checkpoint(run / "checkpoints" / "last.ckpt")
    assert read_record(run)[1]["overrides"] == ["task=rl/ppo", "experiment=rl_hopper_rlzoo", "seed=3"]
    old_checkpoint(run / "checkpoints" / "last.ckpt", presets=GENERATION)
    assert read_record(run)[1]["overrides"] == OLD


@pytest.mark.parametrize("recorded, presets, today", [
    ("rl_hopper", None, "rl_hopper_rlzoo"), ("rl_mujoco_hopper", None, "rl_hopper"), ("rl_hopper", 1, "rl_hopper"),
    ("speech_fsdd", None, "speech_fsdd_manifests"), ("speech_fsdd", 1, "speech_fsdd_manifests"),
    ("speech_fsdd_whisper", 1, "speech_fsdd"), ("speech_fsdd", 2, "speech_fsdd"), ("rl_cartpole", None, "rl_cartpole"),
])
def test_each_step_renames_once_and_only_what_came_before_it(recorded, presets, today):
    """Names map through every step after the record's generation, each step once (never rl_mujoco_hopper ->
    rl_hopper -> rl_hopper_rlzoo); `++experiment=` keeps its spelling, a name no step renames its quotes."""
    from zoo.core.presets import recorded_overrides

    record = {"overrides": [f"experiment={recorded}", f"++experiment='{recorded}'", "seed=1"], "presets": presets}
    kept = f"++experiment='{recorded}'" if today == recorded else f"++experiment={today}"
    assert recorded_overrides(record) == [f"experiment={today}", kept, "seed=1"]


def test_new_records_carry_the_generation(tmp_path):
    from omegaconf import OmegaConf

    from zoo.core.build import save_run_config
    from zoo.core.checkpoint import ZooMetadata
    from zoo.core.presets import GENERATION

    meta = ZooMetadata("rl/ppo", OLD, {})
    meta.env = {}
    checkpoint: dict = {}
    meta.on_save_checkpoint(None, None, checkpoint)
    assert checkpoint["zoo"]["presets"] == GENERATION
    cfg = OmegaConf.create({"run_dir": str(tmp_path)})
    assert OmegaConf.load(save_run_config(cfg, OLD)).presets == GENERATION


def test_every_rename_leads_to_a_preset_that_exists_and_old_names_say_where_they_went():
    from zoo.core.config import check_overrides, options
    from zoo.core.presets import RENAMES, current_name, renamed_preset

    today = set(options("experiment"))
    for step, table in RENAMES.items():
        for old in table:
            assert current_name(old, step - 1) in today, old
            if old not in today:
                assert renamed_preset("experiment", old)
    with pytest.raises(ZooError, match=r"^experiment=rl_mujoco_hopper is now experiment=rl_hopper "):
        check_overrides(["experiment=rl_mujoco_hopper"])
    with pytest.raises(ZooError, match="unknown experiment 'rl_hoper'"):
        check_overrides(["experiment=rl_hoper"])


@pytest.mark.slow
def test_an_old_hopper_checkpoint_resumes_tests_and_predicts_through_the_cli(run_zoo, tmp_path):
    """End to end: a real run of rl-zoo's Hopper recipe whose checkpoint is made to look as the old `rl_hopper`'s
    did. Read as today's rl_hopper (64x64 tanh networks, not 256x256 ReLU) its weights would not even load."""
    pytest.importorskip("mujoco")
    from zoo.testing import run_dirs

    tiny = ["task.module.num_steps=64", "task.module.num_minibatches=2", "task.module.update_epochs=1",
            "task.module.eval_every=4", "task.module.eval_episodes=1", "task.module.video=false", "logger=csv",
            "trainer.enable_progress_bar=false"]
    run_zoo("train", "experiment=rl_hopper_rlzoo", "task.module.total_timesteps=256", "test_after_fit=false", *tiny,
            check=True, timeout=600)
    run = run_dirs(tmp_path, "rl/ppo")[0]
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    zoo = ckpt["zoo"]
    zoo["overrides"] = [o.replace("experiment=rl_hopper_rlzoo", "experiment=rl_hopper") for o in zoo["overrides"]]
    assert "experiment=rl_hopper" in zoo["overrides"]
    del zoo["presets"]
    torch.save(ckpt, last)
    r = run_zoo("train", f"ckpt_path={run}", "task.module.total_timesteps=512", timeout=600)
    assert r.returncode == 0, r.stdout[-3000:]
    assert torch.load(last, weights_only=True)["rl"]["update"] == 8
    t = run_zoo("test", f"ckpt_path={last}", check=True)
    assert '"test/return"' in t.stdout
    p = run_zoo("predict", f"ckpt_path={last}", "predict.episodes=1", "predict.out=", check=True)
    assert '"return"' in p.stdout, p.stdout[-2000:]


def test_every_listed_description_is_one_finished_sentence(tmp_path, monkeypatch):
    """`zoo list` cut descriptions at the first line's end, some on ':'. Now: the first sentence, however many comment
    lines it spans, never past a command example; a comment with no full stop ends without its colon."""
    from zoo.core.config import describe, options

    for group in ("task", "experiment"):
        for name in options(group):
            text = describe(group, name)
            assert text.endswith(".") and len(text) < 200, (name, text)  # a sentence, not a paragraph
    (tmp_path / "experiment").mkdir()
    files = {"two_lines": "# A recipe (Radford et al. 2015) that\n# goes on. A second sentence.\nseed: 1\n",
             "colon": "# @package _global_\n# Fine-tune on your own data:\n#   python -m zoo train experiment=colon\n",
             "bare": "# No full stop (e.g. this one)\n\n# a later comment.\n"}
    for name, text in files.items():
        (tmp_path / "experiment" / f"{name}.yaml").write_text(text)
    monkeypatch.setenv("ZOO_CONFIG_PATH", str(tmp_path))
    assert describe("experiment", "two_lines") == "A recipe (Radford et al. 2015) that goes on."
    assert describe("experiment", "colon") == "Fine-tune on your own data."
    assert describe("experiment", "bare") == "No full stop (e.g. this one)."


def test_zoo_list_marks_each_familys_recommended_preset(capsys):
    from zoo.core.config import options
    from zoo.core.presets import RECOMMENDED
    from zoo.verbs.listing import main

    main([])
    lines = capsys.readouterr().out.splitlines()
    marked = {line.split()[1] for line in lines if line.startswith("* ")}
    assert marked == set(RECOMMENDED.values()) and marked <= set(options("experiment"))
    assert all(name.startswith(f"{family}_") for family, name in RECOMMENDED.items())
    assert any(line.strip().startswith("(gan: the default task is the recommended recipe") for line in lines)
