"""speech/ctc with a transformers encoder (wav2vec2 / HuBERT / WavLM): a tiny randomly initialised one, written by
the test as save_pretrained writes a real one, so everything runs offline."""

from __future__ import annotations

import json

import pytest
import torch

from zoo.core.resume import resumed_from
from zoo.errors import ZooError
from zoo.speech.models import list_models
from zoo.speech.models.hf import layer_id, param_groups, write_tiny_encoder
from zoo.speech.module import CTCRecognizer
from zoo.testing import TINY, run_dirs

TOKENS = ["<blank>", " ", "e", "n", "o", "t", "w"]
QUIET = {"hidden_dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0, "feat_proj_dropout": 0.0,
         "final_dropout": 0.0, "layerdrop": 0.0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("encoders")
    return {arch: str(write_tiny_encoder(root / arch, arch)) for arch in ("wav2vec2", "hubert", "wavlm")}


@pytest.mark.parametrize("arch", ["wav2vec2", "hubert", "wavlm"])
def test_encoder_from_folder_and_rebuilt_from_checkpoint_hparams(tiny, arch):
    module = CTCRecognizer(vocab=TOKENS, arch=arch, pretrained=tiny[arch]).eval()
    assert "new CTC head of 7 characters" in module.pretrained_report["line"]
    wave, lengths = torch.randn(2, 8000) * 0.1, torch.tensor([8000, 4000])
    log_probs, out = module(wave, lengths)
    assert log_probs.shape == (2, 99, 7) and out.tolist() == [99, 49]  # ~80 samples per frame (conv arithmetic)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(2, 99), atol=1e-5)
    # What load_from_checkpoint does: pretrained is False, the config comes from hparams, the weights follow.
    hp = json.loads(json.dumps(module.hparams.encoder_config))  # plain JSON values
    again = CTCRecognizer(vocab=TOKENS, arch=arch, pretrained=False, encoder_config=hp).eval()
    again.load_state_dict(module.state_dict())
    assert torch.equal(again(wave, lengths)[0], log_probs)


def test_a_resume_takes_the_architecture_from_its_checkpoint_not_the_encoder_folder(tiny, tmp_path):
    """A resumed run (built inside resumed_from) gets its encoder's architecture from the checkpoint, as
    load_from_checkpoint does: the folder it began from is not read, and may be gone."""
    module = CTCRecognizer(vocab=TOKENS, arch="hubert", pretrained=tiny["hubert"])
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                "pretrained_report": module.pretrained_report}, tmp_path / "last.ckpt")
    with resumed_from(str(tmp_path / "last.ckpt")):
        again = CTCRecognizer(vocab=TOKENS, arch="hubert", pretrained=str(tmp_path / "moved-away"))
    assert again.hparams.encoder_config == module.hparams.encoder_config
    assert again.pretrained_report == module.pretrained_report
    again.load_state_dict(module.state_dict())  # the same architecture: every tensor fits
    with pytest.raises(ZooError, match="moved-away"):
        CTCRecognizer(vocab=TOKENS, arch="hubert", pretrained=str(tmp_path / "moved-away"))


def test_feature_encoder_frozen_and_layer_wise_lr_decay(tiny):
    module = CTCRecognizer(vocab=TOKENS, arch="wav2vec2", pretrained=tiny["wav2vec2"], layer_decay=0.5)
    frozen = {n for n, p in module.model.named_parameters() if not p.requires_grad}
    assert frozen and all(".feature_extractor." in n for n in frozen)
    assert layer_id("hf.wav2vec2.feature_extractor.conv_layers.1.conv.weight", 2) == 0
    assert layer_id("hf.wav2vec2.encoder.layers.1.attention.k_proj.weight", 2) == 2
    assert layer_id("hf.lm_head.weight", 2) == 3
    groups = param_groups(module.model, weight_decay=0.01, layer_decay=0.5)
    scales = {g["lr_scale"] for g in groups}
    assert scales == {0.125, 0.25, 0.5, 1.0}  # feature projection, layer 0, layer 1, head
    head = [g for g in groups if any(p is module.model.head.weight for p in g["params"])]
    assert head[0]["lr_scale"] == 1.0 and head[0]["weight_decay"] == 0.01
    assert sum(len(g["params"]) for g in groups) == sum(p.requires_grad for p in module.model.parameters())
    unfrozen = CTCRecognizer(vocab=TOKENS, arch="wav2vec2", pretrained=tiny["wav2vec2"], freeze_feature_encoder=False)
    assert all(p.requires_grad for p in unfrozen.model.parameters())


