"""zoo.monitor: throughput (Lightning's ThroughputMonitor with FLOPs and MFU), device statistics and energy counters;
zoo.checkpoint: the environment in env.json and in checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader

from zoo.core.checkpoint import ZooMetadata, load_checkpoint, write_env
from zoo.measure import device_stats, energy, throughput

B, DIMS = 8, (8, 16, 4)


class Recorder(Logger):
    """Keeps every logged metric row: what TensorBoard would get."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict] = []

    name, version = "rec", 0

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        self.rows.append(dict(metrics))

    def values(self, key: str) -> list[float]:
        return [r[key] for r in self.rows if key in r]


class Mlp(pl.LightningModule):
    """A stack of Linear layers: FLOPs known by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(DIMS[0], DIMS[1]), torch.nn.ReLU(),
                                       torch.nn.Linear(DIMS[1], DIMS[2]))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = batch["x"] if isinstance(batch, dict) else batch[0]
        return self.net(x).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def hand_flops(b: int) -> int:
    """Forward 2*b*i*o per Linear; backward: the weight gradient for both, the input gradient for the second only
    (the data needs none)."""
    (i, h, o) = DIMS
    return 2 * b * i * h * 2 + 2 * b * h * o * 3


def fit(module: pl.LightningModule, data: Any, callbacks: list, steps: int = 8, every: int = 2,
        **kw: Any) -> Recorder:
    rec = Recorder()
    trainer = pl.Trainer(max_steps=steps, log_every_n_steps=every, logger=rec, callbacks=callbacks, accelerator="cpu",
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, **kw)
    trainer.fit(module, DataLoader(data, batch_size=None))
    return rec


def tensors(n: int = 8) -> list:
    return [(torch.randn(B, DIMS[0]),) for _ in range(n)]


def test_default_counts() -> None:
    assert throughput.batch_size((torch.zeros(5, 3), torch.zeros(5))) == 5
    assert throughput.batch_size({"wave": torch.zeros(7, 100), "lengths": torch.zeros(7)}) == 7
    assert throughput.batch_size(3) == 1  # an RL update index
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert int(throughput.real_tokens({"input_ids": mask, "attention_mask": mask})) == 3
    assert throughput.real_tokens((mask,)) is None


def test_throughput_flops_mfu_and_keys_exact() -> None:
    tp = throughput.Throughput(peak_flops=1e9)
    rec = fit(Mlp(), tensors(), [tp])
    assert tp.flops_per_batch == hand_flops(B)
    sps, fps, mfu = rec.values("train/samples_per_sec"), rec.values("train/flops_per_sec"), rec.values("train/mfu")
    assert len(sps) == 3 and len(fps) == 3 and len(mfu) == 3  # logging steps 2, 4, 6, 8; rates from the second on
    for s, f, m, ms in zip(sps, fps, mfu, rec.values("train/step_ms")):
        assert f / s == pytest.approx(hand_flops(B) / B)
        assert m == pytest.approx(f / 1e9)
        assert 1000 / ms * B == pytest.approx(s)  # step time and samples/s describe the same window
    hidden = ("train/time", "train/batches", "train/device", "validate/")
    assert not any(k.startswith(hidden) for r in rec.rows for k in r)


def test_real_tokens_per_sec() -> None:
    mask = torch.zeros(B, 10, dtype=torch.long)
    mask[:, :3] = 1  # 3 real tokens per sample, 7 padding
    data = [{"x": torch.randn(B, DIMS[0]), "attention_mask": mask} for _ in range(8)]
    rec = fit(Mlp(), data, [throughput.Throughput()])
    toks, sps = rec.values("train/tokens_per_sec"), rec.values("train/samples_per_sec")
    assert toks and all(t / s == pytest.approx(3.0) for t, s in zip(toks, sps))


def test_flops_from_the_module_win_and_a_failed_count_does_not_stop_training(monkeypatch, caplog) -> None:
    module = Mlp()
    module.flops_per_batch = 1000
    rec = fit(module, tensors(), [throughput.Throughput()])
    assert all(f / s == pytest.approx(1000 / B) for f, s in zip(rec.values("train/flops_per_sec"),
                                                                 rec.values("train/samples_per_sec")))

    class Broken:
        def __init__(self, **kw: Any) -> None:
            raise RuntimeError("counter broke")

    monkeypatch.setattr("torch.utils.flop_counter.FlopCounterMode", Broken)
    with caplog.at_level("INFO", logger="zoo"):
        rec = fit(Mlp(), tensors(), [throughput.Throughput()])
    assert rec.values("train/samples_per_sec") and not rec.values("train/flops_per_sec")
    assert "FLOPs not counted (RuntimeError: counter broke)" in caplog.text


class ManualNoData(pl.LightningModule):
    """Like PPO: batches are update indices, manual optimisation, two optimizer steps per batch."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.w = torch.nn.Linear(4, 4)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        for _ in range(2):
            opt.zero_grad()
            self.manual_backward(self.w(torch.randn(3, 4)).sum())
            opt.step()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_manual_optimisation_and_non_tensor_batches() -> None:
    tp = throughput.Throughput()
    rec = fit(ManualNoData(), list(range(10)), [tp], steps=-1, every=1, max_epochs=1)
    assert tp.flops_per_batch == 2 * (2 * 3 * 4 * 4 * 2)  # two steps of forward + weight gradient
    assert rec.values("train/step_ms") and rec.values("train/samples_per_sec")


