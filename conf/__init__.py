"""Shipped configuration files (``defaults.yaml``)."""
from pathlib import Path

DEFAULTS_PATH = Path(__file__).with_name("defaults.yaml")
