"""nlp/bert end to end through `python -m zoo` (subprocesses, tiny encoder written by the test, no network)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from nlp_helpers import keyword_rows, write_tsv

from zoo.testing import SIGTERM_AT, run_dirs, zoo_env

ONE = {"OMP_NUM_THREADS": "1"}  # tiny models: one thread is much faster on the shared 2-core machine
QUIET = ["trainer.enable_progress_bar=false", "callbacks.progress_bar=null", "trainer.enable_model_summary=false"]


def files_args(tmp_path: Path, tiny: str) -> list[str]:
    train = write_tsv(tmp_path / "train.tsv", keyword_rows(256, 0))
    dev = write_tsv(tmp_path / "dev.tsv", keyword_rows(64, 1))
    test = write_tsv(tmp_path / "test.tsv", keyword_rows(64, 2))
    return ["task=nlp/bert", f"task.module.encoder={tiny}", f"task.data.train_file={train}",
            f"task.data.val_file={dev}", f"task.data.test_file={test}", "task.data.batch_size=16"]


def metric(stdout: str, key: str) -> float:
    m = re.search(rf"^\s+{re.escape(key)}\s+([-\d.]+)\s*$", stdout, re.M)
    assert m, f"{key} not in the summary:\n{stdout[-3000:]}"
    return float(m.group(1))


@pytest.mark.slow
def test_train_learns_exports_predicts_and_checks_labels(run_zoo, tmp_path, tiny_encoder):
    args = files_args(tmp_path, tiny_encoder)
    proc = run_zoo("train", *args, "task.module.optimizer.lr=2e-3", "trainer.max_epochs=4", "trainer.accelerator=cpu",
                   "trainer.devices=1", *QUIET[:2], env=ONE, check=True)  # with the model table
    assert metric(proc.stdout, "test/acc") >= 0.9  # the keyword decides the label: a working loop learns it
    # the console: the zoo's one weights line, not transformers' table, bars or Lightning's always-zero FLOPs
    assert "zoo: weights from" in proc.stdout and "Trainable params" in proc.stdout, proc.stdout[-3000:]
    for noise in ("LOAD REPORT", "Loading weights", "Writing model shards", "FLOPs", "will override existing callbacks",
                  "Skipping setting a default"):
        assert noise not in proc.stdout, (noise, proc.stdout[-3000:])
    (run,) = run_dirs(tmp_path, "nlp/bert")
    hf = run / "hf_model"
    assert (hf / "config.json").is_file() and (hf / "model.safetensors").is_file() and (hf / "tokenizer.json").is_file()
    assert json.loads((hf / "config.json").read_text())["id2label"] == {"0": "neg", "1": "pos"}
    by_hand = run_zoo("export", f"ckpt_path={run}", "export.format=hf", f"export.out={tmp_path / 'hf'}", env=ONE,
                      check=True)  # the same folder from a checkpoint, through `zoo export`
    assert "as hf to" in by_hand.stdout and (tmp_path / "hf" / "model.safetensors").is_file()
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["id2label"] == {"0": "neg", "1": "pos"}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run / "tensorboard"))
    ea.Reload()
    assert "val/acc" in ea.Tags()["scalars"] and "train/tokens_per_sec" in ea.Tags()["scalars"]
    assert any(t.startswith("val/worst_mistakes") for t in ea.Tags()["tensors"]) or metric(proc.stdout, "val/acc") == 1

    (tmp_path / "in.txt").write_text("i love the movie\nthe plot hate the same\n")
    pred = run_zoo("predict", f"ckpt_path={run}", f"input={tmp_path / 'in.txt'}", env=ONE, check=True)
    rows = [json.loads(line) for line in pred.stdout.splitlines() if line.startswith("{")]
    assert [r["label"] for r in rows] == ["pos", "neg"] and all(set(r["probs"]) == {"neg", "pos"} for r in rows)

    three = write_tsv(tmp_path / "three.tsv", [("neg", "a"), ("pos", "b"), ("meh", "c")] * 4)
    bad = run_zoo("test", f"ckpt_path={run}", f"task.data.train_file={three}", f"task.data.val_file={three}",
                  f"task.data.test_file={three}", env=ONE)
    assert bad.returncode == 2, bad.stdout[-2000:]
    assert re.search(r"^zoo: error: the checkpoint's labels \['neg', 'pos'\] differ from the data's", bad.stdout, re.M)


@pytest.mark.slow
def test_sentence_pair_regression(run_zoo, tmp_path, tiny_encoder):
    lines = [json.dumps({"a": f"the cat sat {'love ' * (i % 3)}", "b": "the dog sat", "score": float(i % 3)})
             for i in range(48)]
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    proc = run_zoo("train", "task=nlp/bert", f"task.module.encoder={tiny_encoder}",
                   f"task.data.train_file={tmp_path / 'pairs.jsonl'}", "task.data.text_column=a",
                   "task.data.text_pair_column=b", "task.data.label_column=score", "task.data.task_type=regression",
                   "task.monitor=val/pearson", "trainer=debug", "trainer.max_epochs=1", *QUIET, env=ONE, check=True)
    assert metric(proc.stdout, "test/pearson") == metric(proc.stdout, "test/pearson")  # logged, not NaN
    assert "test/spearman" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("override, message", [
    ("task.data.train_file=/no/such/train.tsv", "data file not found: /no/such/train.tsv"),
    ("task.module.encoder=no-such-org/no-such-bert", "encoder 'no-such-org/no-such-bert' not found"),
])
def test_bad_input_is_one_line(run_zoo, tmp_path, override, message):
    proc = run_zoo("train", "task=nlp/bert", override, "trainer=debug", env=ONE)
    assert proc.returncode == 2, proc.stdout[-2000:]
    errors = [line for line in proc.stdout.splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in proc.stdout


@pytest.mark.slow
def test_ddp_two_cpu_processes_bf16_then_resume(run_zoo, tmp_path, tiny_encoder):
    args = files_args(tmp_path, tiny_encoder)
    ddp = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=bf16-mixed",
           "trainer.limit_train_batches=3", "trainer.limit_val_batches=2", "trainer.limit_test_batches=2",
           "trainer.num_sanity_val_steps=0"]
    run_zoo("train", *args, *ddp, "trainer.max_epochs=1", *QUIET, env=ONE, check=True, timeout=400)
    (run,) = run_dirs(tmp_path, "nlp/bert")
    proc = run_zoo("train", f"ckpt_path={run}", "trainer.max_epochs=2", env=ONE, check=True, timeout=400)
    import torch

    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    # 3 steps per epoch: the second run continued the first one's optimizer steps instead of starting over.
    assert last["global_step"] == 6 and "max_epochs=2` reached" in proc.stdout, proc.stdout[-2000:]


def predict_stdin(tmp_path: Path, run: Path, text: str):
    """`zoo predict ckpt_path=<run> input=-` with `text` piped into standard input."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "zoo", "predict", f"ckpt_path={run}", "input=-"], input=text,
                          cwd=tmp_path, env=zoo_env(tmp_path, **ONE), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)


