"""Artifacts are untrusted data (zoo/core/trust.py): a path, module name or `_target_` read from a checkpoint, an
export folder or a run folder passes one check before the zoo acts on it; one test per reader (export, serve, test,
predict, resume, reproduce), and the owner's own rules."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

from zoo.core import owned
from zoo.errors import ZooError

EVIL = ["+callbacks.pwn._target_=builtins.open", "+callbacks.pwn.file=victim.txt", "+callbacks.pwn.mode=w"]


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    owned.forget()
    monkeypatch.setattr(sys, "argv", ["zoo"])  # no opt-in on this command line unless a test passes one
    yield
    owned.forget()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------- the owner's rules
@pytest.mark.parametrize("override", [*EVIL[:1], "+callbacks.pwn={_target_:os.system,_args_:[id]}",
                                      "+callbacks.pwn._target_=zoo.base.instantiate", "task.hooks.deploy=this",
                                      "task.package=os", "+callbacks.pwn._args_=[{_target_:subprocess.call}]",
                                      "+task.x='${oc.decode:\"{_target_: os.system}\"}'",
                                      "+callbacks.w._target_=zoo.speech.decoding.write_lexicon",
                                      "+callbacks.w._target_=zoo.rl.evaluate.save_video"])
def test_an_override_naming_code_outside_the_allow_list_is_refused(override):
    from zoo.core.trust import check_overrides

    with pytest.raises(ZooError, match=r"allow-list, named by the checkpoint: .*trust_artifact=true"):
        check_overrides([override], "the checkpoint")
    check_overrides([override], "the checkpoint", args=["trust_artifact=true"])  # the user's own word


@pytest.mark.parametrize("override", ["task=vision/resnet", "task.module.optimizer._target_=torch.optim.SGD",
                                      "+callbacks.early._target_=lightning.pytorch.callbacks.EarlyStopping",
                                      "task.module.scheduler._target_=torch.optim.lr_scheduler.StepLR",
                                      "task.hooks.deploy=zoo.vision.deploy", "trainer.max_epochs=3", "seed=7",
                                      "+task.data.mean=[0.5,0.5]",
                                      "+callbacks.watch._target_=zoo.core.rank_watch.DeadRankWatch"])
def test_what_the_zoo_writes_itself_passes(override):
    from zoo.core.trust import untrusted_overrides

    assert untrusted_overrides([override]) == []


def test_the_users_config_tree_is_trusted(tmp_path, monkeypatch):
    """A task outside the zoo (ZOO_CONFIG_PATH, tests/toy_task) names its own targets and hook modules: the user's
    choice, trusted without the switch."""
    from zoo.core.trust import check_module, untrusted_overrides
    from zoo.testing import ROOT

    monkeypatch.setenv("ZOO_CONFIG_PATH", str(ROOT / "tests" / "toy_task" / "configs"))
    assert untrusted_overrides(["task.module._target_=toy.module.TinyClassifier", "task.hooks.deploy=toy.hooks"]) \
        == []
    check_module("toy.hooks", "model.json")
    monkeypatch.delenv("ZOO_CONFIG_PATH")
    assert untrusted_overrides(["task.hooks.deploy=toy.hooks"]) == ["task.hooks.deploy=toy.hooks"]


@pytest.mark.parametrize("name", ["../victim.txt", "/etc/passwd", "sub/../../victim.txt", "link", "", None, 3])
def test_a_path_read_from_an_artifact_stays_inside_its_folder(tmp_path, name):
    from zoo.core.trust import inside

    folder = tmp_path / "export"
    folder.mkdir()
    (tmp_path / "victim.txt").write_text("precious\n")
    (folder / "link").symlink_to(tmp_path / "victim.txt")
    with pytest.raises(ZooError, match=r"model.json's \"file\""):
        inside(folder, name, "model.json's \"file\"", "re-export it")
    assert inside(folder, "model.onnx", "file", "") == folder.resolve() / "model.onnx"


# ---------------------------------------------------------------------------------------------- export
def _earlier_export(out: Path, meta: dict) -> None:
    out.mkdir(parents=True)
    (out / "model.onnx").write_bytes(b"old graph")
    (out / "model.json").write_text(json.dumps({"task": "toy/blobs", "format": "onnx", **meta}))


def _staged(parent: Path) -> Path:
    tmp = owned.temp_dir(parent, prefix=".export.")
    (tmp / "model.onnx").write_bytes(b"new graph")
    (tmp / "model.json").write_text("{}")
    return tmp


@pytest.mark.parametrize("named", ["../victim.txt", "absolute"])
def test_export_never_removes_a_file_an_earlier_model_json_names_outside_its_folder(tmp_path, named):
    """An export from before model.json listed its files counts its "file" as its own: "../victim.txt" (or an
    absolute path) was deleted when the new export replaced it."""
    from zoo.verbs.export_out import publish

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    before = sha(victim)
    out = tmp_path / "export"
    _earlier_export(out, {"file": str(victim) if named == "absolute" else named})
    with pytest.raises(ZooError, match="a path outside"):
        publish(_staged(tmp_path), out)
    assert victim.is_file() and sha(victim) == before


def test_export_never_removes_a_file_a_listed_name_reaches_through_a_link(tmp_path):
    from zoo.verbs.export_out import publish

    (tmp_path / "elsewhere").mkdir()
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "export"
    _earlier_export(out, {"file": "model.onnx", "files": ["model.json", "model.onnx", "sub/victim.txt"]})
    (out / "sub").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ZooError, match="a path outside"):
        publish(_staged(tmp_path), out)
    assert victim.read_text() == "precious\n"


def test_a_later_export_keeps_the_users_empty_folders(tmp_path):
    """Only what the earlier export listed goes: an empty folder of the user's inside it was removed too."""
    from zoo.verbs.export_out import publish

    out = tmp_path / "export"
    _earlier_export(out, {"file": "model.onnx", "files": ["model.json", "model.onnx"]})
    (out / "mine" / "deeper").mkdir(parents=True)
    with pytest.raises(ZooError, match="mine"):
        publish(_staged(tmp_path), out)
    assert (out / "mine" / "deeper").is_dir() and (out / "model.onnx").read_bytes() == b"old graph"


