"""Encoders by name (hub id, alias or local directory) and the optimiser groups that fine-tuning uses."""

from zoo.nlp.models.groups import freeze, layer_id, param_groups
from zoo.nlp.models.hub import list_models, load_classifier, load_config, load_tokenizer, resolve

__all__ = ["freeze", "layer_id", "list_models", "load_classifier", "load_config", "load_tokenizer", "param_groups",
           "resolve"]