@pytest.mark.slow
def test_resume_after_mid_epoch_sigterm_then_predict_from_stdin(run_zoo, tmp_path, tiny_encoder):
    """SIGTERM after step 3 of a 5-batch epoch: exit 143, last.ckpt mid-epoch; `ckpt_path=<run dir>` resumes to the
    end of the requested 2 epochs, with the dropout it asks for (trained and recorded, not the checkpoint's). Then the
    resumed run predicts texts piped into `input=-`, commas and all."""
    import torch

    args = [*files_args(tmp_path, tiny_encoder), "trainer=debug", "trainer.limit_train_batches=5",
            "trainer.max_epochs=2", "test_after_fit=false", "task.module.dropout=0", "task.module.attention=eager",
            *QUIET]
    stopped = run_zoo("train", *args, SIGTERM_AT, "+callbacks.sigterm.step=3", env=ONE)
    assert stopped.returncode == 143, stopped.stdout[-3000:]
    (run,) = run_dirs(tmp_path, "nlp/bert")
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 3 and ckpt["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 0

    resumed = run_zoo("train", f"ckpt_path={run}", "task.module.dropout=0.2", env=ONE)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "finished nlp/bert" in resumed.stdout and "`max_epochs=2` reached" in resumed.stdout

    pred = predict_stdin(tmp_path, run, "a gorgeous, witty, seductive movie.\n\nthe plot, hate it\n")
    assert pred.returncode == 0, pred.stdout[-3000:]
    rows = [json.loads(line) for line in pred.stdout.splitlines() if line.startswith("{")]
    assert [r["text"] for r in rows] == ["a gorgeous, witty, seductive movie.", "the plot, hate it"]
    assert all(set(r["probs"]) == {"neg", "pos"} for r in rows)

    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    # last.ckpt itself moved on (it once stayed at the SIGTERM step while a last-v1.ckpt took the new state)
    assert ckpt["global_step"] == 10 and not list(last.parent.glob("last-v*.ckpt"))
    hp = ckpt["hyper_parameters"]
    assert (hp["dropout"], hp["encoder_config"]["hidden_dropout_prob"], hp["attention"]) == (0.2, 0.2, "eager")


@pytest.mark.slow
def test_header_line_and_non_utf8_file_are_one_line_each(run_zoo, tmp_path):
    """Through the CLI, a header line read as data (it would train a class 'label') and a latin-1 file (it would
    end in a multi-line Hydra error) each stop with exit 2 and one error line, no traceback."""
    header = write_tsv(tmp_path / "h.tsv", [("label", "sentence")] + [(str(i % 2), f"text {i}") for i in range(8)])
    latin = tmp_path / "latin.tsv"
    latin.write_bytes("1\tgood\n0\tcaf\u00e9 au lait\n".encode("latin-1"))
    for path, message in [(header, "h.tsv:1: the first line looks like a header"),
                          (latin, "latin.tsv:2: byte offset 12 (0xe9) is not valid utf-8")]:
        proc = run_zoo("train", "task=nlp/bert", f"task.data.train_file={path}", "trainer=debug", env=ONE)
        assert proc.returncode == 2, proc.stdout[-2000:]
        errors = [line for line in proc.stdout.splitlines() if line.startswith("zoo: error:")]
        assert len(errors) == 1 and message in errors[0], proc.stdout[-2000:]
        assert "Traceback" not in proc.stdout and "caf" not in proc.stdout
