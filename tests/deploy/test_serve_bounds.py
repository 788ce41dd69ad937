"""What one request may cost `zoo serve`: a request of many examples runs in batches of serve.max_batch_size with the
server's memory held under a bound (read from /proc/<pid>/status), and past serve.max_items / max_tokens /
max_pixels / max_audio_s the answer is one JSON 413 naming the bound and its key. Servers on loopback, bounded in
requests and seconds."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "nlp"))
from helpers import nlp_ckpt  # noqa: E402
from test_serve import call, started_server  # noqa: E402

from zoo.kit.deploy import BadRequest, Budget, Limits  # noqa: E402

GROWTH_MB = 400  # what one request may add to the server's peak memory; the old single batch of 10,000 took GBs


def memory_mb(pid: int, field: str) -> float:
    """VmHWM (peak resident) or VmRSS (resident now) of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for {pid}")


class Watchdog(threading.Thread):
    """Kills the server once its resident memory passes `limit_mb`: a regression fails the test instead of taking
    the machine's memory."""

    def __init__(self, proc: subprocess.Popen, limit_mb: float) -> None:
        super().__init__(daemon=True)
        self.proc, self.limit_mb, self.fired, self.done = proc, limit_mb, False, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05) and self.proc.poll() is None:
            try:
                if memory_mb(self.proc.pid, "VmRSS") > self.limit_mb:
                    self.fired = True
                    self.proc.kill()
            except (OSError, AssertionError):
                return


def _texts(n: int, words: int = 100) -> bytes:
    rng = np.random.default_rng(0)
    vocab = ["the", "cat", "dog", "sat", "on", "mat", "movie", "plot", "love", "hate", "great", "dull"]
    return json.dumps({"texts": [" ".join(rng.choice(vocab, words)) for _ in range(n)]}).encode()


@pytest.mark.slow
def test_nlp_request_of_10000_texts_runs_in_batches_under_a_memory_bound(tmp_path):
    from nlp_helpers import build_tiny_encoder

    ckpt = nlp_ckpt(tmp_path / "run", str(build_tiny_encoder(tmp_path / "enc")))
    proc, port = started_server(tmp_path, ckpt, "serve.max_items=20000", "serve.max_tokens=2000000",
                                "serve.threads=1")
    try:
        assert call(port, "/predict", _texts(64), "application/json")[0] == 200  # warm: the batch size in use
        base = memory_mb(proc.pid, "VmHWM")
        dog = Watchdog(proc, base + 3 * GROWTH_MB)
        dog.start()
        body = _texts(10_000)
        assert 4_000_000 < len(body) < 10 * 2**20  # the 5 MB body, under serve.max_body_mb
        try:
            status, out = call(port, "/predict", body, "application/json", timeout=300)
        except OSError as e:  # the server gone (the watchdog's kill, or the kernel's)
            status, out = 0, {"error": repr(e)}
        dog.done.set()
        assert not dog.fired, "the server's memory passed the watchdog's bound"
        assert status == 200 and len(out["predictions"]) == 10_000, (status, str(out)[:300])
        grew = memory_mb(proc.pid, "VmHWM") - base
        print(f"one request of 10,000 texts grew the server's peak memory by {grew:.0f} MB")
        assert grew < GROWTH_MB, f"one request grew the server's peak memory by {grew:.0f} MB"
        # past serve.max_items: one JSON line naming the bound, before any text is tokenised
        status, err = call(port, "/predict", json.dumps({"texts": ["a"] * 20_001}).encode(), "application/json")
        assert status == 413 and list(err) == ["error"] and "serve.max_items=20,000" in err["error"], err
        assert call(port, "/predict", _texts(2), "application/json")[0] == 200  # still serving
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def test_nlp_handler_charges_texts_and_tokens(tmp_path):
    from nlp_helpers import build_tiny_encoder

    from zoo.nlp.deploy import Handler

    enc = build_tiny_encoder(tmp_path / "enc")
    from transformers import AutoTokenizer

    module = type("M", (), {"tokenizer": AutoTokenizer.from_pretrained(str(enc))})()
    meta = {"inputs": [{"name": "input_ids"}, {"name": "attention_mask"}], "label_names": ["a", "b"],
            "task_type": "classification", "preprocess": {"max_length": 16, "pad_token_id": 0}}
    handler = Handler(meta, None, module)
    ok = handler.decode(_texts(4, 30), "application/json", Budget(Limits(items=4, tokens=64)))
    assert ok["input_ids"].shape == (4, 16)
    for limits, says in ((Limits(items=3), "the request holds 4 texts, over serve.max_items=3"),
                         (Limits(tokens=63), "the request holds 64 tokens (after truncation to 16 per text), "
                                             "over serve.max_tokens=63")):
        with pytest.raises(BadRequest) as e:
            handler.decode(_texts(4, 30), "application/json", Budget(limits))
        assert e.value.status == 413 and says in str(e.value), str(e.value)
    # a 10 MB text: the tokenizer sees only a start that holds its first max_length tokens (it tokenised all of
    # it before truncating: 730 MB for one text), and gives the ids the whole text gives
    seen: list[int] = []
    tokenize = handler.tokenizer.__call__
    handler.tokenizer = lambda texts, *a, **k: (seen.append(max(map(len, [texts] if isinstance(texts, str)
                                                                   else texts))), tokenize(texts, *a, **k))[1]
    long = "the cat sat on the mat " * 450_000
    out = handler.decode(json.dumps({"texts": [long]}).encode(), "application/json")
    assert max(seen) < 10_000 and out["input_ids"][0].tolist() == tokenize([long], truncation=True,
                                                                           max_length=16)["input_ids"][0]
    with pytest.raises(BadRequest) as e:  # text_pairs of numbers: a 422, not the tokenizer's TypeError
        handler.decode(b'{"texts": ["a", "b"], "text_pairs": [1, 2]}', "application/json")
    assert e.value.status == 422


