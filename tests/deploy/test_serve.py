"""`python -m zoo serve`: a real server in a subprocess on a free loopback port (bounded in time and requests), and
each domain's request decoding with its 4xx answers."""

from __future__ import annotations

import io
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from helpers import vision_ckpt  # noqa: E402

from zoo.kit.deploy import BadRequest  # noqa: E402
from zoo.testing import zoo_env  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port: int, path: str, body: bytes | None = None, ctype: str | None = None,
         timeout: float = 30) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST" if body is not None
                                 else "GET", headers={"content-type": ctype} if ctype else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def png(size: int = 20) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray((np.random.default_rng(0).random((size, size)) * 255).astype(np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def started_server(where: Path, ckpt: Path, *options: str) -> tuple[subprocess.Popen, int]:
    """`zoo serve ckpt_path=<ckpt> <options>` on a free loopback port, once its /health answers 200 (two minutes at
    most; the console in the failure when it exits first)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "zoo", "serve", f"ckpt_path={ckpt}", f"serve.port={port}", *options],
                            cwd=where, env=zoo_env(where, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while True:
        try:
            if call(port, "/health")[0] == 200:
                return proc, port
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise AssertionError(f"server did not come up:\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.5)


@pytest.mark.slow
def test_server_endpoints_bad_requests_and_sigterm_drain(tmp_path):
    ckpt = vision_ckpt(tmp_path / "run")
    proc, port = started_server(tmp_path, ckpt, "serve.max_body_mb=0.05", "serve.batch_timeout_ms=50")
    try:
        status, meta = call(port, "/metadata")
        assert status == 200 and meta["task"] == "vision/resnet" and meta["class_names"][0] == "0"
        status, out = call(port, "/predict", png(), "image/png")
        assert status == 200 and out["label"] in meta["class_names"] and len(out["top_k"]) == 5
        boundary = "zooboundary"
        form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.png\"\r\n"
                f"Content-Type: image/png\r\n\r\n").encode() + png() + f"\r\n--{boundary}--\r\n".encode()
        status, upload = call(port, "/predict", form, f"multipart/form-data; boundary={boundary}")
        assert status == 200 and upload["top_k"] == out["top_k"]
        bad = {"wrong type": (b"hello", "text/plain", 415), "undecodable": (b"not an image", "image/png", 400),
               "oversize": (b"\0" * 100_000, "image/png", 413)}
        for name, (body, ctype, code) in bad.items():
            status, err = call(port, "/predict", body, ctype)
            assert status == code and list(err) == ["error"] and "\n" not in err["error"], name
        assert call(port, "/nowhere")[0] == 404 and "error" in call(port, "/nowhere")[1]
        assert call(port, "/predict", png(), "image/png")[0] == 200  # still serving

        # SIGTERM with requests in flight: every one is answered, then the server exits 0.
        results: list[int] = []
        threads = [threading.Thread(target=lambda: results.append(call(port, "/predict", png(40), "image/png")[0]))
                   for _ in range(6)]
        for t in threads:
            t.start()
        time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(60)
        assert proc.wait(60) == 0
        assert results == [200] * 6
        assert "server stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_handlers_reject_bad_requests_with_4xx():
    from zoo.gan.deploy import Handler as GanHandler
    from zoo.rl.deploy import Handler as RLHandler
    from zoo.speech.deploy import Handler as SpeechHandler

    rl = RLHandler({"env": {"observation_shape": [4], "observation_dtype": "float32",
                            "action_space": {"type": "discrete", "n": 2}}})
    assert rl.decode(b'{"observation": [0, 0.1, 0, 0]}', "application/json")["obs"].shape == (1, 4)
    for body, code in ((b'{"observation": [1, 2]}', 422), (b"{oops", 400), (b'[1, 2]', 422),
                       (b'{"observation": "abc"}', 422)):
        with pytest.raises(BadRequest) as e:
            rl.decode(body, "application/json")
        assert e.value.status == code
    gan = GanHandler({"nz": 4, "conditional": True, "class_names": ["a", "b"]})
    assert gan.decode(b'{"count": 3, "label": "b"}', "application/json")["labels"].tolist() == [1, 1, 1]
    for body in (b'{"count": 0}', b'{"count": 1000}', b'{"label": "z"}'):
        with pytest.raises(BadRequest) as e:
            gan.decode(body, "application/json")
        assert e.value.status == 422
    speech = SpeechHandler({"preprocess": {"sample_rate": 8000, "n_mels": 16}, "vocabulary": ["<blank>", "a"]})
    with pytest.raises(BadRequest) as e:
        speech.decode(b"RIFF garbage", "audio/wav")
    assert e.value.status == 400
    # a Whisper export's limit is its window less the silence it adds (29.4 s): a 29.8 s clip was an HTTP 500
    whisper = SpeechHandler({"preprocess": {"sample_rate": 16000, "input": "waveform", "max_seconds": 29.4},
                             "vocabulary": ["<blank>", "a"]})
    for seconds, says in ((29.8, "audio of 29.8 s is longer than the 29.4 s"), (0.0, "the audio is empty")):
        with pytest.raises(BadRequest) as e:
            whisper.decode(_wav(seconds), "audio/wav")
        assert e.value.status == 422 and says in str(e.value)


def _wav(seconds: float) -> bytes:
    import io

    import soundfile as sf

    out = io.BytesIO()
    sf.write(out, np.zeros(int(seconds * 16000), np.float32), 16000, format="WAV")
    return out.getvalue()


def test_pad_concat_and_options():
    from zoo.errors import ZooError
    from zoo.verbs.serve import check_options, check_port, pad_concat

    a, b = np.ones((1, 3), dtype=np.int64), np.ones((2, 5), dtype=np.int64)
    out = pad_concat([a, b], 7)
    assert out.shape == (3, 5) and out[0].tolist() == [1, 1, 1, 7, 7]
    assert check_options({"port": "9000"})["port"] == 9000
    assert check_options({"threads": "null", "drain_s": "0"})["threads"] is None
    for bad, says in (({"port": "x"}, "serve.port=x is not an integer; e.g. serve.port=8000"),
                      ({"port": "99999"}, "serve.port=99999: use a port in 1..65535"),
                      ({"max_batch_size": "0"}, "serve.max_batch_size=0: a batch holds at least 1"),
                      ({"batch_timeout_ms": "soon"}, "serve.batch_timeout_ms=soon is not a number"),
                      ({"threads": "0"}, "serve.threads=0: torch threads, >= 1"),
                      ({"prot": "1"}, "unknown serve option serve.prot"), ({"workers": "2"}, "serve.workers=1 only"),
                      ({"backend": "tensorrt"}, "unknown serve.backend=tensorrt")):
        with pytest.raises(ZooError) as e:
            check_options(bad)
        assert says in str(e.value), str(e.value)
    with socket.socket() as taken:  # a port in use: one line before any model is loaded
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ZooError, match="cannot listen on 127.0.0.1"):
            check_port(taken.getsockname()[1])
