"""Home Assistant loads entities only for a config entry; script/develop seeds this one."""

from homeassistant.config_entries import ConfigFlow


class XiaozhiDemoFlow(ConfigFlow, domain="xiaozhi_demo"):
    """Never shown: the entry is written into the dev config before Home Assistant starts."""
