"""`python -m zoo export` for every task: round trip with parity, int8, model.json, atomic writes, one-line errors.

The CLI runs in-process (zoo.cli.main, the real argument handling and config composition) to keep the suite fast;
tests/deploy/test_serve.py and the RL play test start real subprocesses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "nlp"))
from helpers import gan_ckpt, nlp_ckpt, rl_ckpt, speech_ckpt, vision_ckpt  # noqa: E402

from zoo.cli import main  # noqa: E402
from zoo.testing import ROOT  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit's deprecation notices


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def export(*args: str) -> None:
    main(["export", *args])


def fails(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as e:
        export(*args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo: error: ") and "\n" not in err and "Traceback" not in err
    return err


def meta_of(folder: Path) -> dict:
    return json.loads((folder / "model.json").read_text())


@pytest.fixture(scope="module")
def vision(tmp_path_factory) -> Path:
    return vision_ckpt(tmp_path_factory.mktemp("vision"))


def test_vision_onnx_int8_torchscript_and_model_json(vision, capsys):
    run = vision.parent.parent
    export(f"ckpt_path={run}")  # a run dir: its best checkpoint, written to <run>/export
    out = capsys.readouterr().out
    meta = meta_of(run / "export")
    assert "parity fp32" in out and "agreement 1.0000" in out
    assert meta["task"] == "vision/resnet" and meta["exporter"] == "dynamo" and meta["file"] == "model.onnx"
    assert meta["inputs"] == [{"name": "images", "shape": ["batch", 1, 16, 16], "dtype": "float32"}]
    assert meta["preprocess"]["mean"] == [0.45] and meta["class_names"] == [str(i) for i in range(10)]
    p = meta["parity"]["fp32"]
    assert p["ok"] and p["max_abs_diff"] < 1e-4 and p["examples"] == 256 and p["metric"]["name"] == "acc"
    import hashlib

    assert meta["checkpoint"]["sha256"] == hashlib.sha256(vision.read_bytes()).hexdigest()

    # The exported file alone (ONNX Runtime, no zoo) gives the module's logits on a fresh batch size.
    import onnxruntime as ort

    from zoo.core.build import load_module
    from zoo.testing import compose

    x = torch.randn(3, 1, 16, 16)
    logits = ort.InferenceSession(str(run / "export" / "model.onnx")).run(None, {"images": x.numpy()})[0]
    module = load_module(compose(["task=vision/resnet", "task.module.arch=resnet10t"]), str(vision))
    np.testing.assert_allclose(logits, module(x).detach().numpy(), atol=1e-4)

    export(f"ckpt_path={vision}", "export.quantize=int8", "export.samples=64", f"export.out={run / 'int8'}")
    q = meta_of(run / "int8")["parity"]
    assert q["int8"]["ok"] is None and q["int8"]["agreement"] > 0.5 and "metric" in q["int8"]
    assert q["int8"]["quantization"].startswith("static") and q["int8"]["examples"] == 64
    assert (run / "int8" / "model.onnx").stat().st_size < (run / "export" / "model.onnx").stat().st_size



def test_errors_are_one_line_and_leave_nothing(vision, tmp_path, capsys, monkeypatch):
    assert "checkpoint not found" in fails(capsys, f"ckpt_path={tmp_path / 'nope.ckpt'}")
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(vision.read_bytes()[:5000])
    err = fails(capsys, f"ckpt_path={bad}")
    assert "not a zoo checkpoint" in err or "corrupt" in err
    assert "unknown export.format=tflite" in fails(capsys, f"ckpt_path={vision}", "export.format=tflite")
    assert "export.samples=x must be a positive integer" in fails(capsys, f"ckpt_path={vision}", "export.samples=x")
    assert "use it with export.format=onnx" in fails(capsys, f"ckpt_path={vision}", "export.format=torchscript",
                                                     "export.quantize=int8")
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert "cannot write the export" in fails(capsys, f"ckpt_path={vision}", f"export.out={blocker / 'sub'}")

    # Parity beyond tolerance: the earlier export stays as it was, and no temp folder is left behind.
    out = tmp_path / "exp"
    export(f"ckpt_path={vision}", f"export.out={out}", "export.format=torchscript")
    before = (out / "model.json").read_text()
    assert meta_of(out)["parity"]["torchscript"]["max_abs_diff"] == 0.0
    assert torch.jit.load(str(out / "model.ts"))(torch.randn(3, 1, 16, 16)).shape == (3, 10)
    from zoo.vision import deploy

    monkeypatch.setattr(deploy, "TOLERANCE", -1.0)
    assert "parity check failed" in fails(capsys, f"ckpt_path={vision}", f"export.out={out}",
                                          "export.format=torchscript")
    assert (out / "model.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "bad.ckpt", "exp"]


def test_nlp_onnx_with_tokenizer(tmp_path, capsys):
    from nlp_helpers import build_tiny_encoder

    ckpt = nlp_ckpt(tmp_path / "run", str(build_tiny_encoder(tmp_path / "enc")))
    export(f"ckpt_path={ckpt}")
    folder = tmp_path / "run" / "export"
    meta = meta_of(folder)
    assert [i["name"] for i in meta["inputs"]][:2] == ["input_ids", "attention_mask"]
    assert meta["inputs"][0]["shape"] == ["batch", "sequence"] and meta["label_names"] == ["negative", "positive"]
    assert meta["parity"]["fp32"]["ok"] and meta["parity"]["fp32"]["agreement"] == 1.0
    # A consumer without the zoo: the tokenizer files beside the model + ONNX Runtime, at another batch/length.
    import onnxruntime as ort
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
    enc = tok(["a great movie", "the plot was dull and the acting was worse than expected"], padding=True,
              return_tensors="np")
    sess = ort.InferenceSession(str(folder / "model.onnx"))
    logits = sess.run(None, {i.name: enc[i.name].astype(np.int64) for i in sess.get_inputs()})[0]
    from zoo.core.build import load_module
    from zoo.testing import compose

    module = load_module(compose(["task=nlp/bert", f"task.module.encoder={tmp_path / 'enc'}"]), str(ckpt))
    ref = module(**{k: torch.from_numpy(v.astype(np.int64)) for k, v in enc.items()}).detach().numpy()
    np.testing.assert_allclose(logits, ref, atol=1e-4)


def test_speech_onnx_torchscript_and_unsupported_format(tmp_path, capsys):
    ckpt = speech_ckpt(tmp_path / "run")
    export(f"ckpt_path={ckpt}")
    meta = meta_of(tmp_path / "run" / "export")
    assert meta["exporter"] == "torchscript" and meta["blank_index"] == 0 and meta["vocabulary"][0] == "<blank>"
    assert meta["inputs"][0]["shape"] == ["batch", 16, "frames"] and meta["preprocess"]["hop_length"] == 80
    p = meta["parity"]["fp32"]
    assert p["ok"] and p["agreement"] == 1.0 and p["metric"]["torch"] == p["metric"]["exported"]
    export(f"ckpt_path={ckpt}", "export.format=torchscript", f"export.out={tmp_path / 'ts'}")
    assert meta_of(tmp_path / "ts")["parity"]["torchscript"]["ok"]
    assert "does not export to exported_program" in fails(capsys, f"ckpt_path={ckpt}", "export.format=exported_program")


def test_gan_conditional_onnx(tmp_path, capsys):
    ckpt = gan_ckpt(tmp_path / "run")
    export(f"ckpt_path={ckpt}", "export.samples=32")
    meta = meta_of(tmp_path / "run" / "export")
    assert [i["name"] for i in meta["inputs"]] == ["z", "labels"] and meta["conditional"]
    assert meta["outputs"][0]["shape"] == ["batch", 1, 32, 32] and meta["parity"]["fp32"]["agreement"] == 1.0


def test_rl_onnx_plays_cartpole_without_torch(tmp_path, capsys):
    """The exported agent (normalisation folded in) plays CartPole-v1 in a plain ONNX Runtime loop, in a process
    that never imports torch, and scores exactly what the module's own deterministic policy scores."""
    ckpt = rl_ckpt(tmp_path / "run")
    export(f"ckpt_path={ckpt}")
    folder = tmp_path / "run" / "export"
    meta = meta_of(folder)
    assert meta["outputs"][0]["name"] == "action" and meta["preprocess"]["normalization"]["folded_into_graph"]
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "evidence" / "bench_deploy.py"), "play", str(folder),
                           "--episodes", "3", "--seed", "5"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    played = json.loads(proc.stdout.strip().splitlines()[-1])
    assert played["torch_imported"] is False and played["env"] == "CartPole-v1"

    from zoo.core.build import load_module
    from zoo.rl.evaluate import run_episodes
    from zoo.testing import compose

    module = load_module(compose(["task=rl/ppo", "task.module.hidden_sizes=[16,16]", "task.env.normalize_obs=true"]),
                         str(ckpt))
    policy = module.collector.policy(module.agent, deterministic=True)
    returns = [float(run_episodes(policy, "CartPole-v1", 1, 5 + i)[0][0]) for i in range(3)]
    assert played["returns"] == returns
