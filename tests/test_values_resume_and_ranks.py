"""The shared core against bad input, each case through the real entry point or the function that decides it:
values checked before work starts, resume across tasks, free-text input, a dead DDP rank, one writer of the run
config, failed runs cleaned up, stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from zoo.errors import ZooError
from zoo.testing import TINY, one_line_error, run_dirs, zoo_env

VISION = [*TINY, "task.data.image_size=16", "task.module.arch=resnet10t"]




# ----------------------------------------------------------------------------------------- values, up front
@pytest.mark.parametrize("override, expected", [
    ("trainer.max_epochs=abc", "trainer.max_epochs='abc' is not an integer"),
    ("trainer.max_epochs=2.5", "trainer.max_epochs=2.5 is not an integer"),
    ("trainer.enable_progress_bar=maybe", "is not true or false"),
    ("task.module.optimizer.lr=-1", "task.module.optimizer: Invalid learning rate: -1"),
    ("task.data.batch_size=0", "task.data.batch_size=0 must be at least 1"),
    ("task.module.optimizer.lr=interval(1e-4,1e-2)", "interval() is a continuous range"),
    ("trainer.max_epochs=3,x", "trainer.max_epochs='x' is not an integer"),  # every sweep value is checked
    ("seed=abc", "seed='abc' is not an integer (the default is 42)"),  # was a ValueError traceback at seeding
    ("checkpoint_every_n_steps=often", "checkpoint_every_n_steps='often' is not an integer"),
    # an environment variable is text: sklearn's split then refused seed '7' in a traceback
    ("seed=${oc.env:HOME}", "seed=${oc.env:HOME} gives '/"),
    ("seed=${oc.env:HOME}", "text needs decoding: seed='${oc.decode:${oc.env:HOME}}'"),
    ("trainer.max_epochs=${task.module.optimizer.lr}", "trainer.max_epochs=${task.module.optimizer.lr} gives 0.0"),
    ("ckpt_path=${oc.env:ZOO_TEST_UNSET_VARIABLE}", "does not resolve: KeyError raised while resolving interpolation: "
     "\"Environment variable 'ZOO_TEST_UNSET_VARIABLE' not found\""),
    ("task.data.root=${task.no_such_key}", "task.data.root=${task.no_such_key} does not resolve: Interpolation key"),
    # values only lightning.Trainer checked: a 32-line traceback, exit 1, with the new run's folder left behind
    ("trainer.precision=17", "trainer.precision=17 is not a precision Lightning knows; use one of auto, 64, 32, 16"),
    ("trainer.max_time=banana", "trainer.max_time=banana is not a duration; write days:hours:minutes:seconds"),
    ("trainer.devices=0", "trainer.devices=0 runs on no device; use a count >= 1"),
    ("trainer.devices=-1", "trainer.devices=-1 does not fit accelerator cpu"),
    ("trainer.strategy=dp", "trainer.strategy=dp is not a strategy Lightning knows; use auto, ddp"),
    ("trainer.precision=16-mixed,17", "trainer.precision=17 is not"),  # every value of a sweep
])
def test_wrong_values_fail_before_any_work(override, expected):
    from zoo.core.config import check_overrides, register_resolvers

    register_resolvers()
    with pytest.raises(ZooError, match=None) as err:
        check_overrides(["trainer=cpu", override])
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_right_values_pass():
    from zoo.core.config import check_overrides, register_resolvers

    register_resolvers()
    check_overrides(["trainer.max_epochs=3", "task.module.optimizer.lr=3e-4", "trainer.devices=2",
                     "task.module.optimizer.lr=1e-3,1e-4", "experiment=rl_cartpole", "task.module.ent_coef=0",
                     "seed='${oc.decode:${oc.env:SLURM_ARRAY_TASK_ID,1}}'", "trainer.max_epochs=${seed}"])
    # a task's integer option may take a name, from a variable too
    check_overrides(["trainer=cpu", "task=nlp/bert", "task.data.text_column=${oc.env:ZOO_TEST_COLUMN,sentence}"])


def test_a_wrong_value_is_one_line_on_the_console(run_zoo):
    t0 = time.monotonic()
    line = one_line_error(run_zoo("train", "-m", "task.module.optimizer.lr=interval(1e-4,1e-2)"))
    assert "list the values to try" in line
    line = one_line_error(run_zoo("train", "trainer.max_epochs=abc"))
    assert "e.g. trainer.max_epochs=" in line
    assert time.monotonic() - t0 < 120  # no training started (it took 12 s of work before the check existed)


def test_predict_rejects_a_sweep_with_the_quoting():
    from zoo.core.config import check_overrides, register_resolvers

    register_resolvers()
    with pytest.raises(ZooError) as err:
        check_overrides(["+predict.top_k=1,2"], sweeps=False)
    assert "reads as a sweep" in str(err.value) and "+predict.top_k='1,2'" in str(err.value)


# --------------------------------------------------------------------------------- resume across tasks
@pytest.mark.slow
def test_resume_resolves_the_task_and_never_touches_another_run(run_zoo, tmp_path):
    run_zoo("train", "task=vision/resnet", *VISION, check=True)  # a stored `task=` must not outvote the preset
    (run,) = run_dirs(tmp_path, "vision/resnet")
    written = [*(run / ".hydra").iterdir(), run / "config.yaml", run / "cli.log"]
    files = {p: p.read_bytes() for p in written}
    # the preset selects rl/ppo: the latest *rl* run is meant, and there is none
    line = one_line_error(run_zoo("train", "experiment=rl_cartpole", "ckpt_path=last"))
    assert "no earlier run of rl/ppo" in line
    # pointing at the vision run with another domain's preset: refused before Hydra writes into that run
    for form in (run, run / "checkpoints" / "last.ckpt"):
        line = one_line_error(run_zoo("train", "experiment=rl_cartpole", f"ckpt_path={form}"))
        assert "is from task vision/resnet, but these overrides select rl/ppo" in line
    assert {p: p.read_bytes() for p in written} == files
    # resuming twice with the same override keeps one copy of it
    for epochs in (2, 3):
        run_zoo("train", "ckpt_path=last", f"trainer.max_epochs={epochs}", check=True)
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    keys = [o.partition("=")[0].lstrip("+") for o in ckpt["zoo"]["overrides"]]
    assert keys.count("trainer.max_epochs") == 1 and "trainer.max_epochs=3" in ckpt["zoo"]["overrides"]
    assert ckpt["global_step"] == 3 * 3  # three epochs of trainer=debug's three batches, in all
    saved = yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())
    assert [o.partition("=")[0] for o in saved].count("trainer.max_epochs") == 1
    # asking a finished 3-epoch run for fewer epochs: Lightning's refusal as one line, not a traceback
    line = one_line_error(run_zoo("train", "ckpt_path=last", "trainer.max_epochs=1"))
    assert "but you have set Trainer(max_epochs=1)" in line
    # free text with commas reaches the task verbatim (it was a Hydra sweep traceback): here a missing file
    line = one_line_error(run_zoo("predict", f"ckpt_path={run}", "input=a gorgeous, witty, seductive movie."))
    assert "input not found: a gorgeous, witty, seductive movie." in line


def test_a_failed_new_run_leaves_no_folder(run_zoo, tmp_path):
    line = one_line_error(run_zoo("train", *VISION, "task.data.dataset=imagefolder",
                                   f"task.data.root={tmp_path / 'nowhere'}"))
    assert "image folder not found" in line
    assert run_dirs(tmp_path, "vision/resnet") == []
    assert not (tmp_path / "outputs" / "vision").exists()  # nor the task's empty folders above it


# ------------------------------------------------------------------------------------------- free text
def test_a_checkpoint_that_does_not_fit_its_task_is_one_line(run_zoo, tmp_path):
    ckpt = tmp_path / "edited.ckpt"
    torch.save({"state_dict": {}, "zoo": {"task": "vision/resnet", "overrides": []}}, ckpt)
    line = one_line_error(run_zoo("predict", f"ckpt_path={ckpt}", "input=x.png"))
    assert "does not load into ImageClassifier" in line


# ----------------------------------------------------------------------------------------- one writer
def test_only_global_rank_zero_writes_the_run_config(monkeypatch, tmp_path):
    from zoo.testing import compose
    from zoo.verbs import train as run

    cfg = compose(["trainer=debug"])
    cfg.run_dir = str(tmp_path / "run")
    monkeypatch.setattr(run, "_train", lambda cfg, overrides, resume: {})
    monkeypatch.delenv("ZOO_CHILD_CONFIG", raising=False)
    for rank, writes in (("1", False), ("0", True)):  # as torchrun sets RANK for each process
        monkeypatch.setenv("RANK", rank)
        run.train(cfg, [], None)
        assert (tmp_path / "run" / "config.yaml").is_file() is writes
        assert "ZOO_CHILD_CONFIG" not in os.environ


# ------------------------------------------------------------------------------------------ dead rank
def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_ddp_child_ends_with_its_rank_0(tmp_path):
    """A Lightning child calls die_with_parent first: SIGKILL its parent (rank 0) and the child is gone at once,
    not left waiting in a collective for the timeout with rank 0's stdout open."""
    child_code = ("from zoo.core.ddp import die_with_parent; import time; die_with_parent(); "
                  "print('ready', flush=True); time.sleep(120)")
    parent_code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', sys.argv[1]]); "
                   "print(c.pid, flush=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", parent_code, child_code], env=zoo_env(tmp_path),
                              stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "ready"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}").exists() and _state(child) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{child}").exists() or _state(child) == "Z"
    finally:
        if parent.poll() is None:
            parent.kill()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "gone"


