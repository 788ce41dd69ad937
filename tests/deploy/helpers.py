"""Tiny modules saved as real zoo checkpoints (no training): what `zoo export` and `zoo serve` read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from zoo.testing import compose


def save_checkpoint(module: Any, run_dir: Path, task: str, overrides: list[str]) -> Path:
    """A checkpoint as `zoo train` writes it (state dict, hparams, the module's own extras, zoo metadata) into
    <run_dir>/checkpoints/best-tiny.ckpt, so run-dir resolution and <run dir>/export work as after training."""
    from zoo.base import plain

    cfg = compose([f"task={task}", *overrides])
    hp = dict(module.hparams)
    hp["pretrained"] = False if "pretrained" in hp else hp.get("pretrained")
    ckpt = {"state_dict": module.state_dict(), "hyper_parameters": {k: v for k, v in hp.items() if v is not None
                                                                    or k != "pretrained"},
            "pytorch-lightning_version": "2.6.6", "epoch": 0, "global_step": 0,
            "zoo": {"task": task, "overrides": [f"task={task}", *overrides], "config": plain(cfg),
                    "version": "0.1.0"}}
    module.on_save_checkpoint(ckpt)
    path = run_dir / "checkpoints" / "best-tiny.ckpt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path


def vision_ckpt(root: Path) -> Path:
    from zoo.vision.module import ImageClassifier

    m = ImageClassifier(arch="resnet10t", num_classes=10, in_chans=1, image_size=16, mean=[0.45], std=[0.22],
                        pretrained=False, class_names=[str(i) for i in range(10)])
    return save_checkpoint(m, root, "vision/resnet", ["task.data.image_size=16", "task.module.arch=resnet10t",
                                                      "task.module.pretrained=false"])


def nlp_ckpt(root: Path, encoder: str) -> Path:
    from zoo.nlp.data import TextDataModule
    from zoo.nlp.module import SequenceClassifier

    m = SequenceClassifier(encoder, **TextDataModule(encoder, builtin_size=64).model_kwargs())
    return save_checkpoint(m, root, "nlp/bert", [f"task.module.encoder={encoder}", "task.data.builtin_size=64"])


def rl_ckpt(root: Path, normalize: bool = True) -> Path:
    from zoo.rl.module import PPO

    m = PPO(env={"num_envs": 2, "normalize_obs": normalize}, num_steps=16, num_minibatches=2, total_timesteps=64,
            hidden_sizes=[16, 16])
    if normalize:  # statistics that matter: folding them into the graph must reproduce the module's policy
        m.collector.obs_rms.update(torch.randn(256, 4) * torch.tensor([1.0, 2.0, 0.1, 1.5]) + 0.3)
    return save_checkpoint(m, root, "rl/ppo", ["task.env.num_envs=2", "task.module.hidden_sizes=[16,16]",
                                               f"task.env.normalize_obs={str(normalize).lower()}"])


def speech_ckpt(root: Path) -> Path:
    import json

    import numpy as np
    import soundfile as sf

    from zoo.speech.data import ManifestDataModule
    from zoo.speech.module import CTCRecognizer

    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(8):  # sine bursts standing in for speech (as tests/speech do)
        text, freq = ("one", 440.0) if i % 2 == 0 else ("two", 880.0)
        t = np.arange(int(8000 * (0.3 + 0.05 * i))) / 8000
        sf.write(root / f"{i}.wav", (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32), 8000)
        rows.append({"audio_filepath": f"{i}.wav", "duration": len(t) / 8000, "text": text})
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    data = ManifestDataModule(train_manifest=f"{root}/train.jsonl", val_manifest=f"{root}/val.jsonl",
                              sample_rate=8000, chars="one two")
    m = CTCRecognizer(arch="bilstm_small", sample_rate=8000, n_mels=16, model={"hidden": 16, "layers": 1},
                      **data.model_kwargs())
    return save_checkpoint(m, root, "speech/ctc", [
        "experiment=speech_fsdd_manifests", "task.module.model={hidden: 16, layers: 1}", "task.module.n_mels=16",
        "task.data.batch_size=4", "task.data.chars='one two'", f"task.data.train_manifest={root}/train.jsonl",
        f"task.data.val_manifest={root}/val.jsonl"])


def gan_ckpt(root: Path) -> Path:
    from zoo.gan.module import DCGAN

    m = DCGAN(arch="dcgan_small", nz=8, width=8, conditional=True, num_classes=10,
              class_names=[str(i) for i in range(10)], num_fixed=16)
    return save_checkpoint(m, root, "gan/dcgan", ["task.module.nz=8", "task.module.width=8",
                                                  "task.module.conditional=true", "task.module.num_fixed=16"])
