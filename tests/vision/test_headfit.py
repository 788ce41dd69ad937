"""The fitted-head recipe (head_fit=lbfgs): the L2-regularised logistic regression, the L2 grid chosen by folds over
the training photos with a photo's views kept together, the flip-TTA decision, the cache of augmented views, the
keep-if-better rule and the line that says which phase was kept. Synthetic features and tiny random images."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from zoo.errors import ZooError
from zoo.kit.optim import warmup_schedule
from zoo.vision import headfit as hf
from zoo.vision.finetune import PhaseLog
from zoo.vision.module import ImageClassifier

ARCH = "resnet10t"


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/vision/conftest.py


def views(photos: int, v: int, d: int, classes: int, signal: float, noise: float, seed: int = 0,
          photo_noise: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(photos, v, 2, d) features: class centre * signal + per-photo noise (shared by its views) + per-view noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(photos) % classes
    centres = torch.randn(classes, d, generator=g)
    per_photo = photo_noise * torch.randn(photos, 1, 1, d, generator=g)
    feats = signal * centres[labels].view(photos, 1, 1, d) + per_photo + noise * torch.randn(photos, v, 2, d,
                                                                                               generator=g)
    return feats, labels


# ---------------------------------------------------------------------------------------------- the fit itself
def test_fit_logreg_reaches_the_regularised_optimum():
    feats, labels = views(30, 1, 16, 3, signal=1.0, noise=1.0)
    x = feats.reshape(-1, 16)
    y = labels.repeat_interleave(2)
    for l2 in (1e-2, 1.0):
        w, b = hf.fit_logreg(x, y, 3, l2, max_iter=300)
        w.requires_grad_(True)
        b.requires_grad_(True)
        loss = F.cross_entropy(x @ w.T + b, y) + 0.5 * l2 * (w * w).sum()
        gw, gb = torch.autograd.grad(loss, (w, b))
        assert gw.abs().max() < 1e-4 and gb.abs().max() < 1e-4  # a stationary point of a convex objective
    strong = hf.fit_logreg(x, y, 3, 10.0)[0].norm()
    weak = hf.fit_logreg(x, y, 3, 1e-3)[0].norm()
    assert strong < weak / 5


def test_the_fitted_head_works_on_raw_features():
    """Standardised for the fit, folded back: raw features through weight/bias give the fitted logits."""
    feats, labels = views(40, 2, 8, 2, signal=2.0, noise=0.5)
    feats = feats * 7 + 3  # far from standardised
    fit = hf.fit_head(feats, labels, 2, grid=(1e-2,), folds=4)
    logits = feats.reshape(-1, 8) @ fit.weight.T + fit.bias
    assert (logits.argmax(-1) == labels.repeat_interleave(4)).float().mean() > 0.95
    assert fit.photos == 40 and fit.views == 160 and fit.folds == 4


def test_folds_are_stratified_and_a_photo_never_predicts_itself():
    """Labels are random and each photo's views share a strong photo-specific signature: a split that put views of
    one photo on both sides would score near 1.0 held out; grouped folds stay near chance."""
    g = torch.Generator().manual_seed(1)
    photos, d = 60, 32
    labels = torch.arange(photos) % 2
    signature = 3 * torch.randn(photos, 1, 1, d, generator=g)
    feats = signature + 0.1 * torch.randn(photos, 3, 2, d, generator=g)
    scores, folds = hf.cross_validate(feats, labels, 2, (1e-3,), folds=5)
    assert folds == 5 and scores[0][0] < 0.75
    fold = hf.group_folds(labels, 5, seed=0)
    for k in range(5):
        assert torch.bincount(labels[fold == k], minlength=2).tolist() == [6, 6]


def test_the_l2_grid_prefers_strong_regularisation_for_few_noisy_photos():
    noisy = views(24, 1, 256, 2, signal=0.15, noise=1.0, photo_noise=1.0)
    clean = views(24, 1, 256, 2, signal=3.0, noise=0.2)
    grid = (1e-4, 1e-2, 1.0, 30.0)
    assert hf.fit_head(*noisy, 2, grid=grid).l2 > hf.fit_head(*clean, 2, grid=grid).l2


def test_choose_breaks_accuracy_ties_by_held_out_loss():
    grid = (1e-3, 1e-2, 1e-1)
    assert hf.choose([(0.9, 0.9, 0.5), (0.95, 0.95, 0.4), (0.95, 0.96, 0.3)], grid) == 2
    assert hf.choose([(0.9, 0.9, 0.1), (0.95, 0.95, 0.4), (0.94, 0.96, 0.3)], grid) == 1


def test_too_few_photos_for_folds_fit_the_middle_of_the_grid():
    feats, labels = views(2, 2, 8, 2, signal=2.0, noise=0.5)
    fit = hf.fit_head(feats, labels, 2, grid=(1e-3, 1e-2, 1e-1))
    assert fit.folds == 1 and fit.l2 == 1e-2 and not fit.flip_pays
    assert "too few photos per class" in fit.line(False)


def test_flip_tta_is_chosen_where_the_mirror_image_adds_information():
    """A view and its mirror with independent noise: their average halves it, so the folds say flip pays. A mirror
    identical to the view adds nothing: no."""
    feats, labels = views(80, 2, 64, 2, signal=0.25, noise=1.0, seed=3)
    assert hf.fit_head(feats, labels, 2, grid=(1e-1,)).flip_pays
    same = feats[:, :, :1].expand(-1, -1, 2, -1).contiguous()
    fit = hf.fit_head(same, labels, 2, grid=(1e-1,))
    assert fit.heldout_acc == fit.heldout_acc_flip and not fit.flip_pays


def test_stack_views_takes_as_many_views_as_every_photo_has():
    f = {("train", i, e, flip): torch.full((4,), float(10 * i + e)) for i in range(3) for e in range(2)
         for flip in (0, 1)}
    del f[("train", 2, 1, 1)]  # photo 2 lost its second view's mirror (a resume mid-epoch): one view each
    f[("val", 0)] = torch.zeros(4)
    feats, labels = hf.stack_views(f, {0: 1, 1: 0, 2: 1})
    assert feats.shape == (3, 1, 2, 4) and labels.tolist() == [1, 0, 1]
    assert feats[1, 0, 1, 0] == 10.0


def test_a_checkpoint_of_a_cached_epoch_carries_its_views_to_the_resumed_run():
    """Saved mid-way through the cached epochs, restored into a fresh module: the same views, so the resumed run's fit
    is the one the uninterrupted run would make; once the backbone opens, checkpoints carry no views."""
    m = lbfgs_module()
    m._features.update({("train", i, e, flip): torch.randn(8) for i in range(4) for e in range(2) for flip in (0, 1)})
    m._features[("val", 0)] = torch.zeros(8)  # recomputed after a resume, not saved
    m._train_labels.update({0: 0, 1: 1, 2: 0, 3: 1})
    saved: dict = {}
    m.on_save_checkpoint(saved)
    fresh = lbfgs_module()
    fresh.on_load_checkpoint(saved)
    assert fresh._train_labels == m._train_labels
    assert set(fresh._features) == {k for k in m._features if k[0] == "train"}
    assert all(torch.equal(fresh._features[k], m._features[k]) for k in fresh._features)
    assert torch.equal(hf.stack_views(fresh._features, fresh._train_labels)[0],
                       hf.stack_views(m._features, m._train_labels)[0])
    opened = lbfgs_module(unfreeze_epoch=0)
    opened._features.update(m._features)
    opened._train_labels.update(m._train_labels)
    later: dict = {}
    opened.on_save_checkpoint(later)
    assert "views" not in later["vision_run"]


def test_photos_a_resumed_epoch_skipped_get_their_view_before_the_fit(tmp_path):
    """After a mid-epoch resume the epoch's remaining batches come in a new shuffle, so some photos are never in them:
    their view of the epoch is computed before the fit, so every photo has every epoch's view (else the fit would
    use, for all photos, only as many views as the photo with fewest has)."""
    m = lbfgs_module()
    fits: list[hf.HeadFit] = []
    fit_head = m.fit_head
    m.fit_head = lambda: fits.append(fit_head()) or fits[-1]

    class Skip(pl.Callback):  # as the new shuffle does: photos of the epoch drop out of its batches
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if trainer.current_epoch == 1 and batch_idx + 1 == trainer.num_training_batches:
                here = set(batch[2].tolist())
                for i in [i for i in range(20) if i not in here][:5]:
                    for flip in (0, 1):
                        module._features.pop(("train", i, 1, flip), None)

    run(m, 2, tmp_path, callbacks=[Skip()])
    assert [f.views for f in fits] == [40, 80] and fits[-1].photos == 20
    assert all(("train", i, 1, flip) in m._features for i in range(20) for flip in (0, 1))


def test_bad_head_fit_options_are_one_line_errors():
    bad = [({"head_fit": "newton"}, "unknown task.module.head_fit 'newton'"),
           ({"head_fit": "lbfgs", "cache_features": False}, "head_fit=lbfgs fits the head to cached features"),
           ({"tta": "maybe"}, "unknown task.module.tta 'maybe'"),
           ({"tta": "auto"}, "tta=auto is decided by the head fit"),
           ({"head_fit": "lbfgs", "l2_grid": [0.1, -1]}, "l2_grid must be a non-empty list of positive"),
           ({"head_fit": "lbfgs", "l2_folds": 1}, "l2_folds must be at least 2")]
    for kw, message in bad:
        args = {"head_fit": "sgd", "cache_features": True, "tta": False, "l2_grid": None, "l2_folds": 5, **kw}
        with pytest.raises(ZooError, match=message):
            hf.check_options(**args)


# ---------------------------------------------------------------------------------------------- keep-if-better
def test_the_kept_epoch_is_the_first_best_so_a_tie_keeps_the_fitted_head():
    log = PhaseLog()
    for e, acc, phase in [(0, 0.90, "frozen"), (1, 0.95, "frozen"), (2, 0.95, "whole network")]:
        log.add(e, acc, phase)
    assert log.kept() == (1, 0.95, "frozen")
    assert log.kept_line() == "kept checkpoint: epoch 1, frozen (val acc 0.950); best whole network epoch 2: 0.950"
    log.add(3, 0.975, "whole network")
    assert log.kept()[0] == 3 and "best frozen epoch 1: 0.950" in log.kept_line()
    log.add(3, 0.925, "whole network")  # a resumed epoch replaces its entry
    assert log.kept()[0] == 1 and len(log.entries) == 4


# ---------------------------------------------------------------------------------------------- in a Lightning run
class Indexed(Dataset):
    """Tiny random images, two classes told apart by brightness, with sample indices (as cache_features needs)."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.y = torch.arange(n) % 2
        self.x = torch.randn(n, 3, 16, 16, generator=g) + 1.5 * self.y.view(-1, 1, 1, 1)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple:
        return self.x[i], self.y[i], i


