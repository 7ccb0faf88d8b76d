"""The xiaozhi device protocol, with no Home Assistant import.

Parsing and validating every inbound frame, building outbound ones, and the MCP client that
talks to a device's tools. The Home Assistant side plugs in through small callbacks.

Modules: ``messages`` (frames, hello, listen/abort), ``session`` (one device's session),
``logs`` (each kind of problem warned about once), ``mcp`` (tools, results and errors of MCP),
``mcp_client`` (the MCP client), ``register`` (the ``mcp/registerTools`` dialect), ``schema``
(tool schemas), ``voice`` (what the device is told during a conversation), ``framing`` (binary
audio frames), ``opus`` (Opus packets), ``pcm`` (PCM, resampling), ``ogg`` (Ogg Opus), ``wav``
(WAV streams), ``pacing`` (real-time sending), ``sentences`` (text shown while speaking),
``mqtt`` (the MQTT codec), ``udp`` (the encrypted audio channel), ``firmware`` (ESP app images
and versions), ``partitions`` (ESP partition tables), ``assets`` (the assets pack and ESP-SR's
model pack), ``wake_pack`` (what a pack wakes on, and a pack changed to wake on another word),
``phrases`` (MultiNet wake phrases a model can hear), ``loudness`` (how near a device was to
the wake word's speaker, from its own recording).
"""

__version__ = "0.1.0"
"""The integration's version (``manifest.json``): the protocol package ships with it."""

__all__ = [
    "assets",
    "firmware",
    "framing",
    "logs",
    "loudness",
    "mcp",
    "mcp_client",
    "messages",
    "mqtt",
    "ogg",
    "opus",
    "pacing",
    "partitions",
    "pcm",
    "phrases",
    "register",
    "schema",
    "sentences",
    "session",
    "udp",
    "voice",
    "wake_pack",
    "wav",
]
