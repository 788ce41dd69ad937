"""The shared trainer factory and checkpoint IO."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from zoo.core import trainer as zt
from zoo.core.checkpoint import AtomicCheckpointIO, load_checkpoint
from zoo.errors import ZooError, one_line
from zoo.testing import compose


def test_precision_auto_resolves_by_hardware(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert zt.resolve_precision("auto") == "32-true"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert zt.resolve_precision("auto") == "bf16-mixed"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert zt.resolve_precision("auto") == "16-mixed"
    assert zt.resolve_precision("auto", accelerator="cpu") == "32-true"
    assert zt.resolve_precision("bf16-mixed") == "bf16-mixed"


def test_benchmark_auto_is_off_with_determinism(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert zt.resolve_benchmark("auto", "auto", deterministic=False) is True
    assert zt.resolve_benchmark("auto", "auto", deterministic=True) is False


def test_trainer_kwargs_keep_zoo_switches_out_of_lightning():
    kwargs = zt.trainer_kwargs(compose().trainer)
    for key in ("float32_matmul_precision", "channels_last", "compile"):
        assert key not in kwargs
    assert kwargs["precision"] == "32-true" and kwargs["max_epochs"] == 15  # the task's own default


def test_build_trainer_bf16_on_cpu(tmp_path):
    cfg = compose(["trainer.accelerator=cpu", "trainer.precision=bf16-mixed", f"run_dir={tmp_path}"])
    trainer = zt.build_trainer(cfg, callbacks=[], loggers=[])
    assert type(trainer.precision_plugin).__name__ == "MixedPrecision"
    assert trainer.precision == "bf16-mixed"
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)


def test_atomic_save_never_leaves_a_broken_checkpoint(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "ckpts" / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(2)}}, path)

    def broken_save(obj, f, *a, **k):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(2)}}, path)
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(path)["state_dict"]["w"], torch.ones(2))
    assert os.listdir(path.parent) == ["last.ckpt"]  # no temp file left behind


def test_corrupt_checkpoint_is_one_clear_line(tmp_path: Path):
    bad = tmp_path / "x.ckpt"
    bad.write_bytes(b"garbage")
    with pytest.raises(ZooError) as e:
        load_checkpoint(bad)
    assert "corrupt" in one_line(e.value) and "\n" not in one_line(e.value)


def test_worker_wrapped_error_keeps_the_original_line():
    wrapped = ZooError("Caught ZooError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
                       '  File "x.py", line 1\nzoo.errors.ZooError: cannot read image a.png; remove it')
    assert one_line(wrapped) == "cannot read image a.png; remove it"


def test_find_unused_parameters_switch_maps_every_ddp_spelling():
    def strategy(**t):
        return zt.trainer_kwargs({"accelerator": "cpu", "find_unused_parameters": True, **t})["strategy"]

    assert strategy(strategy="ddp", devices=2) == "ddp_find_unused_parameters_true"
    assert strategy(strategy="ddp_spawn", devices=2) == "ddp_spawn_find_unused_parameters_true"
    assert strategy(strategy="auto", devices=2) == "ddp_find_unused_parameters_true"  # auto would pick DDP
    assert strategy(strategy="auto", devices=1) == "auto"  # one process: nothing to find
    assert strategy(strategy="fsdp", devices=2) == "fsdp"
    ddp = strategy(strategy={"_target_": "lightning.pytorch.strategies.DDPStrategy"}, devices=2)
    assert ddp._ddp_kwargs["find_unused_parameters"] is True
    off = zt.trainer_kwargs({"accelerator": "cpu", "strategy": "ddp", "devices": 2})
    assert off["strategy"] == "ddp" and "find_unused_parameters" not in off


def test_compile_switch_compiles_the_networks_in_place_not_the_lightning_steps():
    import lightning.pytorch as pl
    from torchmetrics.classification import MulticlassAccuracy

    from zoo.core.trainer import prepare_module

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = torch.nn.Sequential(torch.nn.Linear(4, 3))
            self.metrics = torch.nn.ModuleDict({"acc": MulticlassAccuracy(3)})
            self.critic = torch.nn.Linear(4, 1)

    module = Module()
    keys = list(module.state_dict())
    out = prepare_module(module, {"compile": True})
    assert out is module  # a LightningModule still (Lightning would otherwise compile training_step & co.)
    assert module.model._compiled_call_impl is not None and module.critic._compiled_call_impl is not None
    assert module.metrics._compiled_call_impl is None
    assert list(module.state_dict()) == keys  # no `_orig_mod.`: checkpoints load either way


def test_short_epochs_still_log_and_lightnings_false_warning_and_tip_are_dropped(tmp_path, caplog, recwarn):
    """Lightning warns that an epoch shorter than log_every_n_steps won't log; it does (global steps), so the zoo
    drops that line, the LeafSpec deprecation and the litlogger tip, and the steps below prove the warning false."""
    import logging

    import lightning.pytorch as pl
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = self.net(batch[0]).pow(2).mean()
            self.log("train/loss", loss, on_step=True)
            return loss

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(12, 4)), batch_size=4)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    cfg = compose(["trainer.accelerator=cpu", "trainer.max_epochs=4", "trainer.log_every_n_steps=5",
                   "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", f"run_dir={tmp_path}"])
    tb = TensorBoardLogger(str(tmp_path), name="tb", version="")
    with caplog.at_level(logging.INFO):
        zt.build_trainer(cfg, callbacks=[], loggers=[tb]).fit(Module())
    shown = [str(w.message) for w in recwarn] + [r.getMessage() for r in caplog.records]
    assert not [m for m in shown if "logging interval" in m or "LeafSpec" in m or "litlogger" in m], shown
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [4, 9]  # 3-batch epochs, logged every 5 global steps


# ---------------------------------------------------------------------------------- the math mode, one value
@pytest.fixture
def fp32_switches():
    """Put torch's fp32 switches back after a test sets them (they are process-wide)."""
    matmul, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    yield
    torch.set_float32_matmul_precision(matmul)
    torch.backends.cudnn.allow_tf32 = cudnn


