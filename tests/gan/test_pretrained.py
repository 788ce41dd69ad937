"""`task.module.pretrained=` for GANs: G and D of a digits run (grey, 32 px, 10 classes) start a run on a new RGB
ImageFolder (2 classes, 32 or 64 px); what loads is equal to the source, what cannot is fresh and named; bad values
are one line. Tiny modules and 2-step fits (seconds)."""

from __future__ import annotations

import functools

import lightning as L
import pytest
import torch
from PIL import Image

from zoo.core.checkpoint import ZooMetadata
from zoo.errors import ZooError
from zoo.gan.data import GANDataModule
from zoo.gan.module import DCGAN
from zoo.kit.pretrained import PretrainedReport

TINY = dict(arch="dcgan_small", nz=8, width=8, eval_train_steps=3, ema_decay=0.9,
            optimizer=functools.partial(torch.optim.Adam, lr=2e-4, betas=(0.5, 0.999)))


def fit(module: DCGAN, data: GANDataModule, tmp_path, name: str) -> str:  # noqa: ANN001
    trainer = L.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        default_root_dir=tmp_path, callbacks=[ZooMetadata("gan/dcgan", [], {}), PretrainedReport()])
    trainer.fit(module, datamodule=data)
    path = str(tmp_path / name)
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def digits_ckpt(tmp_path_factory) -> tuple[DCGAN, str]:
    """What a digits run saves (the fine-tune below goes through a real Trainer; this one need not train)."""
    path = tmp_path_factory.mktemp("digits") / "digits.ckpt"
    torch.manual_seed(0)
    src = DCGAN(conditional=True, **TINY, channels=1, image_size=32, num_classes=10,
                class_names=[str(i) for i in range(10)])
    torch.save({"state_dict": src.state_dict(), "hyper_parameters": dict(src.hparams), "zoo": {"task": "gan/dcgan"}},
               path)
    return src, str(path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("photos")
    gen = torch.Generator().manual_seed(0)
    for c, cls in enumerate(("cats", "dogs")):
        (root / cls).mkdir()
        for i in range(8):
            pixels = (torch.rand(40, 40, 3, generator=gen) * 255 * (0.5 + c / 2)).byte().numpy()
            Image.fromarray(pixels).save(root / cls / f"{i}.png")
    return root


def sd(m: DCGAN) -> dict[str, torch.Tensor]:
    return m.state_dict()


def test_digits_to_an_rgb_image_folder_keeps_g_and_d_and_starts_the_class_embeddings_fresh(digits_ckpt, folder,
                                                                                          tmp_path):
    src, path = digits_ckpt
    data = GANDataModule(name="folder", root=str(folder), batch_size=4, val_fraction=0.25)
    m = DCGAN(conditional=True, pretrained=path, **TINY, **data.model_kwargs())
    a, b = sd(src), sd(m)
    for name in ("generator.net.0.weight", "generator.net.3.weight", "generator.net.4.running_mean",
                 "generator_ema.net.6.weight", "discriminator.features.2.weight", "discriminator.head.weight"):
        assert torch.equal(a[name], b[name]), name
    assert b["discriminator.features.0.weight"].shape[1] == 3  # grey -> RGB: repeated, a third each
    grey = a["discriminator.features.0.weight"]
    assert torch.allclose(b["discriminator.features.0.weight"], grey.repeat(1, 3, 1, 1) / 3)
    assert torch.equal(b["generator.net.9.weight"], a["generator.net.9.weight"].repeat(1, 3, 1, 1))
    report = m.pretrained_report
    embeds = {"generator.embed.weight", "generator_ema.embed.weight", "discriminator.embed.weight"}
    assert embeds <= set(report["reinit"])
    assert b["generator.embed.weight"].shape == (2, 32) and not report["skipped_shape"]
    tuned = torch.load(fit(m, data, tmp_path, "tuned.ckpt"), weights_only=True)  # the fine-tune runs and records it
    assert tuned["pretrained_report"]["source"] == path and tuned["zoo"]["pretrained"] == path
    assert tuned["hyper_parameters"]["pretrained"] is False  # reloading never reads the source again


def test_32_to_64_pixels_aligns_g_from_its_output_and_d_from_its_input(digits_ckpt):
    src, path = digits_ckpt
    m = DCGAN(conditional=True, pretrained=path, **TINY, channels=1, image_size=64, num_classes=10,
              class_names=[str(i) for i in range(10)])
    a, b = sd(src), sd(m)
    for old, new in (("generator.net.3.weight", "generator.net.6.weight"),
                     ("generator.net.9.weight", "generator.net.12.weight"),
                     ("discriminator.features.5.weight", "discriminator.features.5.weight")):
        assert torch.equal(a[old], b[new]), new
    skipped = " ".join(m.pretrained_report["skipped_shape"] + m.pretrained_report["missing"])
    assert "discriminator.head.weight" in skipped and "generator.net.0.weight" in skipped
    assert "image size 32 -> 64" in m.pretrained_report["line"]


def test_bad_values_are_one_line(digits_ckpt, tmp_path):
    _, path = digits_ckpt
    other_task = torch.load(path, weights_only=True)
    other_task["zoo"]["task"] = "rl/ppo"
    torch.save(other_task, tmp_path / "rl.ckpt")
    (tmp_path / "cut.ckpt").write_bytes(open(path, "rb").read()[:2000])
    torch.save({"fc.weight": torch.zeros(4, 4)}, tmp_path / "resnet.pth")
    kw = dict(channels=1, image_size=32, num_classes=10, class_names=[str(i) for i in range(10)])
    cases = [(str(tmp_path / "gone.ckpt"), "not found"), (str(tmp_path / "rl.ckpt"), "is a rl/ppo checkpoint"),
             (str(tmp_path / "cut.ckpt"), "corrupt|not a zoo checkpoint"), ("true", "no hub weights"),
             (str(tmp_path / "resnet.pth"), "does not match this architecture")]
    for value, message in cases:
        with pytest.raises(ZooError, match=message) as e:
            DCGAN(pretrained=value, **TINY, **kw)
        assert str(e.value).startswith("task.module.pretrained") and "\n" not in str(e.value)
    with pytest.raises(ZooError, match="does not match this architecture"):
        DCGAN(pretrained=path, **{**TINY, "width": 32}, **kw)  # another width: nothing fits


def test_a_resume_reads_no_source_and_keeps_what_the_run_began_from(digits_ckpt, tmp_path):
    """`zoo train` builds a resumed run inside resumed_from: its checkpoint restores every tensor, so the
    `pretrained` file it began from is not read (here: one that is not there) and its report is the checkpoint's."""
    from zoo.core.resume import resumed_from

    _, path = digits_ckpt
    kw = dict(conditional=True, channels=1, image_size=32, num_classes=10, class_names=[str(i) for i in range(10)])
    m = DCGAN(pretrained=path, **TINY, **kw)
    torch.save({"state_dict": m.state_dict(), "hyper_parameters": dict(m.hparams),
                "pretrained_report": m.pretrained_report}, tmp_path / "last.ckpt")
    gone = str(tmp_path / "moved-away.ckpt")
    with pytest.raises(ZooError, match="not found"):
        DCGAN(pretrained=gone, **TINY, **kw)
    with resumed_from(str(tmp_path / "last.ckpt")):
        again = DCGAN(pretrained=gone, **TINY, **kw)
    assert again.pretrained_report == m.pretrained_report and again.pretrained_report["source"] == path
    again.load_state_dict(m.state_dict())
