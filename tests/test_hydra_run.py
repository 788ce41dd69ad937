"""zoo.core.hydra_run: what the zoo relies on when it runs Hydra through its private `_run_hydra` (each check in a
fresh process, as `python -m zoo train` runs it: Hydra sets up logging and its global state once per process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.testing import ROOT

APP = '''
import json, logging, sys
from pathlib import Path
from zoo.core import hydra_run

class Job:  # an object, as the zoo's TrainJob: Hydra calls it with the composed config
    def __call__(self, cfg):
        from hydra.core.hydra_config import HydraConfig
        hc = HydraConfig.get()
        logging.getLogger("app").info("job ran with x=%s", cfg.x)
        print("JOB " + json.dumps({"x": cfg.x, "dir": hc.runtime.output_dir, "mode": hc.mode.name,
                                   "name": hc.job.name, "overrides": list(hc.overrides.task)}), flush=True)

args, parser = hydra_run.parse_args(sys.argv[2:])
print("ONLY_PRINTS", hydra_run.only_prints(args), flush=True)
hydra_run.run(args, parser, Job(), Path(sys.argv[1]), "app")
'''


@pytest.fixture
def app(tmp_path: Path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "app.yaml").write_text(
        f"x: 1\nhydra:\n  run: {{dir: {tmp_path}/run}}\n"
        f"  sweep: {{dir: {tmp_path}/multi, subdir: '${{hydra.job.num}}'}}\n"
        "  job: {name: cli, chdir: false}\n")

    def run(*args: str) -> tuple[list[dict], str]:
        proc = subprocess.run([sys.executable, "-c", APP, str(tmp_path / "conf"), *args], cwd=ROOT, text=True,
                              capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        jobs = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("JOB ")]
        return jobs, proc.stdout

    return run


def test_one_job_in_its_run_folder_with_overrides_and_logging(app, tmp_path):
    jobs, out = app("x=5")
    assert "ONLY_PRINTS False" in out
    assert jobs == [{"x": 5, "dir": str(tmp_path / "run"), "mode": "RUN", "name": "cli", "overrides": ["x=5"]}]
    assert "job ran with x=5" in (tmp_path / "run" / "cli.log").read_text()  # Hydra's job logging, to the file
    assert "x=5" in (tmp_path / "run" / ".hydra" / "overrides.yaml").read_text()


def test_a_sweep_runs_each_job_in_its_own_folder(app, tmp_path):
    jobs, _ = app("-m", "x=1,2")
    assert [(j["x"], j["dir"], j["mode"]) for j in jobs] == [
        (1, str(tmp_path / "multi" / "0"), "MULTIRUN"), (2, str(tmp_path / "multi" / "1"), "MULTIRUN")]


def test_cfg_prints_the_composed_config_and_runs_nothing(app, tmp_path):
    jobs, out = app("--cfg", "job", "x=7")
    assert jobs == [] and "x: 7" in out and not (tmp_path / "run").exists()


def test_help_only_prints():
    from zoo.core.hydra_run import only_prints, parse_args

    assert only_prints(parse_args(["--help"])[0]) and not only_prints(parse_args(["x=1"])[0])
    args, _ = parse_args(["--cfg", "job", "a=1,2"])
    assert args.cfg == "job" and args.overrides == ["a=1,2"]
    args, _ = parse_args(["-m", "a=1,2"])
    assert args.multirun and args.overrides == ["a=1,2"]
    from zoo.errors import ZooError

    with pytest.raises(ZooError, match="-m and --cfg cannot go together"):  # Hydra's own refusal: a traceback
        parse_args(["-m", "a=1,2", "--cfg", "job"])
