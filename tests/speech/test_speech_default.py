"""The default speech/ctc task is Whisper tiny.en's encoder + a BiGRU head; experiment=speech_synth_scratch is the same
task with only the model and its schedule changed back to the from-scratch BiLSTM: the same corpus, splits, batches,
greedy decoding and monitor, so the two test CERs compare. The presets built on the scratch recipe carry none of
the default's Whisper keys. Tiny random encoder, no package weights."""

from __future__ import annotations

from unittest.mock import PropertyMock, patch

import torch
from omegaconf import OmegaConf

from zoo.speech.module import CTCRecognizer
from zoo.speech.vocab import BLANK
from zoo.testing import compose

DEFAULT = "task=speech/ctc"
SCRATCH_PRESETS = ("speech_synth_scratch", "speech_fsdd_manifests", "speech_fsdd_scratch", "speech_scratch_finetune",
                   "speech_librispeech", "speech_librispeech_wav2vec2", "speech_wav2vec2_finetune")


def test_the_scratch_recipe_keeps_the_default_task_and_changes_only_the_model():
    default, scratch = compose([DEFAULT]), compose(["experiment=speech_synth_scratch"])
    assert OmegaConf.to_container(scratch.task.data, resolve=True) == \
        OmegaConf.to_container(default.task.data, resolve=True)
    assert (scratch.task.name, scratch.task.monitor, scratch.task.mode) == \
        (default.task.name, default.task.monitor, default.task.mode)
    module = default.task.module
    assert module.decoder is None and scratch.task.module.decoder is None  # both scored with greedy decoding
    assert (module.arch, module.sample_rate, module.n_mels, module.pretrained) == ("whisper", 16000, 80, "auto")
    # the schedule trains the encoder after its frozen epochs (a frozen-only run would not be this recipe)
    assert 0 < module.freeze_encoder_epochs < default.trainer.max_epochs
    assert (scratch.task.module.arch, scratch.task.module.n_mels, scratch.task.module.pretrained) == \
        ("bilstm_small", 40, None)


def test_presets_on_the_scratch_recipe_carry_none_of_the_whisper_keys():
    """The default's model overrides (rnn_head), `pretrained: auto` and encoder schedule are Whisper's: a preset
    of another arch that inherited them would be refused (rnn_head) or train another recipe than it says."""
    for name in SCRATCH_PRESETS:
        module = compose([f"experiment={name}"]).task.module
        assert module.arch != "whisper", name
        assert "rnn_head" not in (module.model or {}), name
        assert (module.freeze_encoder_epochs, module.encoder_lr) == (0, 1.0), name
        assert OmegaConf.to_container(module, resolve=False)["pretrained"] != "auto", name


def test_default_module_freezes_then_trains_the_encoder():
    kwargs = OmegaConf.to_container(compose([DEFAULT]).task.module, resolve=True)
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



def test_switching_only_the_arch_says_where_the_scratch_recipe_is():
    import pytest

    from zoo.errors import ZooError
    from zoo.speech.models import build_model

    model = compose([DEFAULT, "task.module.arch=bilstm_small"]).task.module.model
    with pytest.raises(ZooError, match=r"arch=bilstm_small takes no rnn_head .*experiment=speech_synth_scratch"):
        build_model("bilstm_small", 40, 5, **model)
    with pytest.raises(ZooError, match=r"arch=conformer_xs takes no hiden; it takes .*d_model"):
        build_model("conformer_xs", 40, 5, hiden=3)