@pytest.mark.parametrize("overrides, precision, fp32", [
    (["trainer.precision=32-true"], "32-true", "ieee"),  # fp32 everywhere: matmuls AND cuDNN convs/RNNs
    (["trainer.precision=tf32"], "32-true", "tf32"),
    (["trainer.precision=bf16-mixed"], "bf16-mixed", "tf32"),  # the fp32 ops outside autocast, as before
    (["trainer.precision=bf16-mixed", "trainer.float32_matmul_precision=highest"], "bf16-mixed", "ieee"),
    (["trainer.precision=32-true", "trainer.float32_matmul_precision=high"], "32-true", "tf32"),
])
def test_the_math_mode_sets_matmuls_and_cudnn_alike_with_the_new_api(overrides, precision, fp32, fp32_switches):
    from zoo.measure.mathmode import read_flags

    tcfg = compose(["trainer.accelerator=cpu", *overrides]).trainer
    mode = zt.math_mode(tcfg)
    assert (mode.precision, mode.fp32) == (precision, fp32)
    assert zt.trainer_kwargs(tcfg)["precision"] == precision  # Lightning gets its own name (tf32 -> 32-true)
    zt.apply_global_switches(tcfg)
    assert read_flags() == {"matmul": fp32, "conv": fp32, "rnn": fp32}
    # the legacy view agrees: its readers (Lightning's CUDA start, Inductor's conv templates) would raise otherwise
    assert torch.get_float32_matmul_precision() == ("highest" if fp32 == "ieee" else "high")
    tf32 = fp32 == "tf32"
    assert torch.backends.cudnn.allow_tf32 is tf32 and torch.backends.cuda.matmul.allow_tf32 is tf32


def test_contradictory_or_unknown_math_is_one_line():
    from zoo.measure.mathmode import MathMode

    with pytest.raises(ZooError, match="drop one of them"):
        MathMode.of("tf32", "highest")
    with pytest.raises(ZooError, match="float32_matmul_precision=fast is not one of highest, high, medium"):
        MathMode.of("32-true", "fast")
    assert MathMode.of("32").precision == "32-true" and MathMode.of("bf16-mixed").autocast == "bf16"


def test_one_place_decides_whether_the_hardware_has_a_precision(monkeypatch):
    assert "GPU (Ampere+)" in zt.precision_problem("tf32", "cpu")
    assert zt.precision_problem("32-true", "cpu") is None and zt.precision_problem("bf16-mixed", "cpu") is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    assert zt.precision_problem("bf16-mixed", "auto") == "Tesla T4 has no bf16"
    assert zt.precision_problem("tf32", "gpu") == "Tesla T4 has no TF32 (Ampere+)"
    assert zt.resolve_precision("auto") == "16-mixed"  # what auto picks passes the same check
    assert zt.precision_problem(zt.resolve_precision("auto"), "auto") is None