def lbfgs_module(**kw) -> ImageClassifier:
    args = dict(arch=ARCH, num_classes=2, image_size=16, pretrained=False, finetune="gradual", unfreeze_epoch=2,
                cache_features=True, head_fit="lbfgs", tta="auto", l2_grid=[1e-2, 1.0], l2_folds=3,
                weight_decay=0.0, log_images=0, optimizer=lambda groups: torch.optim.AdamW(groups, lr=1e-3),
                scheduler=lambda opt, total_steps: warmup_schedule(opt, total_steps, kind="constant"))
    args.update(kw)
    return ImageClassifier(**args)


def run(m: ImageClassifier, epochs: int, tmp_path, callbacks: list | None = None) -> pl.Trainer:
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, monitor="val/acc", mode="max", save_top_k=1,
                                        filename="best-{epoch}")
    trainer = pl.Trainer(accelerator="cpu", max_epochs=epochs, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[ckpt, *(callbacks or [])])
    trainer.fit(m, DataLoader(Indexed(20, 0), batch_size=8, shuffle=True), DataLoader(Indexed(12, 1), batch_size=8))
    return trainer


def test_cached_epochs_hold_a_view_and_its_mirror_per_photo_and_the_head_is_fitted_to_them(tmp_path, capsys):
    m = lbfgs_module()
    passes: list[tuple[int, int]] = []
    forward_features = m.model.forward_features
    m.model.forward_features = lambda x: (passes.append((m.current_epoch, len(x))), forward_features(x))[1]
    heads: list[torch.Tensor] = []
    fits: list[hf.HeadFit] = []
    fit_head = m.fit_head
    m.fit_head = lambda: (fits.append(fit_head()), heads.append(m.model.get_classifier().weight.clone()))[0]
    backbone = {k: v.clone() for k, v in m.model.state_dict().items() if not k.startswith(m.heads)}
    run(m, 2, tmp_path)
    per_epoch = [sum(k for e, k in passes if e == epoch) for epoch in range(2)]
    flip = 12 if m.tta_flip else 0
    assert per_epoch == [2 * 20 + 12 + flip, 2 * 20]  # view + mirror of each photo, val once (and its mirror)
    assert len({k for k in m._features if k[0] == "train"}) == 20 * 2 * 2
    assert [f.views for f in fits] == [40, 80]  # the second fit sees both epochs' views
    assert torch.equal(heads[-1], m.model.get_classifier().weight)  # no optimizer step moved the fitted head
    assert all(torch.equal(v, m.model.state_dict()[k]) for k, v in backbone.items())
    out = capsys.readouterr().out
    assert "epoch 1: head fitted to 80 cached views of 20 training photos: L2 " in out
    assert "kept checkpoint: epoch " in out and ", frozen (val acc " in out


