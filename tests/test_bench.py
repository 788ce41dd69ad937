"""`python -m zoo bench`: FLOPs and MFU exact on a model counted by hand, the peak table and CPU estimate, bad bench
keys as one line, and (slow) two combinations of every task through the real CLI, with a skipped one."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import torch

from zoo.errors import ZooError
from zoo.testing import tone_manifest

ONE = {"OMP_NUM_THREADS": "1"}  # tiny models on a shared 2-core machine: one thread each is fastest
SHORT = ["bench.steps=2", "bench.warmup=1"]


# ---------------------------------------------------------------------------------- FLOPs and MFU, by hand
class LinearStack(torch.nn.Module):
    def __init__(self, sizes: list[int]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def hand_flops(batch: int, sizes: list[int]) -> int:
    """2*B*in*out per Linear forward; backward twice that (grad of input and of weight), except that the first layer's
    input needs no gradient (its input-gradient matmul is never run)."""
    total = sum(3 * 2 * batch * a * b for a, b in zip(sizes, sizes[1:]))
    return total - 2 * batch * sizes[0] * sizes[1]


def test_flops_of_a_linear_stack_are_counted_exactly():
    from zoo.measure.flops import count_flops

    sizes, batch = [32, 64, 48, 16], 8
    model = LinearStack(sizes)
    flops, _ = count_flops(lambda: model(torch.randn(batch, sizes[0])).sum().backward())
    assert flops == hand_flops(batch, sizes)


def bench_fit(tmp_path: Path, peak: float | None = 1e9, precision: str = "32-true", steps: int = 4, warmup: int = 2,
              **callback: object) -> tuple[object, object]:
    """The bench's own measuring callback in a real Lightning fit of a LinearStack (batch 8): (callback, trainer)."""
    import lightning.pytorch as pl

    from zoo.verbs.bench.worker import BenchCallback

    sizes, batch = [32, 64, 48, 16], 8

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = LinearStack(sizes)

        def training_step(self, b, i):  # noqa: ANN001, ANN201
            return self.net(b[0]).square().mean()

        def configure_optimizers(self):  # noqa: ANN201
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.TensorDataset(torch.randn(10 * batch, sizes[0]))
    cb = BenchCallback(lambda m, b: b[0].shape[0], steps=steps, warmup=warmup, peak_flops=peak, **callback)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=100, callbacks=[cb], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=str(tmp_path), precision=precision)
    trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=batch))
    return cb, trainer


def test_bench_callback_reports_exact_flops_and_mfu_against_a_given_peak(tmp_path):
    """FLOPs per step and MFU = FLOPs / step time / peak, in a real fit."""
    sizes, batch, peak = [32, 64, 48, 16], 8, 1e9
    cb, trainer = bench_fit(tmp_path, peak)
    r = cb.result
    assert trainer.global_step == 6 and cb.seen == 6  # stopped after warmup + steps
    assert r["flops_per_step"] == hand_flops(batch, sizes)
    step_s = r["seconds"] / 4
    assert r["mfu"] == pytest.approx(hand_flops(batch, sizes) / step_s / peak, rel=1e-12)
    assert r["units"] == 4 * batch and r["units_per_s"] == pytest.approx(4 * batch / r["seconds"])
    assert r["step_ms_p50"] <= r["step_ms_p90"] and 0 <= r["data_wait_frac"] < 1
    assert r["peak_source"] == "given" and r["loss"] > 0 and r["peak_mem_bytes"] > 0


