"""What an nlp run prints while loading an encoder: the zoo's own report of what loaded, not transformers' table."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def transformers_lines() -> Iterator[list[str]]:
    """Every record transformers' loggers emit (they print through their own handler on the "transformers" logger,
    bound to the stderr of its first use, so pytest's capture fixtures do not see them)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    root = logging.getLogger("transformers")
    root.addHandler(handler)
    yield lines
    root.removeHandler(handler)


def test_loading_an_encoder_prints_no_transformers_report_or_bars(tiny_encoder, transformers_lines, capsys):
    """The tiny encoder has no classifier: transformers would print its LOAD REPORT (`classifier.bias | MISSING`)
    and a "Loading weights" bar; the zoo's report (from the same loading info) names those tensors instead."""
    from zoo.nlp.models.hub import load_classifier, load_config
    from zoo.nlp.pretrained import info_report

    config = load_config(tiny_encoder, True, num_labels=2)
    capsys.readouterr()
    model, info, where = load_classifier(tiny_encoder, config, True, with_info=True)
    assert not [line for line in transformers_lines if "LOAD REPORT" in line or "Some weights of" in line]
    assert "Loading weights" not in capsys.readouterr().err
    report = info_report(model, info, where)
    assert report["reinit"] == ["classifier.bias", "classifier.weight"]


def test_other_transformers_warnings_and_the_bars_setting_survive(transformers_lines):
    from transformers.utils import logging as hf_logging

    from zoo.nlp.models.hub import quiet_load

    logger = hf_logging.get_logger("transformers.modeling_utils")
    before = hf_logging.is_progress_bar_enabled()
    with quiet_load():
        logger.warning("a different problem with the weights")
        logger.warning("BertModel LOAD REPORT from: x")
        assert not hf_logging.is_progress_bar_enabled()
    assert hf_logging.is_progress_bar_enabled() == before
    logger.warning("BertModel LOAD REPORT from: y")  # outside a zoo load the filter is gone
    assert transformers_lines == ["a different problem with the weights", "BertModel LOAD REPORT from: y"]


def test_a_hub_download_keeps_its_bars():
    from transformers.utils import logging as hf_logging

    from zoo.nlp.models.hub import quiet_load

    before = hf_logging.is_progress_bar_enabled()
    with quiet_load(local=False):
        assert hf_logging.is_progress_bar_enabled() == before