# ------------------------------------------------------------------------------------------ weight average
def _linear_module(manual: bool = False):
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)
            self.automatic_optimization = not manual
            self.raw: list[torch.Tensor] = []  # the trained weights after every optimizer step

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).sub(1).pow(2).mean()

        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.raw.append(self.net.weight.detach().clone())

        def train_dataloader(self):
            g = torch.Generator().manual_seed(0)
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(12, 4, generator=g)),
                                               batch_size=4)

        def test_step(self, batch, batch_idx):
            self.tested = self.net.weight.detach().clone()

        def test_dataloader(self):
            return self.train_dataloader()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Module()


def test_weight_ema_is_what_checkpoints_and_the_test_see_and_the_raw_weights_go_on(tmp_path):
    cfg = compose(["trainer.accelerator=cpu", "trainer.max_epochs=2", "trainer.ema_decay=0.5", f"run_dir={tmp_path}",
                   "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"])
    from lightning.pytorch.callbacks import ModelCheckpoint

    module = _linear_module()
    every_epoch = ModelCheckpoint(tmp_path, "x", enable_version_counter=False)
    trainer = zt.build_trainer(cfg, callbacks=[every_epoch], loggers=[])
    trainer.fit(module)
    ema = module.raw[0]  # the average starts as a copy of the weights after the first step
    for w in module.raw[1:]:
        ema = 0.5 * ema + 0.5 * w
    assert len(module.raw) == 6 and not torch.allclose(ema, module.raw[-1])
    assert torch.allclose(module.net.weight, ema)  # after fit the module holds the average (what test uses)
    ckpt = torch.load(tmp_path / "x.ckpt", weights_only=False)  # written at the end of the last epoch
    assert torch.allclose(ckpt["state_dict"]["net.weight"], ema)
    assert torch.allclose(ckpt["current_model_state"]["net.weight"], module.raw[-1])  # what a resume trains on
    trainer.test(module, ckpt_path=str(tmp_path / "x.ckpt"), verbose=False)  # as `zoo train` tests its best file
    assert torch.allclose(module.tested, ema)


def test_weight_ema_refuses_tasks_that_step_their_own_optimizers_and_bad_decays(tmp_path):
    from zoo.core.validate import check_ema_decay

    cfg = compose(["trainer.accelerator=cpu", "trainer.max_epochs=1", "trainer.ema_decay=0.9", f"run_dir={tmp_path}",
                   "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"])
    with pytest.raises(ZooError, match="steps its own optimisers.*trainer.ema_decay=null"):
        zt.build_trainer(cfg, callbacks=[], loggers=[]).fit(_linear_module(manual=True))
    for bad in (1.0, -0.1, "high", True):
        with pytest.raises(ZooError, match=r"must be a number in \[0, 1\)"):
            check_ema_decay(bad)
    check_ema_decay(None)
    check_ema_decay(0.999)


# ---------------------------------------------------------------------------------- console, compile, math once
class TinyFit:
    """A LightningModule class with one linear layer and 8 random rows: enough for fit to start and step."""

    @staticmethod
    def module():  # noqa: ANN205 - a LightningModule
        import lightning.pytorch as pl

        class Module(pl.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.net = torch.nn.Linear(4, 1)

            def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
                return self.net(batch[0]).pow(2).mean()

            def train_dataloader(self):  # noqa: ANN201
                return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)

            def configure_optimizers(self):  # noqa: ANN201
                return torch.optim.SGD(self.parameters(), lr=0.1)

        return Module()


