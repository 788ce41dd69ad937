"""Fréchet distance between Gaussians fitted to two feature sets (Heusel et al. 2017, https://arxiv.org/abs/1706.08500).

    FD = ||mu_a - mu_b||^2 + Tr(S_a + S_b - 2 (S_a S_b)^{1/2})

FID is this distance in Inception-v3 pool features; the zoo also measures it in the features of a classifier
trained on the GAN's own data, which works offline and on 1-channel 8x8 digits where Inception means little.
The estimate is biased upwards for small sample counts, so it is only comparable at equal n: the real-vs-real
distance at the same n is the floor a perfect generator would reach.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric


def frechet_distance(mu_a: torch.Tensor, cov_a: torch.Tensor, mu_b: torch.Tensor, cov_b: torch.Tensor) -> float:
    """FD between N(mu_a, cov_a) and N(mu_b, cov_b); mu (D,), cov (D, D). Computed in float64.

    Tr((S_a S_b)^{1/2}) = Tr((S_a^{1/2} S_b S_a^{1/2})^{1/2}): the inner matrix is symmetric PSD, so eigvalsh is
    stable where a general sqrtm of the non-symmetric S_a S_b is not.
    """
    mu_a, mu_b, cov_a, cov_b = (t.double() for t in (mu_a, mu_b, cov_a, cov_b))
    vals, vecs = torch.linalg.eigh(cov_a)
    sqrt_a = (vecs * vals.clamp_min(0).sqrt()) @ vecs.T
    inner = sqrt_a @ cov_b @ sqrt_a
    tr_sqrt = torch.linalg.eigvalsh((inner + inner.T) / 2).clamp_min(0).sqrt().sum()
    diff = mu_a - mu_b
    return float(diff @ diff + cov_a.trace() + cov_b.trace() - 2 * tr_sqrt)


def gaussian_stats(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean (D,) and unbiased covariance (D, D) of features (N, D)."""
    f = features.double()
    return f.mean(0), torch.cov(f.T)


def frechet_distance_features(a: torch.Tensor, b: torch.Tensor) -> float:
    """FD between two feature sets (N_a, D) and (N_b, D)."""
    return frechet_distance(*gaussian_stats(a), *gaussian_stats(b))


class FrechetDistance(Metric):
    """Streaming FD between a 'real' and a 'fake' feature stream; sufficient statistics are summed across DDP ranks.

    update(features (B, D), real: bool); compute() -> FD as a 0-d tensor; counts() -> (n_real, n_fake).
    """

    full_state_update = False

    def __init__(self, num_features: int, **kwargs) -> None:
        super().__init__(**kwargs)
        for side in ("real", "fake"):
            self.add_state(f"{side}_sum", torch.zeros(num_features, dtype=torch.float64), dist_reduce_fx="sum")
            self.add_state(f"{side}_outer", torch.zeros(num_features, num_features, dtype=torch.float64),
                           dist_reduce_fx="sum")
            self.add_state(f"{side}_n", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, features: torch.Tensor, real: bool) -> None:
        f = features.detach().double().flatten(1)
        side = "real" if real else "fake"
        setattr(self, f"{side}_sum", getattr(self, f"{side}_sum") + f.sum(0))
        setattr(self, f"{side}_outer", getattr(self, f"{side}_outer") + f.T @ f)
        setattr(self, f"{side}_n", getattr(self, f"{side}_n") + f.shape[0])

    def _stats(self, side: str) -> tuple[torch.Tensor, torch.Tensor]:
        n, s, outer = getattr(self, f"{side}_n"), getattr(self, f"{side}_sum"), getattr(self, f"{side}_outer")
        if n < 2:
            raise ValueError(f"FrechetDistance needs at least 2 {side} samples, got {int(n)}")
        mu = s / n
        cov = (outer - n * torch.outer(mu, mu)) / (n - 1)
        return mu, cov

    def compute(self) -> torch.Tensor:
        return torch.tensor(frechet_distance(*self._stats("real"), *self._stats("fake")), dtype=torch.float64)

    def counts(self) -> tuple[int, int]:
        return int(self.real_n), int(self.fake_n)


def class_coverage(predicted: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Fraction of samples the evaluator assigns to each class (num_classes,), from predicted labels (N,)."""
    counts = torch.bincount(predicted.flatten().long(), minlength=num_classes)[:num_classes].double()
    return counts / counts.sum().clamp_min(1)


class ClassCounts(Metric):
    """How many samples the evaluator assigns to each class (num_classes,), summed across DDP ranks."""

    full_state_update = False

    def __init__(self, num_classes: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.add_state("counts", torch.zeros(num_classes, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, predicted: torch.Tensor) -> None:
        self.counts = self.counts + torch.bincount(predicted.flatten().long(), minlength=self.num_classes).double()

    def compute(self) -> torch.Tensor:
        return self.counts / self.counts.sum().clamp_min(1)
