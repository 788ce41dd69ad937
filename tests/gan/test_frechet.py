"""Fréchet distance against closed forms, the streaming metric, and class coverage."""

import numpy as np
import pytest
import torch

from zoo.gan.frechet import ClassCounts, FrechetDistance, class_coverage, frechet_distance, frechet_distance_features


def test_known_answer_diagonal():
    # N(mu_a, diag(a)) vs N(mu_b, diag(b)): FD = |mu_a - mu_b|^2 + sum (sqrt(a) - sqrt(b))^2
    mu_a, mu_b = torch.tensor([0.0, 1.0, 2.0]), torch.tensor([1.0, 1.0, 0.0])
    a, b = torch.tensor([1.0, 4.0, 9.0]), torch.tensor([4.0, 4.0, 1.0])
    expect = 1 + 0 + 4 + (1 - 2) ** 2 + 0 + (3 - 1) ** 2
    assert frechet_distance(mu_a, torch.diag(a), mu_b, torch.diag(b)) == pytest.approx(expect)


def test_matches_scipy_sqrtm_and_is_symmetric():
    from scipy import linalg

    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(5, 5)), rng.normal(size=(5, 5))
    s1, s2 = A @ A.T + 0.1 * np.eye(5), B @ B.T + 0.1 * np.eye(5)
    m1, m2 = rng.normal(size=5), rng.normal(size=5)
    ref = ((m1 - m2) ** 2).sum() + np.trace(s1 + s2 - 2 * linalg.sqrtm(s1 @ s2).real)
    t = lambda x: torch.tensor(x)  # noqa: E731
    assert frechet_distance(t(m1), t(s1), t(m2), t(s2)) == pytest.approx(ref, rel=1e-8)
    assert frechet_distance(t(m2), t(s2), t(m1), t(s1)) == pytest.approx(ref, rel=1e-8)
    assert frechet_distance(t(m1), t(s1), t(m1), t(s1)) == pytest.approx(0.0, abs=1e-8)


def test_streaming_metric_equals_batch_and_floor_shrinks_with_n():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(400, 6, generator=g), torch.randn(300, 6, generator=g) + 0.5
    m = FrechetDistance(6)
    for chunk in a.split(64):
        m.update(chunk, real=True)
    for chunk in b.split(50):
        m.update(chunk, real=False)
    assert float(m.compute()) == pytest.approx(frechet_distance_features(a, b), rel=1e-9)
    assert m.counts() == (400, 300)
    # mean shift 0.5 in 6 dims: true FD 1.5; the estimate is close at n=300-400
    assert float(m.compute()) == pytest.approx(1.5, abs=0.3)
    small = frechet_distance_features(torch.randn(50, 6, generator=g), torch.randn(50, 6, generator=g))
    big = frechet_distance_features(torch.randn(5000, 6, generator=g), torch.randn(5000, 6, generator=g))
    assert big < small  # same distribution: the floor is pure small-sample bias


def test_class_coverage():
    frac = class_coverage(torch.tensor([0, 0, 1, 3]), 4)
    assert frac.tolist() == [0.5, 0.25, 0.0, 0.25]
    c = ClassCounts(4)
    c.update(torch.tensor([0, 0]))
    c.update(torch.tensor([1, 3]))
    assert c.compute().tolist() == [0.5, 0.25, 0.0, 0.25]
