"""Extension points that grow by registration: one registry per point, filled by the modules
that define its entries.

A registry is made by the module that reads it: groupings (``squall.grouping``), config keys
(``squall.config``), backfill sources (``squall.contrib.sources``). An entry is registered by
the module that defines it, beside its code (Storm keeps a connector's keys with the
connector), so a feature registers into a registry of a lower layer and the layers still
point one way.

``providers`` names the modules that register entries, as text: the registry imports them
the first time it is read (``load``), so every reader in every process sees every entry
whatever it imported itself (nimbus checking a topology's config with Kafka keys, say).
Naming them here is the registration a new module needs besides its ``register`` call; a
unit test checks that each provider registers something and that nothing registers
unnamed. A provider may be loaded alone (``load(module)``), for a registry whose readers
know which provider an entry comes from (a config key's prefix).
"""
from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from squall.errors import SquallError

T = TypeVar("T")


class RegistryError(SquallError, ValueError):
    """An entry registered twice, or a name no entry has."""


class Registry(Generic[T]):
    """Named entries of one extension point (see the module doc)."""

    def __init__(self, what: str, providers: Sequence[str] = ()) -> None:
        self.what = what
        self.providers = tuple(providers)
        self._entries: dict[str, T] = {}
        self._origin: dict[str, str | None] = {}  # name -> the module that registered it
        self._loaded: set[str] = set()
        self._lock = threading.Lock()

    def register(self, name: str, entry: T, module: str | None = None) -> T:
        """Add ``entry`` under ``name`` (``module``: who registers it, for the unit test and
        for errors); RegistryError when the name is taken."""
        with self._lock:
            if name in self._entries:
                raise RegistryError(f"{self.what} {name!r} is registered twice (first by {self._origin[name]}, "
                                    f"then by {module})")
            self._entries[name] = entry
            self._origin[name] = module
        return entry

    def load(self, module: str | None = None) -> None:
        """Import the providers (or only ``module``, one of them) not imported yet."""
        # No lock of ours around the import: Python's own makes a thread that imports a
        # provider meanwhile wait for it, and a provider that reads this registry while it is
        # imported gets its own module back, not a second import.
        for name in self.providers if module is None else (module,):
            if name not in self._loaded:
                importlib.import_module(name)
                self._loaded.add(name)

    def get(self, name: str) -> T:
        """The entry named ``name``; RegistryError naming the known ones when there is none."""
        entry = self.find(name)
        if entry is None:
            raise RegistryError(f"unknown {self.what} {name!r} (known: {', '.join(sorted(self.names()))})")
        return entry

    def find(self, name: str) -> T | None:
        self.load()
        return self._entries.get(name)

    def peek(self, name: str) -> T | None:
        """The entry if it is registered already, without loading any provider."""
        return self._entries.get(name)

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> list[str]:
        self.load()
        return list(self._entries)

    def items(self) -> list[tuple[str, T]]:
        self.load()
        return list(self._entries.items())

    def origin(self, name: str) -> str | None:
        """The module that registered ``name``."""
        self.load()
        return self._origin.get(name)