def test_energy_counter_wraps_around() -> None:
    raw = iter([900.0, 950.0, 20.0, 70.0])
    c = energy.EnergyCounter(lambda: next(raw), to_joules=1e-3, wrap=1000.0)
    c.start()
    assert c.read() == pytest.approx(0.050)
    assert c.read() == pytest.approx(0.120)  # 950 -> 1000 -> 20: 70 mJ, not -930
    assert c.read() == pytest.approx(0.170)


def test_rapl_reads_packages_not_subdomains(tmp_path: Path) -> None:
    for zone, uj in (("intel-rapl:0", 5_000_000), ("intel-rapl:1", 7_000_000), ("intel-rapl:0:0", 1)):
        (tmp_path / zone).mkdir()
        (tmp_path / zone / "energy_uj").write_text(str(uj))
        (tmp_path / zone / "max_energy_range_uj").write_text("262143328850")
    counters, source = energy.rapl_counters(str(tmp_path))
    assert len(counters) == 2 and "2 CPU package" in source
    for c in counters:
        c.start()
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("6000000")
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("9500000")
    assert sum(c.read() for c in counters) == pytest.approx(3.5)
    (tmp_path / "intel-rapl:0" / "max_energy_range_uj").unlink()
    assert energy.rapl_counters(str(tmp_path))[0] == []
    assert energy.rapl_counters(str(tmp_path / "none")) == ([], f"no RAPL domains under {tmp_path / 'none'}")


class FakeNvml:
    """The NVML calls GpuStats makes, over counters a test moves."""

    def __init__(self, energy_mj: list[int] | None) -> None:
        self.energy_mj, self.power_mw = energy_mj, [250_000, 300_000]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if self.energy_mj is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.energy_mj[h]

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return type("U", (), {"gpu": 87 + h})()

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return type("M", (), {"used": 3_000_000_000 * (h + 1)})()

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self.power_mw[h]


def test_gpu_stats_sums_energy_deltas_over_the_runs_gpus() -> None:
    nvml = FakeNvml([10_000_000, 20_000_000])  # millijoules since the driver loaded: not this run's
    stats = energy.GpuStats(nvml, [0, 1])
    stats.start()
    nvml.energy_mj = [10_150_000, 20_250_000]
    out = stats.read()
    assert out["device/energy_j"] == pytest.approx(400.0)
    assert out["device/gpu0_util_pct"] == 87 and out["device/gpu1_memory_gb"] == pytest.approx(6.0)
    assert out["device/gpu1_power_w"] == pytest.approx(300.0)
    old = energy.GpuStats(FakeNvml(None), [0])
    assert "device/energy_j" not in old.read() and old.source.startswith("n/a")


def test_device_stats_on_cpu(capsys) -> None:
    rec = fit(Mlp(), tensors(), [device_stats.DeviceStats(every_n_steps=3, rapl_root="/nonexistent")])
    util, rss = rec.values("device/cpu_util_pct"), rec.values("device/rss_gb")
    assert len(util) == 3 and all(0 < u <= 101 for u in util)  # batches 1, 4, 7
    assert all(0.05 < r < 64 for r in rss)
    assert "zoo: energy used by training: n/a (no RAPL domains under /nonexistent)" in capsys.readouterr().out


def test_env_in_run_dir_and_checkpoint(tmp_path: Path) -> None:
    meta = ZooMetadata("test/mlp", ["a=1"], {"run_dir": str(tmp_path)})
    rec = Recorder()
    trainer = pl.Trainer(max_steps=2, logger=rec, callbacks=[meta], accelerator="cpu", enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(tmp_path))
    trainer.fit(Mlp(), DataLoader(tensors(2), batch_size=None))
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["packages"]["torch"] and env["cpu"]["cores"] >= 1
    path = tmp_path / "x.ckpt"
    trainer.save_checkpoint(path)
    assert load_checkpoint(path)["zoo"]["env"] == env  # loads with weights_only=True


def test_resume_on_another_environment_keeps_both(tmp_path: Path) -> None:
    first = {"git": {"commit": "a"}}
    write_env(tmp_path, first)
    write_env(tmp_path, first)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env.json"]
    write_env(tmp_path, {"git": {"commit": "b"}})
    assert json.loads((tmp_path / "env.json").read_text()) == first
    assert json.loads((tmp_path / "env-resume-1.json").read_text()) == {"git": {"commit": "b"}}


def test_flops_scale_with_padded_length() -> None:
    """Text batches padded to different lengths: FLOPs follow the batch's size, counted once on the first."""

    class PerToken(Mlp):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.net(batch[0].reshape(-1, DIMS[0])).pow(2).mean()  # (B*L, D): linear in the length L

    data = [(torch.randn(B, 2 if i % 2 else 5, DIMS[0]),) for i in range(8)]
    tp = throughput.Throughput()
    rec = fit(PerToken(), data, [tp])
    per_sample = [hand_flops(B * length) / B for length in (2, 5)]
    assert tp.flops_per_batch == hand_flops(B * 5)
    for f, s in zip(rec.values("train/flops_per_sec"), rec.values("train/samples_per_sec")):
        assert f / s == pytest.approx(sum(per_sample) / 2)  # each window: one batch of each length
