"""A simulated xiaozhi device that behaves like stock firmware 2.4.2 on the wire.

Used by the tests, ``script/develop`` and the benchmarks; point it at any server with
``python -m xiaozhi_sim --url … --token … --mac …``.
"""

from .device import SimulatedDevice
from .errors import DeviceCrashed, HelloTimeout
from .mcp_server import McpServer, Property, Tool, ToolError
from .options import SimulatorOptions
from .ota import OtaClient, OtaError, OtaTiming
from .register_client import RegisterClientOptions, RegisterToolsClient

__all__ = [
    "DeviceCrashed",
    "HelloTimeout",
    "McpServer",
    "OtaClient",
    "OtaError",
    "OtaTiming",
    "Property",
    "RegisterClientOptions",
    "RegisterToolsClient",
    "SimulatedDevice",
    "SimulatorOptions",
    "Tool",
    "ToolError",
]
