"""Finds dissectors through the ``msgcap.dissectors`` entry-point group.

Our built-ins are registered in ``pyproject.toml`` exactly like a third-party plugin,
so the plugin path is the one exercised every day.  A plugin that fails to load or is
not a ``Dissector`` is reported, never fatal: one broken plugin must not stop a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points

from dissectors.api import Dissector, PayloadDissector

ENTRY_POINT_GROUP = "msgcap.dissectors"


@dataclass
class Registry:
    # stream/datagram dissectors (NATS, Pulsar, Felix, plugins) ...
    dissectors: dict[str, type[Dissector]] = field(default_factory=dict)
    # ... and dissectors of payloads carried inside them (STAN, Liftbridge, plugins)
    payload: dict[str, type[PayloadDissector]] = field(default_factory=dict)
    # (entry point value, reason) for plugins that could not be used
    errors: list[tuple[str, str]] = field(default_factory=list)
    # entry point value of each loaded dissector, for `msgcap protocols`
    origins: dict[str, str] = field(default_factory=dict)

    def add(self, cls: type[Dissector] | type[PayloadDissector], origin: str = "") -> None:
        known = self.dissectors.get(cls.name) or self.payload.get(cls.name)
        if known is not None and known is not cls:
            self.errors.append((origin, f"dissector name {cls.name!r} already taken"))
            return
        target = self.payload if issubclass(cls, PayloadDissector) else self.dissectors
        target[cls.name] = cls  # type: ignore[assignment]
        self.origins[cls.name] = origin

    def get(self, name: str) -> type[Dissector]:
        try:
            return self.dissectors[name]
        except KeyError:
            known = ", ".join(sorted(self.dissectors)) or "none"
            raise KeyError(f"no dissector named {name!r} (known: {known})") from None

    def tables(self) -> list:
        """Table specs of every dissector, in dissector-name order."""
        seen: dict[str, object] = {}
        every = {**self.dissectors, **self.payload}
        for name in sorted(every):
            for spec in every[name].tables:
                seen.setdefault(spec.name, spec)
        return list(seen.values())


def _load(ep: EntryPoint, reg: Registry) -> None:
    try:
        cls = ep.load()
    except Exception as exc:  # a broken plugin is reported, not fatal
        reg.errors.append((ep.value, f"import failed: {exc!r}"))
        return
    if not (isinstance(cls, type) and issubclass(cls, Dissector | PayloadDissector)):
        reg.errors.append((ep.value, "not a dissectors.api.Dissector or PayloadDissector"))
        return
    if not getattr(cls, "name", None):
        reg.errors.append((ep.value, "dissector has no name"))
        return
    reg.add(cls, ep.value)


def discover() -> Registry:
    """Every dissector installed under the entry-point group, sorted by name."""
    reg = Registry()
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        _load(ep, reg)
    return reg