@pytest.mark.slow
def test_a_dead_ddp_rank_is_named_in_one_line(tmp_path):
    cmd = [sys.executable, "-m", "zoo", "train", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
           "trainer.max_epochs=200", "trainer.enable_progress_bar=false", "task.data.image_size=16",
           "task.module.arch=resnet10t", "test_after_fit=false"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=zoo_env(tmp_path, OMP_NUM_THREADS="1"), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while not list((tmp_path / "outputs").rglob("checkpoints/*.ckpt")):  # both ranks are training
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
            time.sleep(1)
        (child,) = _children(proc.pid)
        os.kill(child, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)  # no hang: bounded by the watcher or gloo's error
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode not in (0, None)
    errors = [line for line in out.splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1, out[-3000:]
    assert f"DDP rank 1 (pid {child}" in errors[0] and "SIGKILL" in errors[0]
    assert "python -m zoo train ckpt_path=" in errors[0]
    assert "Traceback" not in out


# ------------------------------------------------------------------------ drills (issue: defects the drills found)
def _fake_run(root: Path, task: str = "vision/resnet", overrides: tuple[str, ...] = ("task=vision/resnet",)) -> Path:
    run = root / "outputs" / task / "2026-01-01_00-00-00_0001"
    (run / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": {}, "epoch": 0, "global_step": 3,
                "zoo": {"task": task, "overrides": list(overrides), "config": {}}}, run / "checkpoints" / "last.ckpt")
    return run


def test_a_preset_of_another_task_is_refused_whatever_form_ckpt_path_takes(tmp_path, monkeypatch):
    """The stored `task=vision/resnet`, merged before the preset, won over the preset's own task: rl's values then
    reached the vision module (Hydra's 'unexpected keyword argument total_timesteps') after the run's config.yaml,
    .hydra/ and cli.log had been rewritten."""
    from zoo.core.resume import resolve_resume

    monkeypatch.chdir(tmp_path)
    run = _fake_run(tmp_path)
    for form in (run, f"{run}/", run / "checkpoints" / "last.ckpt", run.relative_to(tmp_path)):
        with pytest.raises(ZooError) as e:
            resolve_resume(["experiment=rl_cartpole", f"ckpt_path={form}"])
        assert "is from task vision/resnet, but these overrides select rl/ppo" in str(e.value)
    # the run's own task, or a preset of it, resumes
    assert f"hydra.run.dir='{run}'" in resolve_resume(["experiment=vision_flowers12", f"ckpt_path={run}"])
    assert f"hydra.run.dir='{run}'" in resolve_resume([f"ckpt_path={run}"])




@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_accelerator_gpu_without_a_gpu_says_what_auto_picks():
    from zoo.core.config import check_overrides, register_resolvers

    register_resolvers()
    with pytest.raises(ZooError) as err:
        check_overrides(["trainer.accelerator=gpu"])
    assert "trainer.accelerator=gpu: no GPU is visible" in str(err.value)
    assert "trainer.accelerator=auto would pick cpu" in str(err.value)
    check_overrides(["trainer.max_time=00:01:00:00", "trainer.precision=bf16-mixed", "trainer.devices=2",
                     "trainer.strategy=ddp_spawn", "trainer.accelerator=cpu"])


def test_a_trainer_value_is_one_line_and_leaves_no_folder(run_zoo, tmp_path):
    line = one_line_error(run_zoo("train", *VISION, "trainer.precision=17"))
    assert "trainer.precision=17 is not a precision" in line
    assert not (tmp_path / "outputs").exists()


def test_no_checkpoint_means_start_again_not_continue(tmp_path, monkeypatch):
    """A DDP rank that died before the first checkpoint: the hint named a run folder that was then removed."""
    from zoo.core.rank_watch import resume_hint

    monkeypatch.setattr(sys, "argv", ["zoo/__main__.py", "train", "trainer=ddp", "task.module.arch=resnet10t"])
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    assert resume_hint(str(run)) == ("no checkpoint was saved; start again with "
                                     "`python -m zoo train trainer=ddp task.module.arch=resnet10t`")
    (run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    assert f"continue with `python -m zoo train ckpt_path={run}`" in resume_hint(str(run))


def test_an_output_location_that_cannot_be_written_is_one_line(run_zoo, tmp_path):
    """A path under a regular file fails for root too (chmod does not stop root)."""
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    for args, env, key in (([], {"ZOO_OUTPUT_ROOT": str(blocker / "out")}, "hydra.run.dir"),
                           ([f"hydra.run.dir={blocker / 'run1'}"], {}, "hydra.run.dir"),
                           (["-m", f"hydra.sweep.dir={blocker / 'run1'}"], {}, "hydra.sweep.dir"),
                           (["-m"], {"ZOO_OUTPUT_ROOT": str(blocker / "out")}, "hydra.sweep.dir")):
        line = one_line_error(run_zoo("train", *args, *VISION, env=env))
        assert f"{blocker} is a file, not a folder; set ZOO_OUTPUT_ROOT=<a writable folder> or {key}=" in line


def test_check_writable_probes_by_writing(tmp_path):
    from zoo.core.naming import check_writable

    check_writable(tmp_path / "new" / "deeper", "the run folder", "fix")
    assert not (tmp_path / "new").exists() and not list(tmp_path.iterdir())  # the probe leaves nothing


def test_a_malicious_pickle_is_refused_as_code_not_called_corrupt(tmp_path):
    from zoo.core.checkpoint import load_checkpoint

    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "x": _Evil()}, path)
    with pytest.raises(ZooError) as e:
        load_checkpoint(path)
    assert "was refused: loading it needs code execution (it references posix.system)" in str(e.value)
    assert "weights_only=True" in str(e.value) and "corrupt" not in str(e.value)


