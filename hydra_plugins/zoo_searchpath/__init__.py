"""Adds the folders of `ZOO_CONFIG_PATH` to Hydra's config search path (see zoo_searchpath.py)."""
