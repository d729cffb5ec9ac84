"""The one error a user's bad input raises: at the bottom of the layers, so every module may raise it."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad name or value in the configuration; its message is the one line the user sees."""