# ---------------------------------------------------------------------------------------------- serve
def _export(folder: Path, **meta) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(b"\x08\x07not a whole graph")
    base = {"task": "vision/resnet", "package": "vision", "deploy_hooks": "zoo.vision.deploy", "format": "onnx",
            "file": "model.onnx", "inputs": [{"name": "image"}], "outputs": [{"name": "logits"}]}
    (folder / "model.json").write_text(json.dumps({**base, **meta}))
    return folder


@pytest.mark.parametrize("field", ["deploy_hooks", "package"])
def test_serve_never_imports_a_module_model_json_names(tmp_path, monkeypatch, field):
    """`"deploy_hooks": "this"` printed the Zen of Python; a folder shipping evil_mod.py ran it."""
    from zoo.verbs.serve import from_export

    marker = tmp_path / "ran.txt"
    (tmp_path / "evil_mod.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nHandler = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    folder = _export(tmp_path / "export", **{field: "evil_mod"})
    with pytest.raises(ZooError, match=r"allow-list, named by .*model.json: evil_mod.*trust_artifact=true"):
        from_export(folder, None, 1)
    assert not marker.exists()


@pytest.mark.parametrize("case", ["outside", "link", "broken json", "not a mapping", "no inputs", "truncated"])
def test_serve_of_a_broken_or_hostile_export_is_one_line(tmp_path, case):
    pytest.importorskip("onnxruntime")
    from zoo.verbs.serve import from_export

    folder = _export(tmp_path / "export")
    if case == "outside":
        _export(folder, file="/etc/passwd")
    elif case == "link":
        (folder / "model.onnx").unlink()
        (folder / "model.onnx").symlink_to("/etc/passwd")
    elif case == "broken json":
        (folder / "model.json").write_text('{"task": "vision/resnet", "form')
    elif case == "not a mapping":
        (folder / "model.json").write_text("[1, 2]")
    elif case == "no inputs":
        _export(folder, inputs="x")
    with pytest.raises(ZooError, match="model.json|model.onnx|/etc/passwd"):
        from_export(folder, None, 1)


# ---------------------------------------------------------------------------------------------- test, predict
def _evil_checkpoint(path: Path, task: str = "vision/resnet", overrides: list[str] | None = None,
                     config: dict | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "hyper_parameters": {},
                "zoo": {"task": task, "overrides": [f"task={task}", *(overrides or EVIL)], "presets": 2,
                        "config": config}}, path)
    return path