def test_the_checkpoint_kept_matches_the_line_and_carries_the_tta_choice(tmp_path, capsys):
    m = lbfgs_module(tta=True)
    trainer = run(m, 3, tmp_path)
    epoch, acc, phase = m.phases.kept()
    assert trainer.checkpoint_callback.best_model_path.endswith(f"best-epoch={epoch}.ckpt")
    assert acc == pytest.approx(float(trainer.checkpoint_callback.best_model_score))
    assert [p for _, _, p in m.phases.entries] == ["frozen", "frozen", "whole network"]
    assert f"kept checkpoint: epoch {epoch}, {phase}" in capsys.readouterr().out
    loaded = ImageClassifier.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
    assert loaded.tta_flip and loaded.phases.entries[: epoch + 1] == m.phases.entries[: epoch + 1]
    loaded.eval()
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        want = (loaded.model(x) + loaded.model(x.flip(-1))) / 2
        assert torch.allclose(loaded(x), want)


def test_cache_augmented_keeps_augmentation_and_every_photo_in_every_epoch(tmp_path):
    from PIL import Image

    from zoo.vision.data import ImageDataModule

    for split in ("train", "val"):
        for c in ("a", "b"):
            (tmp_path / split / c).mkdir(parents=True)
            for i in range(5):
                Image.effect_noise((80, 80), 60 + i).convert("RGB").save(tmp_path / split / c / f"{i}.png")
    kw = dict(root=str(tmp_path), arch=ARCH, image_size=64, batch_size=4, num_workers=0, pretrained=False,
              cache_features=True)
    plain = ImageDataModule("imagefolder", **kw)
    assert not plain.augment  # cached features stand for fixed inputs
    dm = ImageDataModule("imagefolder", cache_augmented=True, **kw)
    dm.trainer = pl.Trainer(accelerator="cpu", logger=False)
    dm.setup("fit")
    assert dm.augment and not dm.train_dataloader().drop_last
    torch.manual_seed(0)
    first, second = dm.train_set[0][0], dm.train_set[0][0]
    assert dm.train_set[0][2] == 0 and not torch.equal(first, second)  # a new random view each time
