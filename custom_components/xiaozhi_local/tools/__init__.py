"""A device's MCP tools and what Home Assistant makes of them.

- ``discovery.py``: MCP discovery of a link's tools, then the connect-time round.
- ``readings.py``: ``DeviceValues``, what a device reports and what waits for it.
- ``table.py``: the tools by name, and how their results read (what entity rows build on).
- ``notifications.py``: a device's notifications, bounded, handed to whoever listens.
- ``vision.py``: the camera tool's endpoint. (Agents get the tools through ``llm.py``, a
  platform Home Assistant loads from the top of the integration.)
"""