def test_time_masking_runs_in_training_only(tiny):
    module = CTCRecognizer(vocab=TOKENS, arch="wav2vec2", pretrained=tiny["wav2vec2"],
                           model={**QUIET, "mask_time_prob": 0.5, "mask_time_length": 2})
    assert module.model.hf.config.mask_time_prob == 0.5
    wave, lengths = torch.randn(1, 8000) * 0.1, torch.tensor([8000])
    module.eval()
    ref = module(wave, lengths)[0]
    assert torch.equal(module(wave, lengths)[0], ref)  # no dropout, no masking: deterministic
    module.train()
    torch.manual_seed(0)
    assert not torch.allclose(module(wave, lengths)[0], ref)  # only the masking differs (dropouts are 0)


def test_bad_sources_are_one_line(tiny, tmp_path):
    with pytest.raises(ZooError, match="no config.json"):
        CTCRecognizer(vocab=TOKENS, arch="wav2vec2", pretrained=str(tmp_path))
    with pytest.raises(ZooError, match="not in the Hugging Face cache and the hub is unreachable"):
        CTCRecognizer(vocab=TOKENS, arch="wav2vec2", pretrained="nobody/no-such-encoder")
    with pytest.raises(ZooError, match="is a hubert model; set task.module.arch=hubert"):
        CTCRecognizer(vocab=TOKENS, arch="wav2vec2", pretrained=tiny["hubert"])
    assert {"wav2vec2", "hubert", "wavlm", "bilstm_small"} <= set(list_models())


@pytest.mark.slow
def test_train_resume_test_predict_export_bench(run_zoo, tmp_path, tiny, tone_manifest):
    """The tiny encoder through every verb: fine-tune from its folder, resume, test, predict, ONNX export (encoder
    and CTC head in one graph, waveform in) with parity, and bench."""
    env = {"OMP_NUM_THREADS": "1"}
    args = ["experiment=speech_wav2vec2_finetune", f"task.module.pretrained={tiny['wav2vec2']}",
            "task.data.batch_size=4", "logger=csv", *tone_manifest]
    run_zoo("train", *TINY, *args, check=True, env=env)
    run = run_dirs(tmp_path, "speech/ctc")[-1]
    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["hyper_parameters"]["pretrained"] is False and saved["hyper_parameters"]["encoder_config"]
    run_zoo("train", f"ckpt_path={run}", "trainer.max_epochs=2", check=True, env=env)
    after = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert after["epoch"] > saved["epoch"]
    ckpt = run / "checkpoints" / "last.ckpt"
    assert "test/cer" in run_zoo("test", f"ckpt_path={ckpt}", check=True, env=env).stdout
    pred = run_zoo("predict", f"ckpt_path={ckpt}", f"input={tmp_path / '0.wav'}", check=True, env=env).stdout
    row = json.loads([line for line in pred.splitlines() if line.startswith("{")][0])
    assert row["duration"] == pytest.approx(0.3) and isinstance(row["text"], str)
    run_zoo("export", f"ckpt_path={ckpt}", f"export.out={tmp_path / 'onnx'}", "export.samples=8", check=True, env=env)
    meta = json.loads((tmp_path / "onnx" / "model.json").read_text())
    assert [i["name"] for i in meta["inputs"]] == ["wave", "lengths"] and meta["preprocess"]["input"] == "waveform"
    assert meta["parity"]["fp32"]["ok"] and meta["parity"]["fp32"]["agreement"] == 1.0
    bench = run_zoo("bench", *args, "bench.batch_size=[2]", "bench.steps=2", "bench.warmup=1", env=env)
    assert bench.returncode == 0, bench.stdout[-3000:]