def test_peak_table_and_cpu_estimate(tmp_path):
    from zoo.measure.flops import mfu
    from zoo.measure.mathmode import peak_kind
    from zoo.measure.peaks import cpu_flops_per_cycle, cpu_peak, gpu_peak

    assert gpu_peak("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989.4e12)
    assert gpu_peak("NVIDIA H100 PCIe", "tf32") == pytest.approx(378e12)
    assert gpu_peak("NVIDIA H200", "fp32") == pytest.approx(67e12)
    assert gpu_peak("NVIDIA L4", "bf16") == pytest.approx(121e12)  # not L40S's
    assert gpu_peak("NVIDIA L40S", "bf16") == pytest.approx(362.1e12)
    assert gpu_peak("NVIDIA A100-SXM4-80GB", "fp16") == pytest.approx(312e12)
    assert gpu_peak("NVIDIA GeForce RTX 4090", "bf16") == pytest.approx(165.2e12)
    assert gpu_peak("Tesla T4", "fp16") is None
    ieee, tf32 = {"matmul": "ieee", "conv": "ieee", "rnn": "ieee"}, {"matmul": "ieee", "conv": "tf32", "rnn": "ieee"}
    assert [peak_kind(p, f, d) for p, f, d in [("32-true", ieee, "cuda"), ("32-true", tf32, "cuda"),
                                               ("32-true", tf32, "cpu"), ("bf16-mixed", ieee, "cuda"),
                                               ("16-mixed", ieee, "cuda"), ("64-true", ieee, "cpu")]] \
        == ["fp32", "tf32", "fp32", "bf16", "fp16", "fp64"]  # a TF32 conv alone makes the step's peak TF32's
    assert gpu_peak("NVIDIA H200", "fp64") is None  # not in the table: MFU n/a rather than against a wrong peak
    # AVX2 + FMA: 8 lanes x 2 FLOPs x 2 pipes; Intel AVX-512: 16 lanes; AMD's AVX-512 runs on 256-bit pipes
    assert cpu_flops_per_cycle({"avx2", "fma"}, "GenuineIntel", "fp32") == 32
    assert cpu_flops_per_cycle({"avx512f", "fma"}, "GenuineIntel", "fp32") == 64
    assert cpu_flops_per_cycle({"avx512f", "fma", "avx512_bf16"}, "AuthenticAMD", "bf16") == 64
    info = tmp_path / "cpuinfo"
    info.write_text("vendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\n"
                    "flags\t\t: fpu sse avx avx2 fma avx512f\n")
    assert cpu_peak("fp32", cores=4, cpuinfo=str(info)) == pytest.approx(4 * 2.5e9 * 64)
    assert cpu_peak("fp32", cpuinfo=str(tmp_path / "missing")) is None
    assert mfu(2e9, 0.5, 1e10, devices=2) == pytest.approx(0.2) and mfu(None, 0.5, 1e10) is None


def test_percentiles_match_numpy():
    import numpy as np

    from zoo.verbs.bench.worker import percentile

    xs = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    for q in (0, 50, 90, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


# ---------------------------------------------------------------------------------------- bad keys and values
@pytest.mark.parametrize("arg, expected", [
    ("bench.precison=[32-true]", "unknown bench key 'bench.precison': did you mean bench.precision?"),
    ("bench.precision=[fp8]", "bench.precision: unknown 'fp8'"),
    ("bench.compile=[maybe]", "bench.compile='maybe' is not true or false"),
    ("bench.steps=0", "bench.steps=0 must be a positive integer"),
    ("bench.batch_size=[16,-2]", "bench.batch_size=-2 must be a positive integer"),
    ("bench.devices=[]", "bench.devices=[] is empty"),
    ("bench.peak_tflops=abc", "bench.peak_tflops='abc' must be a positive number"),
])
def test_bad_bench_keys_and_values_are_one_line(arg, expected):
    from zoo.verbs.bench.plan import parse_args

    with pytest.raises(ZooError) as err:
        parse_args(["task=vision/resnet", arg])
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_lists_and_sweeps_parse_to_axes_and_train_overrides_pass_through():
    from zoo.verbs.bench.plan import parse_args

    bench, rest = parse_args(["task=rl/ppo", "bench.precision=[32-true,bf16-mixed]", "bench.compile=false,true",
                              "bench.batch_size=8", "trainer.max_epochs=3"])
    assert bench["precision"] == ["32-true", "bf16-mixed"] and bench["compile"] == [False, True]
    assert bench["batch_size"] == [8] and bench["devices"] == [1] and rest == ["task=rl/ppo", "trainer.max_epochs=3"]


def test_what_the_machine_cannot_run_is_a_reason_and_the_trainer_decides_the_precision(monkeypatch):
    from zoo.core import trainer
    from zoo.verbs.bench.plan import skip_reason

    combo = {"precision": "32-true", "compile": False, "channels_last": None, "batch_size": None, "devices": 1}
    assert skip_reason(combo, "cpu") is None
    assert "CPU cores here" in skip_reason({**combo, "devices": 10_000}, "cpu")
    assert "TF32" in skip_reason({**combo, "precision": "tf32"}, "cpu")
    # one place decides about the hardware: the bench says what the trainer's check says
    monkeypatch.setattr(trainer, "precision_problem", lambda p, a: f"no {p} on {a} today")
    assert skip_reason({**combo, "precision": "bf16-mixed"}, "cpu") == "no bf16-mixed on cpu today"


# ------------------------------------------------------------------------------ every task, through the CLI
def _tiny_encoder(tmp_path: Path) -> str:
    sys.path.insert(0, str(Path(__file__).parent / "nlp"))
    from nlp_helpers import build_tiny_encoder

    return str(build_tiny_encoder(tmp_path / "tiny_bert"))


TASKS = {  # tiny settings per task, then its two combinations
    "vision": (["task=vision/resnet", "task.module.arch=resnet10t", "task.data.image_size=16",
                "task.module.pretrained=false", "task.data.batch_size=32"], ["bench.devices=[1,2]"]),
    "nlp": (["task=nlp/bert", "task.data.builtin_size=64"], ["bench.batch_size=[8,16]"]),
    # rl also asks for more processes than this machine has cores: those two rows are skipped, the bench goes on
    "rl": (["task=rl/ppo", "task.module.num_steps=32"], ["bench.batch_size=[2,4]", "bench.devices=[1,4096]"]),
    "speech": (["experiment=speech_fsdd_manifests", "task.module.model={hidden: 16, layers: 1}",
                "task.module.n_mels=16", "task.data.chars='one two'"], ["bench.batch_size=[2,4]"]),
    "gan": (["task=gan/dcgan", "task.module.width=8", "task.module.eval_train_steps=3"], ["bench.batch_size=[8,16]"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("domain", list(TASKS))
def test_bench_runs_two_combinations_of_every_task(run_zoo, tmp_path, domain):
    settings, axes = TASKS[domain]
    if domain == "nlp":
        settings = [*settings, f"task.module.encoder={_tiny_encoder(tmp_path)}"]
    if domain == "speech":
        settings = [*settings, *tone_manifest(tmp_path)]
    proc = run_zoo("bench", *settings, *axes, *SHORT, env=ONE, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    (out,) = [p for p in (tmp_path / "outputs" / "bench").glob("*/*/*") if (p / "bench.csv").is_file()]
    rows = list(csv.DictReader(open(out / "bench.csv")))
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 2, rows
    for r in ok:
        assert float(r["units_per_s"]) > 0 and float(r["flops_per_step"]) > 0 and float(r["loss"]) == float(r["loss"])
        assert r["label"] in proc.stdout  # the row is in the printed table
    skipped = [r for r in rows if r["status"] == "skipped"]
    assert len(skipped) == (2 if domain == "rl" else 0)
    for r in skipped:
        assert r["devices"] == "4096" and "4096 devices asked" in r["reason"]
        assert "skipped: 4096 devices asked" in proc.stdout
    assert "| # | setting |" in proc.stdout and "**packages**" in proc.stdout  # the table, then the environment
    assert (out / "bench.png").stat().st_size > 1000 and list((out / "tensorboard").glob("events.out.tfevents.*"))
    saved = json.loads((out / "bench.json").read_text())
    assert saved["env"]["python"] and len(saved["rows"]) == len(rows)


def test_rounds_give_the_median_row_and_the_median_of_per_round_speedups():
    from zoo.verbs.bench.plan import aggregate
    from zoo.verbs.bench.report import add_reference

    def run(r: int, ups: float) -> dict:
        return {"status": "ok", "round": r, "units_per_s": ups, "loss": 1.0, "step_ms_mean": 1000 / ups, "steps": 20}

    base = aggregate([run(0, 100.0), run(1, 50.0), run(2, 90.0)])  # round 1 ran on a busy machine
    fast = aggregate([run(0, 200.0), run(1, 100.0), run(2, 171.0)])
    skipped = aggregate([{"status": "skipped", "reason": "no GPU", "round": 0}])
    assert base["units_per_s"] == 90.0 and base["step_ms_mean"] == 1000 / 90 and base["runs"] == 3
    assert (base["units_per_s_min"], base["units_per_s_max"]) == (50.0, 100.0)
    rows = [{"index": i + 1, **r} for i, r in enumerate([base, fast, skipped])]
    add_reference(rows)
    # per-round ratios 2.0, 2.0, 1.9: the median pairs rounds, where the ratio of medians (171/90 = 1.9) would not
    assert rows[1]["speedup"] == pytest.approx(2.0) and rows[1]["speedup_min"] == pytest.approx(1.9)
    assert rows[2]["speedup"] is None and rows[2]["loss_ref"] == 1.0


# ------------------------------------------------------------------------------ an honest meter (issue: MFU 102 %)
def ok_row(index: int, ups: float, steps: int = 20, **kw: object) -> dict:
    """A measured row as the worker writes it (what the table and the notes read)."""
    return {"index": index, "label": f"row{index}", "status": "ok", "steps": steps, "units_per_s": ups,
            "step_ms_mean": 100.0, "step_ms_p50": 100.0, "step_ms_p90": 110.0, "data_wait_frac": 0.01,
            "ops_per_step": 1234, "ops_kind": "aten ops", "flops_per_step": 2e9, "mfu": 0.2, "math": "fp32",
            "math_flags": {"matmul": "ieee", "conv": "ieee", "rnn": "ieee"}, "precision_resolved": "32-true",
            "device": "cpu", "peak_flops_per_device": 1e11, "peak_source": "estimate", "peak_mem_bytes": 2**30,
            "loss": 1.0, **kw}


def test_a_row_faster_than_its_flops_and_the_peak_allow_is_a_measurement_error_never_a_number(tmp_path):
    from zoo.measure.flops import implausible
    from zoo.verbs.bench.plan import aggregate
    from zoo.verbs.bench.report import add_reference, table

    assert implausible(1e12, 0.5, 67e12, "fp32") is None  # 2 TFLOP/s of a 67 TFLOP/s peak
    # the H200 row: ResNet-50 training (24.3 GFLOP an image) at 2824 img/s is 68.6 TFLOP/s, above fp32's 67 (its
    # convolutions ran TF32)
    reason = implausible(24.3e9 * 256, 256 / 2824, 67e12, "fp32")
    assert "above the fp32 peak" in reason and "102." in reason
    cb, _ = bench_fit(tmp_path, peak=1e3)  # a planted peak of 1 kFLOP/s: every real step exceeds it
    r = cb.result
    assert r["status"] == "measurement error" and "above the fp32 peak" in r["reason"] and r["mfu"] > 1
    assert aggregate([{**r, "round": 0}])["status"] == "measurement error"  # never the median of a row
    rows = [ok_row(1, 100.0), {**r, "index": 2, "label": "planted"}]
    add_reference(rows)
    line = table(rows, "images").splitlines()[3]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2].startswith("measurement error: ") and not any(cells[3:])  # no throughput, speed-up or MFU
    assert rows[1]["speedup"] is None


def test_mfu_divides_by_the_peak_of_the_math_that_ran_and_the_row_records_its_flags_and_device(tmp_path):
    from zoo.measure.mathmode import read_flags
    from zoo.measure.peaks import cpu_peak
    from zoo.verbs.bench.report import notes

    cb, _ = bench_fit(tmp_path, peak=None, precision="bf16-mixed", device_note="cpu: the task pins its accelerator")
    r = cb.result
    assert r["math"] == "bf16" and r["math_flags"] == read_flags() and r["precision_resolved"] == "bf16-mixed"
    assert r["device"] == "cpu" and r["device_note"] == "cpu: the task pins its accelerator"
    assert r["peak_flops_per_device"] == cpu_peak("bf16", torch.get_num_threads())
    text = notes([{**r, "index": 1, "label": "x"}])
    assert "cpu: the task pins its accelerator" in text and "bf16 autocast peak" in text and "aten ops" in text


def test_operations_per_step_are_counted_once_past_the_first_step(tmp_path):
    from zoo.measure.ops import OpCounter

    counter, a = OpCounter("cpu"), torch.ones(3)
    counter.start()
    (a + a) * 2
    assert counter.stop() == 2 and counter.kind == "aten ops" and counter.stop() is None
    cb, _ = bench_fit(tmp_path, warmup=3)
    warm, measured = cb.ops, cb.result["ops_per_step"]
    assert measured == warm and measured > 20 and cb.result["ops_kind"] == "aten ops"
    assert cb.result["ops_eager"] is False and cb._ops_step == 2  # the last warm-up step, not step 0


def test_a_failed_row_names_the_innermost_cause_not_the_wrapper(tmp_path, monkeypatch):
    from torch._dynamo.exc import InternalTorchDynamoError

    from zoo.verbs.bench import worker

    def fit(spec: dict) -> None:
        try:
            try:
                raise NotImplementedError("argument of type: <class 'collections.deque'>")
            except NotImplementedError as e:
                raise InternalTorchDynamoError("NotImplementedError: argument of type ... from user code: File "
                                               "rl/module.py, line 165") from e
        except InternalTorchDynamoError:
            raise RuntimeError("An error occurred in a callback")  # noqa: B904 - a context, not a cause

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"result": str(tmp_path / "result.json")}))
    monkeypatch.setattr(worker, "fit", fit)
    with pytest.raises(SystemExit):
        worker.worker(str(spec))
    row = json.loads((tmp_path / "result.json").read_text())
    assert row["status"] == "failed"
    root = "NotImplementedError: argument of type: <class 'collections.deque'>"
    assert row["reason"] == f"{root} (raised as RuntimeError)"
    assert worker.failure_reason(ValueError("plain")) == "ValueError: plain"


def test_speedups_from_fewer_than_ten_measured_steps_are_refused():
    from zoo.verbs.bench.report import add_reference, notes, table

    cold = [ok_row(1, 10.0, steps=2), ok_row(2, 51.5, steps=2)]  # the 5.15x of a cold first row
    add_reference(cold)
    assert cold[1]["speedup"] is None and "2 measured steps (< 10)" in cold[1]["speedup_note"]
    md = table(cold, "images")
    assert "5.15x" not in md and "n/a (< 10 steps)" in md and "bench.steps=10 or more" in notes(cold)
    enough = [ok_row(1, 10.0, steps=10), ok_row(2, 51.5, steps=10)]
    add_reference(enough)
    assert enough[1]["speedup"] == pytest.approx(5.15) and "5.15x" in table(enough, "images")


def test_an_untimed_warm_up_run_comes_before_every_measured_row(tmp_path, monkeypatch):
    from zoo.verbs.bench.plan import Plan, parse_args

    monkeypatch.setenv("ZOO_OUTPUT_ROOT", str(tmp_path))
    for warm in (True, False):
        plan = Plan(*parse_args(["task=rl/ppo", "bench.precision=[32-true,bf16-mixed]", f"bench.warm_run={warm}"]))
        calls = []

        def measure(i, combo, round_=0, name=None, steps=None):  # noqa: ANN001, ANN202
            calls.append((i, name, steps))
            return {"status": "ok", "units_per_s": 1.0, "steps": 20, "step_ms_mean": 1.0}

        monkeypatch.setattr(plan, "measure", measure)
        rows = plan.run()
        assert calls == ([(0, "00_warmup", 2)] if warm else []) + [(0, None, None), (1, None, None)]
        assert [r["index"] for r in rows] == [1, 2]  # the warm-up run is no row
    assert plan.device_note == "cpu: the task pins its accelerator"  # rl/ppo's config says accelerator: cpu
    assert Plan(*parse_args(["task=vision/resnet", "trainer.accelerator=cpu"])).device_note == \
        "cpu: set on the command line"
