"""zoo.core.aliases: what a checkpoint, run record or export written under the domains' old top-level names becomes
under `zoo.<domain>`, for each domain's task config as it composes today."""

from __future__ import annotations

import pytest
import torch

from zoo.base import plain
from zoo.core.aliases import (
    DOMAINS,
    export_package,
    new_name,
    rewrite_checkpoint,
    rewrite_config,
    rewrite_export,
    rewrite_overrides,
    rewrite_run_record,
)
from zoo.testing import compose

TASKS = {"vision": "vision/resnet", "nlp": "nlp/bert", "rl": "rl/ppo", "speech": "speech/ctc", "gan": "gan/dcgan"}


def _targets(node: object, at: str = "") -> dict[str, str]:
    if isinstance(node, dict):
        found = {at: node["_target_"]} if isinstance(node.get("_target_"), str) else {}
        for k, v in node.items():
            found |= _targets(v, f"{at}.{k}")
        return found
    return {}


@pytest.mark.parametrize(("old", "new"), [
    ("vision.module.ImageClassifier", "zoo.vision.module.ImageClassifier"),
    ("nlp.data.TextDataModule", "zoo.nlp.data.TextDataModule"),
    ("rl", "zoo.rl"), ("speech.deploy", "zoo.speech.deploy"), ("gan.predict:predict", "zoo.gan.predict:predict"),
    ("zoo.vision.module.ImageClassifier", "zoo.vision.module.ImageClassifier"),  # already renamed: as it is
    ("zoo.kit.optim.warmup_schedule", "zoo.kit.optim.warmup_schedule"), ("torch.optim.AdamW", "torch.optim.AdamW"),
    ("visionary.module.M", "visionary.module.M"), ("rlx", "rlx"), ("my.rl.module", "my.rl.module"), ("", "")])
def test_new_name(old, new):
    assert new_name(old) == new


def _before_the_move(node):
    """A config as runs recorded it while the domains were top-level packages: `zoo.vision.x` named `vision.x`."""
    if isinstance(node, dict):
        return {k: _before_the_move(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_before_the_move(v) for v in node]
    if isinstance(node, str) and node.startswith("zoo.") and node.split(".")[1] in DOMAINS:
        return node[len("zoo."):]
    return node


@pytest.mark.parametrize("domain", DOMAINS)
def test_a_runs_config_names_the_domain_under_the_zoo(domain):
    """Every `_target_` of the domain's task moves under zoo.<domain>, the others (zoo's own, torch's) stay; the
    config given is not changed."""
    cfg = _before_the_move(plain(compose([f"task={TASKS[domain]}"])))
    before = _targets(cfg)
    assert any(t.startswith(f"{domain}.") for t in before.values())  # what a run recorded before the move
    cfg["task"]["package"], cfg["task"]["hooks"] = domain, {"deploy": f"{domain}.deploy", "predict": "mine:predict"}
    out = rewrite_config(cfg)
    after = _targets(out)
    assert after.keys() == before.keys()
    for key, target in before.items():
        assert after[key] == (f"zoo.{target}" if target.startswith(f"{domain}.") else target), key
    assert out["task"]["package"] == f"zoo.{domain}"
    assert out["task"]["hooks"] == {"deploy": f"zoo.{domain}.deploy", "predict": "mine:predict"}
    assert _targets(cfg) == before and cfg["task"]["package"] == domain  # a copy: the caller's record as read


@pytest.mark.parametrize("domain", DOMAINS)
def test_a_checkpoint_and_a_run_record_of_the_domain(domain):
    weights = torch.ones(2)
    config = {"task": {"name": TASKS[domain], "module": {"_target_": f"{domain}.module.M", "lr": 1e-3,
                                                         "optimizer": {"_target_": "torch.optim.AdamW"}}}}
    overrides = [f"task={TASKS[domain]}", f"task.module._target_='{domain}.module.M'", f"+task.package={domain}",
                 f"+task.hooks.deploy={domain}.deploy", "task.module.lr=1e-3", f"task.data.root={domain}.data"]
    ckpt = {"state_dict": {"model.w": weights}, "hyper_parameters": {"net": {"_target_": f"{domain}.models.Net"}},
            "zoo": {"config": config, "overrides": overrides, "task": TASKS[domain]}}
    out = rewrite_checkpoint(ckpt)
    assert out["state_dict"]["model.w"] is weights  # tensors are never copied
    assert out["zoo"]["config"]["task"]["module"]["_target_"] == f"zoo.{domain}.module.M"
    assert out["zoo"]["config"]["task"]["module"]["optimizer"]["_target_"] == "torch.optim.AdamW"
    assert out["hyper_parameters"]["net"]["_target_"] == f"zoo.{domain}.models.Net"
    renamed = [f"task={TASKS[domain]}", f"task.module._target_='zoo.{domain}.module.M'", f"+task.package=zoo.{domain}",
               f"+task.hooks.deploy=zoo.{domain}.deploy", "task.module.lr=1e-3", f"task.data.root={domain}.data"]
    assert out["zoo"]["overrides"] == renamed  # a value that only looks like a module (a folder) is left alone
    assert ckpt["zoo"]["overrides"] == overrides and ckpt["zoo"]["config"] == config
    record = rewrite_run_record({"config": config, "overrides": overrides, "resume": None, "presets": 3})
    assert record["overrides"] == renamed and record["presets"] == 3
    assert record["config"]["task"]["module"]["_target_"] == f"zoo.{domain}.module.M"


@pytest.mark.parametrize("domain", DOMAINS)
def test_an_export_of_the_domain(domain):
    meta = {"task": TASKS[domain], "package": domain, "deploy_hooks": f"{domain}.deploy", "format": "onnx"}
    assert rewrite_export(meta) == {**meta, "package": f"zoo.{domain}", "deploy_hooks": f"zoo.{domain}.deploy"}
    assert export_package(rewrite_export(meta)) == f"zoo.{domain}"
    older = {"task": TASKS[domain], "format": "onnx"}  # before model.json named its package
    assert rewrite_export(older) == older and export_package(older) == f"zoo.{domain}"


def test_a_task_of_the_users_own_is_left_alone():
    cfg = {"task": {"package": "toy", "hooks": {"deploy": "toy.hooks"}, "module": {"_target_": "toy.module.M"}}}
    assert rewrite_config(cfg) == cfg
    assert rewrite_overrides(["+task.package=toy", "task.module._target_=toy.module.M"]) == \
        ["+task.package=toy", "task.module._target_=toy.module.M"]
    assert export_package({"task": "toy/task", "package": "toy"}) == "toy"