class _Evil:
    def __reduce__(self):  # what a malicious checkpoint does: call a function while unpickling
        return (os.system, ("echo pwned",))


def test_a_text_file_as_pretrained_weights_says_what_was_expected(tmp_path):
    from zoo.kit.pretrained import read_pretrained

    for name in ("notes.txt", "weights.pt"):
        (tmp_path / name).write_text("hello\nworld\n")
        with pytest.raises(ZooError) as e:
            read_pretrained(tmp_path / name, "rl/ppo")
        assert f"{name} is a text file; expected a weights file: a PyTorch state dict saved with torch.save" in \
            str(e.value) and "KeyError" not in str(e.value)


def test_every_choice_of_a_sweep_or_search_is_checked_up_front():
    """`task.module.finetune=choice(full,half)` failed only in the trials that drew `half`."""
    from zoo.core.config import check_overrides, compose, register_resolvers
    from zoo.verbs.search import search_space

    register_resolvers()
    small = ["task.module.arch=resnet10t", "task.module.pretrained=false"]
    for sweep in ("task.module.finetune=choice(full,half)", "task.module.finetune=full,half"):
        with pytest.raises(ZooError) as e:
            check_overrides([*small, sweep])
        assert "task.module.finetune=half (one of the values to try) is refused by the task: unknown finetune" \
            in str(e.value)
    cfg = compose(["run_dir=/tmp/x", *small])
    with pytest.raises(ZooError, match="finetune=half"):
        search_space({"task.module.finetune": "choice(full, gradual, half)"}, cfg)
    assert set(search_space({"task.module.finetune": "choice(full, gradual)"}, cfg)) == {"task.module.finetune"}