@pytest.mark.parametrize("verb", ["test", "predict"])
def test_test_and_predict_refuse_a_checkpoints_recorded_code(tmp_path, monkeypatch, verb):
    """A data-only checkpoint whose recorded overrides add `builtins.open` as a callback truncated victim.txt."""
    from zoo.verbs.evaluate import _evaluate

    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    ckpt = _evil_checkpoint(tmp_path / "evil.ckpt")
    with pytest.raises(ZooError, match=r"\+callbacks.pwn._target_=builtins.open.*trust_artifact=true"):
        _evaluate(verb, [f"ckpt_path={ckpt}", *(["input=x"] if verb == "predict" else [])])
    assert victim.read_text() == "precious\n"


def test_an_artifacts_own_opt_in_is_never_carried():
    from zoo.core.presets import recorded_overrides

    assert recorded_overrides({"overrides": ["seed=3", "trust_artifact=true"]}) == ["seed=3"]
    with pytest.raises(ZooError, match="allow-list"):
        recorded_overrides({"overrides": ["trust_artifact=true", *EVIL]})


# ---------------------------------------------------------------------------------------------- resume
def test_resume_refuses_a_checkpoints_recorded_code(tmp_path):
    from zoo.core.resume import resolve_resume

    run = tmp_path / "run"
    _evil_checkpoint(run / "checkpoints" / "last.ckpt")
    with pytest.raises(ZooError, match=r"builtins.open.*trust_artifact=true"):
        resolve_resume([f"ckpt_path={run}"])
    assert resolve_resume([f"ckpt_path={run}", "trust_artifact=true"])  # the user's own word


def test_resume_refuses_code_in_the_recorded_config_it_rebuilds_from(tmp_path, capsys):
    """A run whose presets no longer compose is rebuilt from its recorded config: that config's `_target_`s are
    artifact data too."""
    from zoo.base import plain
    from zoo.core.config import compose, register_resolvers
    from zoo.core.resume import resolve_resume

    register_resolvers()
    run = tmp_path / "run"
    recorded = plain(compose(["task=vision/resnet", f"run_dir='{run}'"]))
    recorded["callbacks"]["model_checkpoint"]["_target_"] = "builtins.open"
    _evil_checkpoint(run / "checkpoints" / "last.ckpt", overrides=["experiment=gone_since"], config=recorded)
    with pytest.raises(ZooError, match=r"callbacks.model_checkpoint._target_='builtins.open'"):
        resolve_resume([f"ckpt_path={run}"])


# ---------------------------------------------------------------------------------------------- reproduce
def _run_folder(run: Path, config: str | None = None, env: str | None = None) -> Path:
    run.mkdir(parents=True)
    if config is not None:
        (run / "config.yaml").write_text(config)
    if env is not None:
        (run / "env.json").write_text(env)
    return run


def test_reproduce_refuses_code_in_a_run_folders_config(tmp_path):
    from zoo.base import plain
    from zoo.core.config import compose, register_resolvers
    from zoo.verbs.reproduce import plan, read_record

    register_resolvers()
    config = plain(compose(["task=vision/resnet", "run_dir=/old/run"]))
    config["callbacks"]["model_checkpoint"]["_target_"] = "builtins.open"
    import yaml

    run = _run_folder(tmp_path / "run", yaml.safe_dump({"config": config, "overrides": ["task=vision/resnet"]}))
    with pytest.raises(ZooError, match=r"config.yaml.*builtins.open.*trust_artifact=true"):
        _, record = read_record(run)
        plan(record, [], run)


def test_reproduce_refuses_a_checkpoints_recorded_code(tmp_path):
    from zoo.verbs.reproduce import read_record

    run = tmp_path / "run"
    _evil_checkpoint(run / "checkpoints" / "last.ckpt")
    with pytest.raises(ZooError, match=r"builtins.open.*trust_artifact=true"):
        read_record(run)


@pytest.mark.parametrize("config, env", [("config: [unclosed", None), ("config: 3\n", None), ("- a list\n", None),
                                         ("config: {task: 3}\n", None), (None, '{"python": '),
                                         ("config: {task: {name: vision/resnet}}\n", "[1]")])
