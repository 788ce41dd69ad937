"""`python -m zoo reproduce <run>`: a finished run trained again from its record, compared metric by metric."""

from __future__ import annotations

import json

import pytest

from zoo.testing import TINY, one_line_error, run_dirs

VISION = [*TINY, "task.data.image_size=16", "task.module.arch=resnet10t"]


def test_values_todays_defaults_would_change_are_pinned():
    from zoo.core.recorded import hydra_literal, pinned_values

    recorded = {"seed": 42, "task.module.optimizer.lr": 0.003, "task.module.hidden_sizes": [16, 16],
                "task.module.arch": "resnet10t", "task.old_option": 1, "run_dir": "/old", "trainer.max_epochs": 3}
    now = {"seed": 42, "task.module.optimizer.lr": 0.001, "task.module.hidden_sizes": [64, 64],
           "task.module.arch": "resnet18", "task.new_option": True, "run_dir": "/new", "trainer.max_epochs": 1}
    pins, notes = pinned_values(recorded, now, asked={"trainer.max_epochs"}, not_pinned=("run_dir",))
    assert pins == ["task.module.optimizer.lr=0.003", "task.module.hidden_sizes=[16,16]",
                    "task.module.arch='resnet10t'"]  # not run_dir, not what the user asked for on this command
    assert any("no longer exist" in n and "task.old_option" in n for n in notes)
    assert any("added since the run" in n and "task.new_option" in n for n in notes)
    assert hydra_literal({"a": None, "b": "it's"}) == "{a:null,b:'it\\'s'}"


def test_interpolated_overrides_are_recorded_as_the_values_they_gave(monkeypatch):
    from omegaconf import OmegaConf

    from zoo.core.recorded import frozen_overrides

    monkeypatch.setenv("ZOO_TEST_SEED", "7")
    listed = OmegaConf.create(["task=vision/resnet", "seed='${oc.decode:${oc.env:ZOO_TEST_SEED}}'",
                               "+task.tag=${oc.env:ZOO_TEST_SEED}", "trainer.max_epochs=3",
                               "hydra.run.dir=/runs/${oc.env:ZOO_TEST_SEED}"])
    cfg = OmegaConf.create({"seed": "${oc.decode:${oc.env:ZOO_TEST_SEED}}", "task": {"tag": "${oc.env:ZOO_TEST_SEED}"},
                            "trainer": {"max_epochs": 3}})
    assert list(listed)[1] == "seed='7'"  # Hydra's record: the number as text
    assert frozen_overrides(listed, cfg) == ["task=vision/resnet", "seed=7", "+task.tag='7'", "trainer.max_epochs=3",
                                             "hydra.run.dir=/runs/7"]  # a key outside the job's config: Hydra's text


def test_both_runs_metrics_side_by_side_and_the_verdict(capsys):
    from zoo.verbs.reproduce import compare

    original = {"val/acc": 0.90, "test/acc": 0.88, "val/loss": 0.4}
    assert compare(original, {"val/acc": 0.91, "test/acc": 0.87, "val/loss": 0.5}, {"tolerance": 0.03}, "val/acc") == 0
    out = capsys.readouterr().out
    assert "test/acc" in out and "+0.0100" in out and "(judged, tolerance 0.03)" in out
    assert "zoo: reproduced: val/acc, test/acc within reproduce.tolerance=0.03" in out
    assert compare(original, {"val/acc": 0.80, "test/acc": 0.88}, {"tolerance": 0.03}, "val/acc") == 1
    assert "zoo: not reproduced: val/acc 0.9000 -> 0.8000 differs by 0.1000 > reproduce.tolerance=0.03" in \
        capsys.readouterr().err


def test_reproduce_options_are_checked_against_the_run_before_the_re_run():
    from zoo.errors import ZooError
    from zoo.verbs.reproduce import judged_metrics

    original = {"val/acc": 0.9, "test/acc": 0.88, "val/loss": 0.4}
    assert judged_metrics(original, {}, "val/acc") == (["val/acc", "test/acc"], 0.03)
    assert judged_metrics(original, {"metrics": ["val/loss", "val/f1"]}, "val/acc", {"val/loss": 0.5})[0] == \
        ["val/loss"]
    with pytest.raises(ZooError, match=r"reproduce.tolerance=-0.1 is below 0"):
        judged_metrics(original, {"tolerance": -0.1}, "val/acc")
    with pytest.raises(ZooError, match=r"names none that the run has \(\['test/acc', 'val/acc', 'val/loss'\]\)"):
        judged_metrics(original, {"metrics": ["val/f1"]}, "val/acc")


@pytest.mark.slow
def test_a_short_vision_run_reproduces_within_tolerance(run_zoo, tmp_path):
    run_zoo("train", *VISION, "seed=3", check=True)
    (run,) = run_dirs(tmp_path, "vision/resnet")
    original = json.loads((run / "metrics.json").read_text())
    assert {"val/acc", "test/acc"} <= set(original)
    proc = run_zoo("reproduce", str(run), check=True)
    out = proc.stdout
    assert f"zoo: reproducing {run} (vision/resnet) into {run}-reproduce-" in out
    assert "package " not in out and "git commit:" not in out and "CPU:" not in out  # nothing changed here
    assert "(judged, tolerance 0.03)" in out and "zoo: reproduced: val/acc, test/acc" in out
    (again,) = [p for p in run.parent.iterdir() if p.name.startswith(f"{run.name}-reproduce-")]
    # on CPU, same seed and seeded workers: the repeat is exact
    assert json.loads((again / "metrics.json").read_text()) == original
    # a tolerance the repeat cannot miss, and one line with exit 1 for a run that differs
    (run / "metrics.json").write_text(json.dumps({**original, "test/acc": original["test/acc"] + 0.5}))
    proc = run_zoo("reproduce", f"{run}/checkpoints/last.ckpt")
    assert proc.returncode == 1 and "zoo: not reproduced: test/acc" in proc.stdout
    # wrong options are one line before any re-run (a tolerance below 0 trained again, then failed by 0.0000)
    line = one_line_error(run_zoo("reproduce", str(run), "reproduce.tolerance=-1"))
    assert "reproduce.tolerance=-1 is below 0" in line
    assert "names none that the run has" in one_line_error(run_zoo("reproduce", str(run), "reproduce.metrics=[val/f1]"))
    assert len([p for p in run.parent.iterdir() if "-reproduce-" in p.name]) == 2  # the two re-runs above only


def test_a_wrong_argument_is_one_line(run_zoo, tmp_path):
    proc = run_zoo("reproduce")
    assert proc.returncode == 2 and "zoo: error: `zoo reproduce` needs one run" in proc.stdout
    proc = run_zoo("reproduce", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "nowhere not found; give a run folder" in proc.stdout
