"""Fitting a classifier head to cached backbone features to convergence: the linear-probe protocol.

An L2-regularised multinomial logistic regression, fitted full-batch by L-BFGS, its L2 strength picked from a grid
by k-fold cross-validation over the training photos (never the validation split), with all views of one photo (its
augmented crops and their mirror images) kept in the same fold, so a photo never helps predict itself. The same
folds say whether averaging a view's logits with its mirror image's (flip test-time augmentation) pays.

Features are standardised for the fit (a grid of L2 strengths then means the same on any backbone); the result is
folded back into a plain linear layer on the raw features.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

L2_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)


@dataclass
class HeadFit:
    weight: torch.Tensor  # (classes, features), on raw features
    bias: torch.Tensor    # (classes,)
    l2: float
    folds: int
    heldout_acc: float      # cross-validated accuracy of single views at the chosen L2
    heldout_acc_flip: float  # the same, each view's logits averaged with its mirror image's
    flip_pays: bool
    views: int
    photos: int

    def line(self, tta: bool) -> str:
        cv = (f"L2 {self.l2:g} by {self.folds}-fold split of the training photos (held-out acc {self.heldout_acc:.3f}"
              f", with flip {self.heldout_acc_flip:.3f})" if self.folds > 1 else f"L2 {self.l2:g} (no split: too few "
              "photos per class)")
        return (f"head fitted to {self.views} cached views of {self.photos} training photos: {cv}; "
                f"flip TTA {'on' if tta else 'off'}")


def fit_logreg(x: torch.Tensor, y: torch.Tensor, num_classes: int, l2: float,
               init: tuple[torch.Tensor, torch.Tensor] | None = None, max_iter: int = 100) -> tuple:
    """Minimise mean cross-entropy + l2/2 * |W|^2 over (W, b) on features x (n, d); returns (W, b)."""
    d = x.shape[1]
    w = (init[0].clone() if init else torch.zeros(num_classes, d)).requires_grad_(True)
    b = (init[1].clone() if init else torch.zeros(num_classes)).requires_grad_(True)
    opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=max_iter, tolerance_grad=1e-6, tolerance_change=1e-9,
                            history_size=20, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(x @ w.T + b, y) + 0.5 * l2 * (w * w).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    return w.detach(), b.detach()


def group_folds(labels: torch.Tensor, folds: int, seed: int) -> torch.Tensor:
    """A fold number per photo, photos of each class dealt round-robin after a seeded shuffle (stratified)."""
    out = torch.empty(len(labels), dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    for c in labels.unique():
        idx = (labels == c).nonzero().flatten()
        idx = idx[torch.randperm(len(idx), generator=gen)]
        out[idx] = torch.arange(len(idx)) % folds
    return out


def _standardise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    return (x - mean) / std, mean, std


def cross_validate(feats: torch.Tensor, labels: torch.Tensor, num_classes: int, grid: tuple[float, ...],
                   folds: int, seed: int = 0, max_iter: int = 50) -> tuple[list[tuple[float, float, float]], int]:
    """feats (photos, views, 2, d): views x (view, mirror) per photo; labels (photos,). Per L2 in grid:
    (held-out acc of single views, with flip averaging, mean held-out loss). Folds: as many as the rarest class
    allows, at most `folds`."""
    folds = min(folds, int(torch.bincount(labels, minlength=num_classes).min()))
    if folds < 2:
        return [], folds
    n, v, _, d = feats.shape
    fold = group_folds(labels, folds, seed)
    hits = torch.zeros(len(grid), 3, dtype=torch.float64)  # single acc, flip acc, loss: sums over held-out views
    for k in range(folds):
        tr, te = fold != k, fold == k
        xtr, mean, std = _standardise(feats[tr].reshape(-1, d))
        ytr = labels[tr].repeat_interleave(2 * v)
        xte = (feats[te] - mean) / std  # (m, v, 2, d)
        yte = labels[te]
        init = None
        for i, l2 in sorted(enumerate(grid), key=lambda t: -t[1]):  # strong to weak: each fit warm-starts the next
            init = fit_logreg(xtr, ytr, num_classes, l2, init, max_iter=max_iter)
            logits = xte @ init[0].T + init[1]  # (m, v, 2, classes)
            want = yte.view(-1, 1, 1).expand(-1, v, 2)
            hits[i, 0] += (logits.argmax(-1) == want).sum()
            hits[i, 1] += 2 * (logits.mean(2).argmax(-1) == want[..., 0]).sum()
            hits[i, 2] += F.cross_entropy(logits.reshape(-1, num_classes), want.reshape(-1), reduction="sum")
    total = n * v * 2
    return [(float(a / total), float(f / total), float(loss / total)) for a, f, loss in hits], folds


def choose(scores: list[tuple[float, float, float]], grid: tuple[float, ...]) -> int:
    """The L2 with the best held-out accuracy; ties go to the lower held-out loss."""
    return max(range(len(grid)), key=lambda i: (round(scores[i][0], 9), -scores[i][2]))


def fit_head(feats: torch.Tensor, labels: torch.Tensor, num_classes: int, grid: tuple[float, ...] = L2_GRID,
             folds: int = 5, seed: int = 0) -> HeadFit:
    """Cross-validate the L2 strength, then fit all views of all photos with it; weights on raw features."""
    scores, used = cross_validate(feats, labels, num_classes, grid, folds, seed)
    best = choose(scores, grid) if scores else len(grid) // 2
    l2 = grid[best]
    n, v, _, d = feats.shape
    x, mean, std = _standardise(feats.reshape(-1, d))
    w, b = fit_logreg(x, labels.repeat_interleave(2 * v), num_classes, l2, max_iter=300)
    weight = w / std  # logits = ((f - mean) / std) W^T + b = f (W / std)^T + (b - W (mean / std))
    bias = b - (w * (mean / std)).sum(1)
    single, flip = (scores[best][0], scores[best][1]) if scores else (float("nan"), float("nan"))
    return HeadFit(weight, bias, l2, used, single, flip, bool(scores) and flip > single, n * v * 2, n)


def stack_views(features: dict[tuple, torch.Tensor], labels: dict[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Cached training views {("train", photo, epoch, flip): pooled} -> (photos, views, 2, d) and labels (photos,).

    Every photo gets as many views as the photo with fewest has (all, unless a resume mid-epoch lost some of the
    cache), so the tensor is rectangular; photos with none are left out."""
    per_photo: dict[int, dict[int, list]] = {}
    for key, f in features.items():
        if key[0] == "train" and len(key) == 4:
            per_photo.setdefault(key[1], {}).setdefault(key[2], [None, None])[key[3]] = f
    complete = {i: [pair for _, pair in sorted(views.items()) if pair[1] is not None and pair[0] is not None]
                for i, views in per_photo.items()}
    photos = sorted(i for i, views in complete.items() if views)
    if not photos:
        raise ValueError("no cached training views to fit the head to")
    v = min(len(complete[i]) for i in photos)
    feats = torch.stack([torch.stack([torch.stack(pair) for pair in complete[i][:v]]) for i in photos])
    return feats.float(), torch.tensor([labels[i] for i in photos])


