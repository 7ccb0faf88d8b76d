"""Home Assistant loads an entry only for a domain with a config flow; the bench seeds the entry."""

from homeassistant.config_entries import ConfigFlow


class BenchProbeFlow(ConfigFlow, domain="bench_probe"):
    """Never shown: the bench writes the entry into the config before HA starts."""
