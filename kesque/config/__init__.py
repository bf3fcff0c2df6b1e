"""Configuration with Kafka's names, defaults and precedence."""

from .broker import BROKER_CONFIGS, BrokerConfig, Listener, parse_properties
from .topic import TOPIC_CONFIGS, LogConfig, validate_topic_configs
from .types import ConfigError, ConfigKey

__all__ = [
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "ConfigError",
    "ConfigKey",
    "Listener",
    "LogConfig",
    "parse_properties",
    "validate_topic_configs",
]