def test_json_nested_100k_deep_is_a_400():
    from zoo.kit.deploy import json_body

    with pytest.raises(BadRequest) as e:
        json_body(b'{"texts": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert e.value.status == 400 and "nests JSON too deeply" in str(e.value)


def _png(w: int, h: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (w, h), 128).save(buf, format="PNG")
    return buf.getvalue()


def _flac(seconds: float, rate: int = 8000, channels: int = 1) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.zeros((int(seconds * rate), channels), np.float32), rate, format="FLAC")
    return buf.getvalue()


def test_image_audio_observation_and_generation_handlers_charge_the_request():
    from zoo.gan.deploy import Handler as GanHandler
    from zoo.rl.deploy import Handler as RLHandler
    from zoo.speech.deploy import Handler as SpeechHandler
    from zoo.vision.deploy import Handler as VisionHandler

    vision = VisionHandler({"preprocess": {"color_mode": "L", "image_size": 16, "mean": [0.5], "std": [0.2]},
                            "class_names": ["a", "b"]})
    budget = Budget(Limits(items=2, pixels=1000))
    vision.decode(_png(20, 20), "image/png", budget)  # 400 pixels
    with pytest.raises(BadRequest, match="the request holds 1,200 pixels, over serve.max_pixels=1,000"):
        vision.decode(_png(40, 20), "image/png", budget)
    with pytest.raises(BadRequest, match="3 images, over serve.max_items=2"):
        vision.decode(_png(2, 2), "image/png", _spent(2))
    speech = SpeechHandler({"preprocess": {"sample_rate": 8000, "n_mels": 16, "max_seconds": 60},
                            "vocabulary": ["<blank>", "a"]})
    budget = Budget(Limits(audio_s=50.0))
    speech.decode(_flac(30), "audio/flac", budget)
    with pytest.raises(BadRequest, match=r"60\.0 seconds of audio, over serve.max_audio_s=50"):
        speech.decode(_flac(30), "audio/flac", budget)
    # an hour of silence compresses into a small FLAC: refused from its header, before a sample is decoded
    hour = _flac(3600)
    assert len(hour) < 2_000_000
    with pytest.raises(BadRequest, match="audio of 3600.0 s is longer than the 60 s"):
        speech.decode(hour, "audio/flac")
    rl = RLHandler({"env": {"observation_shape": [2], "observation_dtype": "float32",
                            "action_space": {"type": "discrete", "n": 2}}})
    with pytest.raises(BadRequest, match="5 observations, over serve.max_items=4"):
        rl.decode(json.dumps({"observations": [[0, 0]] * 5}).encode(), "application/json", Budget(Limits(items=4)))
    gan = GanHandler({"nz": 4, "conditional": False, "class_names": []})
    with pytest.raises(BadRequest, match="8 images to generate, over serve.max_items=4"):
        gan.decode(b'{"count": 8}', "application/json", Budget(Limits(items=4)))


def _spent(items: int) -> Budget:
    budget = Budget(Limits(items=items))
    budget.items(items, "images")
    return budget


def test_serve_options_for_the_bounds():
    from zoo.errors import ZooError
    from zoo.verbs.serve import check_options

    opts = check_options({"max_items": "64", "max_tokens": "4096", "max_audio_s": "30"})
    assert (opts["max_items"], opts["max_tokens"], opts["max_audio_s"]) == (64, 4096, 30.0)
    assert check_options({})["max_items"] == Limits.items
    for bad, says in (({"max_items": "0"}, "serve.max_items=0: the most examples"),
                      ({"max_tokens": "many"}, "serve.max_tokens=many is not an integer"),
                      ({"max_audio_s": "-1"}, "serve.max_audio_s=-1.0: the most seconds of audio")):
        with pytest.raises(ZooError, match=says):
            check_options(bad)


def test_batcher_runs_a_long_request_in_batches_of_max_batch_size():
    """A request of more examples than serve.max_batch_size ran as one batch (10,000 texts: one forward of them
    all); now as batches of at most that many, requests joined only while they fit, the outputs in order."""
    import asyncio

    from zoo.verbs.serve import Batcher

    sizes: list[int] = []

    def infer(arrays: dict) -> list:
        sizes.append(len(arrays["x"]))
        return [arrays["x"] * 2]

    async def go() -> list:
        batcher = Batcher(infer, {}, 4, 0.05)
        task = asyncio.create_task(batcher.run())
        try:
            return await asyncio.gather(batcher.submit({"x": np.arange(10)[:, None]}),
                                        batcher.submit({"x": np.arange(3)[:, None]}))
        finally:
            task.cancel()

    long, short = asyncio.run(go())
    assert max(sizes) <= 4 and sum(sizes) == 13, sizes
    assert long[0][:, 0].tolist() == [2 * i for i in range(10)] and short[0][:, 0].tolist() == [0, 2, 4]
