"""The root of squall's exceptions: ``except SquallError`` catches any error squall raises
on purpose (kazoo's ``KazooException``, quix's ``QuixException``). Each class keeps its
standard base as well (``class ConfigError(SquallError, ValueError)``), so code that
catches ``ValueError`` or ``RuntimeError`` goes on working."""
from __future__ import annotations


class SquallError(Exception):
    """Any error squall raises on purpose."""