def test_int8_parity_is_measured_on_held_apart_examples():
    from zoo.kit.deploy import Examples
    from zoo.verbs.export import split_examples

    batches = [Examples((torch.arange(6),), torch.arange(6) * 10), Examples((torch.arange(6, 10),), None)]
    first, rest = split_examples(batches, 4)
    assert [b.inputs[0].tolist() for b in first] == [[0, 1, 2, 3]] and first[0].targets.tolist() == [0, 10, 20, 30]
    assert [b.inputs[0].tolist() for b in rest] == [[4, 5], [6, 7, 8, 9]] and rest[1].targets is None
    first, rest = split_examples(batches, 8)  # fewer than twice as many: half each
    assert sum(len(b.inputs[0]) for b in first) == 5 and sum(len(b.inputs[0]) for b in rest) == 5


# ------------------------------------------------------------------------------------------- stops, resumes
def _signal_at(step: int, name: str) -> tuple[list[str], dict]:
    from zoo.testing import ROOT

    return (["+callbacks.sig._target_=signal_after.SignalAfter", f"+callbacks.sig.step={step}",
             f"+callbacks.sig.name={name}"], {"PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"})


@pytest.mark.slow
def test_a_stop_is_not_an_error_and_a_resume_says_where_it_goes_on(run_zoo, tmp_path):
    """SIGTERM printed `zoo: error:`; Ctrl-C exited 1 in silence; every resume showed Lightning's 'Checkpoint
    directory ... exists and is not empty', and one after a mid-epoch stop its 'dataloader is not resumable'."""
    args, env = _signal_at(4, "SIGTERM")
    proc = run_zoo("train", *VISION, "trainer.max_epochs=3", *args, env=env)
    assert proc.returncode == 143, proc.stdout[-3000:]
    (run,) = run_dirs(tmp_path, "vision/resnet")
    assert (f"zoo: stopped by SIGTERM; last.ckpt holds the run up to its last save; continue with `python -m zoo "
            f"train ckpt_path={run}`") in proc.stdout
    assert "zoo: error" not in proc.stdout
    args, env = _signal_at(5, "SIGINT")
    proc = run_zoo("train", f"ckpt_path={run}", *args, env=env)  # a Ctrl-C of the resumed run, one step later
    assert proc.returncode == 130 and "zoo: stopped by Ctrl-C; last.ckpt holds the run" in proc.stdout, \
        proc.stdout[-3000:]
    assert f"zoo: resuming {run} from last.ckpt at epoch 1, step 4" in proc.stdout
    assert ("last.ckpt was saved 1 batch(es) into epoch 1: that epoch goes on with only its remaining batches"
            in proc.stdout)
    out = run_zoo("train", f"ckpt_path={run}", "trust_artifact=true", env=env, check=True).stdout  # its own callback
    assert f"zoo: resuming {run} from last.ckpt at epoch 1, step 5" in out
    assert "exists and is not empty" not in out and "not resumable" not in out


