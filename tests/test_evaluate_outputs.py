"""Where `zoo test` writes, what `zoo predict` does with a bad file in a folder, what `zoo serve` answers to a broken
upload, and what an int8 export's parity measures: defects the drills found (each test failed before its fix)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "deploy"))
from helpers import vision_ckpt  # noqa: E402


@pytest.fixture(scope="module")
def vision(tmp_path_factory) -> Path:
    """A tiny vision checkpoint, as `zoo train` writes it, without training (tests/deploy/helpers.py)."""
    return vision_ckpt(tmp_path_factory.mktemp("run") / "outputs" / "vision" / "resnet" / "2026-01-01_00-00-00_0001")


@pytest.mark.slow
def test_a_tests_logs_go_inside_the_run_it_tests(run_zoo, vision, tmp_path):
    """`zoo test` left outputs/<task>/test_<date>/ beside the training runs."""
    run = vision.parent.parent
    run_zoo("test", f"ckpt_path={run}", "trainer.limit_test_batches=2", check=True)
    (test_dir,) = (run / "test").iterdir()
    assert (test_dir / "tensorboard").is_dir() and (test_dir / "env.json").is_file()
    assert not [p.name for p in run.parent.iterdir() if p.name.startswith("test_")]
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_a_bad_image_in_a_folder_gets_its_own_line(run_zoo, vision, tmp_path):
    """One corrupt JPEG aborted the whole folder."""
    from PIL import Image

    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(3):
        Image.fromarray((np.random.default_rng(i).random((16, 16)) * 255).astype(np.uint8)).save(photos / f"{i}.png")
    (photos / "1_broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    proc = run_zoo("predict", f"ckpt_path={vision}", f"input={photos}", check=True)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert sorted(Path(r["file"]).name for r in rows) == ["0.png", "1.png", "1_broken.jpg", "2.png"]
    (broken,) = [r for r in rows if r["file"].endswith("1_broken.jpg")]
    assert set(broken) == {"file", "error"} and "cannot read image" in broken["error"]
    assert all("top_k" in r for r in rows if r is not broken)
    line = run_zoo("predict", f"ckpt_path={vision}", f"input={photos / '1_broken.jpg'}").stdout  # a file alone: fails
    assert "zoo: error: cannot read image" in line


def test_a_folder_of_texts_reports_an_unreadable_file_and_reads_the_others(tmp_path):
    from zoo.errors import ZooError
    from zoo.nlp.predict import read_inputs

    (tmp_path / "a.txt").write_text("good film\n")
    (tmp_path / "b.txt").write_bytes("na\u00efve caf\u00e9\n".encode("latin-1"))
    errors: list[dict] = []
    assert read_inputs(str(tmp_path), "utf-8", errors) == [("good film", None)]
    assert [Path(e["file"]).name for e in errors] == ["b.txt"] and "predict.encoding" in errors[0]["error"]
    with pytest.raises(ZooError):  # without a place for errors (a caller that wants all or nothing)
        read_inputs(str(tmp_path), "utf-8")


def test_a_garbled_upload_is_one_400_without_console_noise(capfd):
    """The answer suggested the route already called, and python-multipart printed 'Expected boundary character 45,
    got 103 at index 2' on the server's console."""
    from fastapi.testclient import TestClient

    from zoo.verbs.serve import OPTIONS, make_app

    class Handler:
        content_types, pad = ("image/",), {}

        def decode(self, body: bytes, ctype: str) -> dict:
            return {"x": np.zeros((1, 2), np.float32)}

        def encode(self, outputs: list, inputs: dict) -> dict:
            return {"n": len(outputs[0])}

    app = make_app({"task": "t", "backend": "torch"}, Handler(), lambda a: [a["x"]], dict(OPTIONS))
    with TestClient(app) as client:
        r = client.post("/predict", content=b"garbage", headers={"content-type": "multipart/form-data; boundary=xyz"})
        assert r.status_code == 400
        message = r.json()["error"]
        assert message.startswith("the multipart body does not parse") and "curl -F file=@" in message
        assert "use POST /predict" not in message
        assert "use POST /predict" in client.get("/nope").json()["error"]  # a wrong route still names the right ones
    assert "Expected boundary" not in "".join(capfd.readouterr())


@pytest.mark.slow
def test_int8_parity_is_on_held_apart_examples_and_states_its_criterion(vision, capsys):
    """Parity was computed on the examples that calibrated the model, and listed a tolerance 0.001 not applied."""
    from zoo.cli import main

    out = vision.parent.parent / "int8"
    main(["export", f"ckpt_path={vision}", "export.quantize=int8", "export.samples=32", f"export.out={out}"])
    q = json.loads((out / "model.json").read_text())["parity"]["int8"]
    assert q["held_apart"] is True and q["examples"] == 32 and "tolerance" not in q and q["ok"] is None
    assert q["criterion"].startswith("none enforced") and "calibrated on 32 validation examples" in q["quantization"]
    assert "32 held-apart real examples" in capsys.readouterr().out
