"""Configuration: schema, loading, profiles and overrides."""

from .loader import dump_config, load_config
from .schema import RunConfig

__all__ = ["RunConfig", "load_config", "dump_config"]
