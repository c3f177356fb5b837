"""Finds dissectors through the ``msgcap.dissectors`` entry-point group.

Our built-ins are registered in ``pyproject.toml`` exactly like a third-party plugin,
so the plugin path is the one exercised every day.  A plugin that fails to load, is not
a ``Dissector``, was written for another ``API_VERSION``, or declares a table that clashes
with one already declared is reported in ``Registry.errors`` and left out, never fatal:
one broken plugin must not stop a run.  The entry points are read on every ``discover()``
call (each run), so installing or removing a plugin takes effect at the next run.  Within
one process the list of entry points is kept while no ``sys.path`` entry changes (the
entries and their modification times are compared): a test or tool that discovers
hundreds of times does not read every installed distribution's metadata each time.
"""

from __future__ import annotations

import os

from dissectors.api import API_VERSION, Dissector, PayloadDissector
from dissectors.entrypoints import EntryPoint, entry_points
from dissectors.tables import TableSpec, all_tables

ENTRY_POINT_GROUP = "msgcap.dissectors"
OWN_DISTRIBUTION = "msgcap"
"""Distribution whose entry points are msgcap's own built-in dissectors."""


class Registry:
    """The dissectors a run may use, by name.  A plain class: a dataclass is built (its
    methods generated and compiled) at every import, ~0.6 ms of each run's start."""

    def __init__(self) -> None:
        # stream/datagram dissectors (NATS, Pulsar, Felix, plugins) ...
        self.dissectors: dict[str, type[Dissector]] = {}
        # ... and dissectors of payloads carried inside them (STAN, Liftbridge, plugins)
        self.payload: dict[str, type[PayloadDissector]] = {}
        # (entry point value, reason) for plugins that could not be used
        self.errors: list[tuple[str, str]] = []
        # entry point value of each loaded dissector, for `msgcap protocols`
        self.origins: dict[str, str] = {}
        # distribution (pip package) each loaded dissector came from ("" when unknown)
        self.distributions: dict[str, str] = {}

    def add(
        self,
        cls: type[Dissector] | type[PayloadDissector],
        origin: str = "",
        distribution: str = "",
    ) -> bool:
        """Add ``cls`` unless its name or one of its tables clashes (then the reason goes
        to ``errors``).  True when added."""
        known = self.dissectors.get(cls.name) or self.payload.get(cls.name)
        if known is not None and known is not cls:
            self.errors.append((origin, f"dissector name {cls.name!r} already taken"))
            return False
        if known is None:
            clash = self._table_clash(cls)
            if clash:
                self.errors.append((origin, clash))
                return False
        if issubclass(cls, PayloadDissector):
            self.payload[cls.name] = cls
        else:
            self.dissectors[cls.name] = cls
        self.origins[cls.name] = origin
        self.distributions[cls.name] = distribution
        return True

    def _table_clash(self, cls: type[Dissector] | type[PayloadDissector]) -> str:
        import dissectors.core_tables  # noqa: F401  (flows, anomalies, ... registered)

        declared = {s.name: ("msgcap (core table)", s) for s in all_tables()}
        declared.update({
            spec.name: (name, spec)
            for name, other in self._every().items()
            for spec in other.tables
        })
        for spec in cls.tables:
            hit = declared.get(spec.name)
            if hit is not None and hit[1] != spec:
                return (
                    f"table {spec.name!r} is already declared differently by {hit[0]!r}; "
                    "rename the plugin's table"
                )
        return ""

    def get(self, name: str) -> type[Dissector]:
        try:
            return self.dissectors[name]
        except KeyError:
            known = ", ".join(sorted(self.dissectors)) or "none"
            raise KeyError(f"no dissector named {name!r} (known: {known})") from None

    def _every(self) -> dict[str, type[Dissector] | type[PayloadDissector]]:
        """Both kinds by name (names are unique across the two: ``add`` checks)."""
        return {**self.dissectors, **self.payload}

    def tables(self, distribution: str | None = None) -> list[TableSpec]:
        """Table specs of every dissector, in dissector-name order; with
        ``distribution``, only of the dissectors that distribution installed."""
        seen: dict[str, TableSpec] = {}
        every = self._every()
        for name in sorted(every):
            if distribution is not None and self.distributions.get(name) != distribution:
                continue
            for spec in every[name].tables:
                seen.setdefault(spec.name, spec)
        return list(seen.values())


def check_plugin(cls: object) -> str:
    """Why ``cls`` cannot be used as a dissector, or ``""`` when it can."""
    if not (isinstance(cls, type) and issubclass(cls, Dissector | PayloadDissector)):
        return "not a dissectors.api.Dissector or PayloadDissector"
    version = getattr(cls, "api_version", API_VERSION)
    if type(version) is not int:
        return f"api_version must be an int (the dissector API major version), got {version!r}"
    if version != API_VERSION:
        newer = "a newer" if version > API_VERSION else "an older"
        return (
            f"built for msgcap dissector API version {version}, but this msgcap provides "
            f"version {API_VERSION} ({newer} API): install a release of the plugin made "
            f"for API {API_VERSION}, or a msgcap that provides API {version}"
        )
    if not getattr(cls, "name", None) or not isinstance(cls.name, str):
        return "dissector has no name"
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        return f"dissector {cls.name!r} does not implement {', '.join(missing)}"
    tables = getattr(cls, "tables", ())
    if not isinstance(tables, tuple) or not all(isinstance(t, TableSpec) for t in tables):
        return f"dissector {cls.name!r}: tables must be a tuple of TableSpec"
    return ""


def _load(ep: EntryPoint, distribution: str, reg: Registry) -> None:
    try:
        cls = ep.load()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - a broken plugin (even sys.exit at import)
        reg.errors.append((ep.value, f"import failed: {exc!r}"))  # is reported, not fatal
        return
    why = check_plugin(cls)
    if why:
        reg.errors.append((ep.value, why))
        return
    reg.add(cls, ep.value, distribution)


def _path_state() -> tuple[tuple[str, int | None], ...]:
    """``sys.path`` with each entry's modification time (a distribution installed or
    removed there changes it)."""
    import sys

    state = []
    for entry in sys.path:
        try:
            mtime: int | None = os.stat(entry or ".").st_mtime_ns
        except OSError:
            mtime = None
        state.append((entry, mtime))
    return tuple(state)


_seen: tuple[tuple[tuple[str, int | None], ...], list[EntryPoint]] | None = None


def _entry_points() -> list[EntryPoint]:
    """The group's entry points sorted by name (each with its distribution's name); the
    last answer again while ``sys.path`` is unchanged."""
    global _seen
    state = _path_state()
    if _seen is not None and _seen[0] == state:
        return _seen[1]
    found = sorted(entry_points(ENTRY_POINT_GROUP), key=lambda e: e.name)
    _seen = (state, found)
    return found


def discover() -> Registry:
    """Every dissector installed under the entry-point group, sorted by name."""
    reg = Registry()
    for ep in _entry_points():
        _load(ep, ep.distribution, reg)
    return reg