@pytest.mark.parametrize("summary", [True, False])
def test_the_model_table_has_no_flops_column(tmp_path, summary):
    """Lightning's table counts FLOPs only for an `example_input_array` (no zoo task has one): 0 on every run. The
    zoo's table keeps the layers and parameter counts and leaves the FLOPs out."""
    import logging

    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    table_log = logging.getLogger("lightning.pytorch.callbacks.model_summary")
    table_log.addHandler(handler)
    cfg = compose(["trainer.accelerator=cpu", "trainer.max_steps=1", "trainer.enable_progress_bar=false",
                   f"trainer.enable_model_summary={str(summary).lower()}", f"run_dir={tmp_path}"])
    try:
        zt.build_trainer(cfg, callbacks=[], loggers=[]).fit(TinyFit.module())
    finally:
        table_log.removeHandler(handler)
    text = "\n".join(lines)
    if not summary:
        assert text == ""
        return
    assert "Trainable params" in text and "Linear" in text and "| net " in text, text
    assert "FLOPs" not in text and "Flops" not in text, text


def test_the_math_mode_is_computed_once_per_trainer(tmp_path, monkeypatch):
    calls = []
    real = zt.math_mode
    monkeypatch.setattr(zt, "math_mode", lambda tcfg: calls.append(1) or real(tcfg))
    cfg = compose(["trainer.accelerator=cpu", "trainer.precision=bf16-mixed", f"run_dir={tmp_path}"])
    trainer = zt.build_trainer(cfg, callbacks=[], loggers=[])
    assert len(calls) == 1 and trainer.precision == "bf16-mixed"


def test_compile_mode_reaches_every_network(monkeypatch, caplog):
    import logging

    from zoo.core.compile import MarkCudaGraphSteps

    calls = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: calls.append((type(self).__name__, kw)))
    zt.prepare_module(TinyFit.module(), {"compile": True, "compile_mode": "max-autotune"})
    zt.prepare_module(TinyFit.module(), {"compile": True, "compile_mode": None})
    assert calls == [("Linear", {"mode": "max-autotune"}), ("Linear", {"mode": "default"})]
    calls.clear()
    with caplog.at_level(logging.WARNING):
        zt.prepare_module(TinyFit.module(), {"compile": False, "compile_mode": "reduce-overhead"})
    assert calls == [] and "add trainer.compile=true" in caplog.text  # said, not silently eager
    zt.prepare_module(TinyFit.module(), {"compile": True, "compile_options": {"shape_padding": True},
                                         "compile_dynamic": False})
    assert calls == [("Linear", {"options": {"shape_padding": True}, "dynamic": False})]  # options instead of a mode
    calls.clear()
    graphs = zt.zoo_callbacks(compose(["trainer.compile=true", "trainer.compile_mode=reduce-overhead"]).trainer,
                              {}, [])
    assert any(isinstance(c, MarkCudaGraphSteps) for c in graphs)
    assert not any(isinstance(c, MarkCudaGraphSteps) for c in zt.zoo_callbacks(compose().trainer, {}, []))


def test_cuda_graph_steps_are_marked_on_cuda_only(monkeypatch):
    from types import SimpleNamespace

    from zoo.core.compile import MarkCudaGraphSteps

    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    for device, expected in (("cpu", 0), ("cuda", 1)):
        marks.clear()
        trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)))
        MarkCudaGraphSteps().on_train_batch_start(trainer, None, None, 0)
        assert len(marks) == expected


@pytest.mark.parametrize("override", ["trainer.compile_mode=fast", "trainer.compile_mode=default,fast"])
def test_a_bad_compile_mode_is_one_line_up_front(override):
    from zoo.core.config import check_overrides

    with pytest.raises(ZooError) as e:
        check_overrides(["trainer.compile=true", override])
    assert str(e.value).startswith("trainer.compile_mode=fast is not a torch.compile mode; use one of default, "
                                   "reduce-overhead")


@pytest.mark.parametrize("overrides, message", [
    (["trainer.compile_options={epilog_fusion: true}"], "epilog_fusion is not an Inductor setting; did you mean "
                                                         "epilogue_fusion?"),
    (["trainer.compile_mode=max-autotune", "trainer.compile_options={shape_padding: true}"],
     "trainer.compile_mode=max-autotune and trainer.compile_options together"),
    (["trainer.compile_options=fast"], "trainer.compile_options='fast' is not a mapping")])
def test_bad_compile_options_are_one_line_up_front(overrides, message):
    """torch names an unknown Inductor option, or a mode with options, only when the first batch compiles."""
    from zoo.core.config import check_overrides

    with pytest.raises(ZooError, match=message):
        check_overrides(["trainer.compile=true", *overrides])
    check_overrides(["trainer.compile=true", "trainer.compile_options={shape_padding: true}"])
