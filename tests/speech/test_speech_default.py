"""experiment=speech_synth_whisper is the default speech/ctc task with only the model and its schedule changed: the
same corpus, splits, batches, greedy decoding and monitor, so its test CER compares with the default's. Tiny random
encoder, no package weights."""

from __future__ import annotations

from unittest.mock import PropertyMock, patch

import torch
from omegaconf import OmegaConf

from speech.module import CTCRecognizer
from speech.vocab import BLANK
from zoo.testing import compose

PRESET = "experiment=speech_synth_whisper"


def test_preset_keeps_the_default_task_and_changes_only_the_model():
    default, preset = compose(["task=speech/ctc"]), compose([PRESET])
    assert OmegaConf.to_container(preset.task.data, resolve=True) == \
        OmegaConf.to_container(default.task.data, resolve=True)
    assert (preset.task.name, preset.task.monitor, preset.task.mode) == \
        (default.task.name, default.task.monitor, default.task.mode)
    module = preset.task.module
    assert module.decoder is None and default.task.module.decoder is None  # both scored with greedy decoding
    assert (module.arch, module.sample_rate, module.n_mels, module.pretrained) == ("whisper", 16000, 80, "auto")
    # the schedule trains the encoder after its frozen epochs (a frozen-only run would not be this recipe)
    assert 0 < module.freeze_encoder_epochs < preset.trainer.max_epochs


def test_preset_module_freezes_then_trains_the_encoder():
    kwargs = OmegaConf.to_container(compose([PRESET]).task.module, resolve=True)
    for key in ("_target_", "optimizer", "scheduler", "pretrained"):
        kwargs.pop(key)
    kwargs["model"] = {**kwargs["model"], "d_model": 16, "layers": 1, "heads": 2, "ffn": 32}
    module = CTCRecognizer(vocab=[BLANK, " ", *"eno"], pretrained=False, **kwargs)
    frozen = kwargs["freeze_encoder_epochs"]
    for epoch, trains in ((0, False), (frozen - 1, False), (frozen, True)):
        with patch.object(CTCRecognizer, "current_epoch", new_callable=PropertyMock, return_value=epoch):
            module.on_train_epoch_start()
        assert all(p.requires_grad == trains for p in module.model.encoder.parameters()), epoch
        assert all(p.requires_grad for p in module.model.head.parameters())
    wave, lengths = torch.randn(2, 16000), torch.tensor([16000, 8000])
    log_probs, out = module(wave, lengths)
    assert log_probs.shape[:2] == (2, 50) and out.tolist() == [50, 25]

