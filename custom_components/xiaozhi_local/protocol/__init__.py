"""The xiaozhi device protocol, with no Home Assistant import.

Parsing and validating every inbound frame, building outbound ones, and the MCP client that
talks to a device's tools. The Home Assistant side plugs in through small callbacks.
"""