def pack_views(features: dict[tuple, torch.Tensor], labels: dict[int, int]) -> dict[str, torch.Tensor]:
    """The cached training views and their labels as plain tensors, for a checkpoint: a resumed run fits the head to
    the views cached before the stop too, not only to those cached after it."""
    keys = [k for k in features if k[0] == "train" and len(k) == 4]
    photos = sorted(labels)
    return {"keys": torch.tensor([k[1:] for k in keys], dtype=torch.long).view(-1, 3),
            "feats": torch.stack([features[k] for k in keys]) if keys else torch.empty(0),
            "photos": torch.tensor(photos, dtype=torch.long), "labels": torch.tensor([labels[i] for i in photos])}


def unpack_views(state: dict[str, torch.Tensor]) -> tuple[dict[tuple, torch.Tensor], dict[int, int]]:
    """pack_views' inverse: ({("train", photo, epoch, flip): pooled}, {photo: class})."""
    features = {("train", *map(int, k)): f for k, f in zip(state["keys"].tolist(), state["feats"])}
    return features, dict(zip(state["photos"].tolist(), state["labels"].tolist()))


def check_options(head_fit: str, cache_features: bool, tta: bool | str, l2_grid: list[float] | None,
                  l2_folds: int) -> None:
    """Bad values of the head-fit options, each in one line naming the fix."""
    from zoo.errors import ZooError

    if head_fit not in ("sgd", "lbfgs"):
        raise ZooError(f"unknown task.module.head_fit '{head_fit}': use sgd (the head trains by the optimizer) or "
                       "lbfgs (fitted to cached features by L2-regularised logistic regression)")
    if head_fit == "lbfgs" and not cache_features:
        raise ZooError("task.module.head_fit=lbfgs fits the head to cached features: set "
                       "task.module.cache_features=true (with finetune=gradual or linear_probe)")
    if tta not in (True, False, "auto"):
        raise ZooError(f"unknown task.module.tta '{tta}': use true, false or auto (auto: where cross-validation "
                       "over the training photos says flip TTA pays; needs head_fit=lbfgs)")
    if tta == "auto" and head_fit != "lbfgs":
        raise ZooError("task.module.tta=auto is decided by the head fit: set task.module.head_fit=lbfgs, or tta to "
                       "true or false")
    if l2_grid is not None and (not len(l2_grid) or any(float(v) <= 0 for v in l2_grid)):
        raise ZooError(f"task.module.l2_grid must be a non-empty list of positive numbers, got {list(l2_grid)}")
    if int(l2_folds) < 2:
        raise ZooError(f"task.module.l2_folds must be at least 2, got {l2_folds}")