def test_reproduce_of_a_run_folder_with_a_broken_record_is_one_line(tmp_path, config, env):
    from zoo.verbs.reproduce import read_record

    run = _run_folder(tmp_path / "run", config, env)
    if env is not None and config is None:
        _evil_checkpoint(run / "checkpoints" / "last.ckpt", overrides=["seed=1"])
    with pytest.raises(ZooError, match="config.yaml|env.json"):
        read_record(run)


def test_a_stop_while_reproduce_waits_ends_as_a_stop_whatever_the_re_run_returned(monkeypatch):
    """SIGTERM just after the re-run finished: the re-run, between its end and its exit, died of the forwarded
    signal (-15) and reproduce exited 241 with 'stopped with exit code -15'; a stop is 143 and its one line."""
    from zoo.core.stops import Stopped
    from zoo.verbs import reproduce

    class Child:
        calls = 0

        def wait(self, timeout=None):  # noqa: ANN001, ANN202
            Child.calls += 1
            if Child.calls == 1:
                raise Stopped
            return -15

        def send_signal(self, sig):  # noqa: ANN001, ANN202
            pass

    monkeypatch.setattr(reproduce.subprocess, "Popen", lambda command: Child())
    with pytest.raises(Stopped):
        reproduce.run_train(["zoo", "train"])


@pytest.mark.parametrize("zoo", [[], "task", {"task": 5}, {"task": ["toy/blobs"]}])
def test_a_checkpoint_whose_zoo_record_is_misshapen_is_one_line(zoo):
    """`zoo test` of a checkpoint whose record was a list, or whose task was a number: AttributeError / TypeError."""
    from zoo.core.checkpoint import checkpoint_task

    with pytest.raises(ZooError, match="zoo metadata|task name"):
        checkpoint_task({"zoo": zoo}, "x.ckpt")


@pytest.mark.parametrize("record", [[], "task=vision/resnet", {"overrides": "seed=1"}, {"overrides": 3}])
def test_a_record_whose_overrides_are_misshapen_is_one_line(record):
    """A continued sweep reads its checkpoint's record with `.get`: a list there was an AttributeError."""
    from zoo.core.presets import recorded_overrides

    with pytest.raises(ZooError, match="not a list"):
        recorded_overrides(record)


def test_an_override_the_user_types_again_is_the_users():
    """A sweep continued with the command that started it (its own test callback) names the recorded override again
    on the command line: the user's choice, as the config tree's names are."""
    from zoo.core.trust import check_overrides

    typed = "+callbacks.sig._target_=signal_after.SignalAfter"
    check_overrides([f"+{typed}"], "the checkpoint", args=[typed, "seed=1"])
    with pytest.raises(ZooError, match="signal_after"):
        check_overrides([f"+{typed}"], "the checkpoint", args=["+callbacks.sig._target_=other.Thing"])


def test_reproduce_rebuilds_a_run_whose_overrides_no_longer_compose(tmp_path, capsys):
    """A run recorded under an older preset generation ("unknown config key", a key the user never typed) could not
    be reproduced; it is rebuilt from its record as a resume and `zoo test` rebuild it."""
    from zoo.base import plain
    from zoo.core.config import compose, register_resolvers
    from zoo.verbs.reproduce import plan

    register_resolvers()
    config = plain(compose(["task=vision/resnet", "task.module.optimizer.lr=0.5", "run_dir=/old/run"]))
    record = {"task": "vision/resnet", "config": config, "env": None,
              "overrides": ["task=vision/resnet", "task.data.gone_since=1", "task.module.optimizer.lr=0.5"]}
    overrides, notes, _ = plan(record, [], tmp_path / "run")
    assert "task.data.gone_since=1" not in overrides and "task.module.optimizer.lr=0.5" in overrides
    assert "no longer compose (unknown config key" in capsys.readouterr().err


def test_a_recorded_folder_is_never_carried_into_the_next_run():
    """A checkpoint's overrides naming where its run wrote (checkpoint and log folders) are not re-applied: a resume
    or an evaluation writes into its own run folder, wherever the checkpoint says."""
    from zoo.core.overrides import carried_overrides

    recorded = ["task.module.lr=0.1", "callbacks.model_checkpoint.dirpath=/elsewhere",
                "+logger.tensorboard.save_dir=/elsewhere/tb", "trainer.default_root_dir=/x", "hydra.run.dir=/y"]
    assert carried_overrides(recorded) == ["task.module.lr=0.1"]
