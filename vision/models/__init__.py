"""Backbones by name (any timm model) and where their weights come from."""

from zoo.vision.models.backbone import create_backbone, head_prefixes, list_models, norm_config, weights_source

__all__ = ["create_backbone", "head_prefixes", "list_models", "norm_config", "weights_source"]
