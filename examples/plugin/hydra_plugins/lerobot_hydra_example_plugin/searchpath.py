"""Hydra finds this class by scanning the `hydra_plugins` namespace; it appends the package's conf/ to the config
search path, so its env/*.yaml and policy/*.yaml become env= and policy= options of lerobot_hydra."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class LeRobotHydraExampleSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="lerobot-hydra-example-plugin", path="pkg://lerobot_hydra_example.conf")