@pytest.mark.slow
def test_a_stopped_search_exits_as_a_stopped_run(run_zoo):
    """Ctrl-C of a search exited 1 (Lightning's sys.exit(1) inside the trial)."""
    for name, code in (("SIGINT", 130), ("SIGTERM", 143)):
        args, env = _signal_at(1, name)
        proc = run_zoo("train", "-m", "hparams_search=vision", "hydra.sweeper.n_trials=2", *VISION, *args, env=env)
        assert proc.returncode == code, proc.stdout[-3000:]
        assert f"zoo: stopped by {'Ctrl-C' if name == 'SIGINT' else 'SIGTERM'}; the search continues" in proc.stdout
        assert "marked FAIL. Run the same command to continue the study" in proc.stdout


def test_a_mid_epoch_resume_of_ppo_speaks_of_no_reshuffled_examples(tmp_path, capsys):
    """PPO's resume after a mid-epoch SIGTERM said its epoch went on "in a new shuffle (some of its examples are
    seen twice ...)": its batches are ticks that each collect a rollout, and the updates left run exactly."""
    sys.path.insert(0, str(Path(__file__).parent / "deploy"))
    from helpers import rl_ckpt

    from zoo.core.resume import announce_resume

    saved = {"epoch": 4, "global_step": 7680, "loops": {"fit_loop": {"epoch_loop.batch_progress": {
        "is_last_batch": False, "current": {"processed": 4}}}}}
    announce_resume("/run", Path("last.ckpt"), saved)
    assert "in a new shuffle" in capsys.readouterr().err  # a dataset's batches: as before
    ppo = torch.load(rl_ckpt(tmp_path, normalize=False), weights_only=False)
    assert ppo["batches_are_examples"] is False
    announce_resume("/run", Path("last.ckpt"), {**saved, "batches_are_examples": ppo["batches_are_examples"]})
    err = capsys.readouterr().err
    assert "saved 4 batch(es) into epoch 4: that epoch goes on with its remaining batches" in err
    assert "shuffle" not in err and "examples" not in err
