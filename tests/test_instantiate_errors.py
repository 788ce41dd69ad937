"""zoo.base.instantiate: a constructor refusing a value's type or range is one line naming the config node."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from zoo.base import instantiate
from zoo.errors import ZooError


def test_wrong_type_names_the_node_in_one_line():
    cfg = OmegaConf.create({"task": {"module": {"_target_": "torch.nn.GRU", "input_size": 4, "hidden_size": "abc"}}})
    with pytest.raises(ZooError, match=r"^task\.module: hidden_size should be of type int.*--cfg job") as e:
        instantiate(cfg.task.module)
    assert "\n" not in str(e.value)


def test_value_error_outside_a_tree_names_the_target():
    with pytest.raises(ZooError, match=r"^torch\.nn\.Dropout: dropout probability has to be between 0 and 1"):
        instantiate({"_target_": "torch.nn.Dropout", "p": 2.0})


def test_other_errors_are_not_swallowed():
    with pytest.raises(Exception, match="Error locating target") as e:
        instantiate({"_target_": "no_such_module.Thing"})
    assert not isinstance(e.value, ZooError)
