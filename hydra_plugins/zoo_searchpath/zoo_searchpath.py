"""`ZOO_CONFIG_PATH=<folder>[:<folder>...]`: config trees of the user's own (task/, experiment/, ...) searched after
the zoo's configs/, for `python -m zoo <verb>` and the zoo's own compositions alike (zoo.core.config.config_dirs)."""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class ZooSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from zoo.core.config import config_dirs

        for folder in config_dirs()[1:]:
            search_path.append(provider="zoo-user", path=f"file://{folder}")
