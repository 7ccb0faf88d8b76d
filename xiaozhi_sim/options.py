"""How a simulated device is built: its identity, its board, its client family (``flavor``).

``flavor`` makes it another client family of the protocol notes instead:

- ``py-xiaozhi``: a desktop client. 20 ms Opus frames announced in its hello, an empty
  ``session_id`` in every message (it ignores the server's), tool failures as ``isError``
  results, header values spelled its own way; no status tool, its volume read by
  ``self.audio_speaker.get_volume`` (a bare integer). It plays downlink audio in any state,
  and in realtime mode stays listening while it plays an answer (``session.py``).
- ``browser``: a test web page. Authentication in the query string (browsers cannot set
  WebSocket headers), a hello with only ``features``, and typed text through ``listen detect``.
- ``xiaozhi-sdk``: the PyPI SDK (``xiaozhi_sdk/core.py``): its own hello
  (``consistent_sample_rate``), the firmware's tools without ``self.`` (``set_volume``,
  ``get_device_status``, ``take_photo``), and camera uploads with the vision token but no ``Device-Id``.
- ``xiaozhi-concurrent``: the load tester (``src/client.py``). Only ``?device-id=`` in the URL (no
  token: it needs a hub that trusts new devices), a camelCase ``audioParams`` hello, and in
  ``say`` ``listen start`` in manual mode, the speech, then up to 6 s of silence frames until
  ``stt`` or ``tts start`` comes, never ``listen stop``.
"""

from dataclasses import dataclass, field
from typing import Literal
import uuid

from .assets import ASSETS_PARTITION
from .tools import APP_PARTITION

type Flavor = Literal["firmware", "py-xiaozhi", "browser", "xiaozhi-sdk", "xiaozhi-concurrent"]
FLAVORS: tuple[Flavor, ...] = ("firmware", "py-xiaozhi", "browser", "xiaozhi-sdk", "xiaozhi-concurrent")


@dataclass
class SimulatorOptions:
    """How the simulated device is built."""

    url: str
    token: str = ""
    mac: str = "cc:ba:97:04:92:94"
    client_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    protocol_version: int = 1
    board: str = "bread-compact-wifi"
    firmware_version: str = "2.4.2"
    camera: bool = False
    ir: bool = False
    lamp: bool = False
    press_to_talk: bool = False
    extra_tools: int = 0
    hello_timeout: float = 10.0
    handshake_timeout: float = 10.0
    language: str = "en-US"
    flavor: Flavor = "firmware"
    frame_ms: int | None = None
    """Uplink Opus frame duration; None: the flavor's own (60 ms firmware/browser, 20 ms py-xiaozhi)."""
    serial_number: str | None = None
    """A factory serial number in eFuse: the OTA check is activation version 2 (``Serial-Number``)."""
    decode_speaker: bool = True
    """Decode what the speaker plays into ``speaker_pcm``. A bench that only stamps the packets'
    arrival turns it off (100 devices decoding would load the process that measures)."""
    nvs_path: str | None = None
    """A file that plays the device's flash: its ``Client-Id`` (NVS ``board/uuid``, made once and
    kept across boots, as the firmware does) and what OTA answers stored. None: kept in memory."""
    chip: str = "esp32s3"
    """``chip_model_name``: the chip its images must be built for."""
    app_partition: int = APP_PARTITION
    """Bytes of each app slot in its partition table (an image larger than it cannot be flashed)."""
    upgrade_delay: float = 4.0
    """Seconds ``UpgradeFirmware`` waits before its download (its alert 3 s, then 1 s)."""
    download_delay: float = 0.0
    """Seconds added to each 4 KiB page of a firmware download (weak Wi-Fi; tests act mid-way)."""
    fail_flash: bool = False
    """Every flash fails at ``esp_ota_end`` (a worn flash): the device keeps its version."""
    assets_partition: int = ASSETS_PARTITION
    """Bytes of its ``assets`` partition (in its partition table; a larger pack is refused)."""
    assets_cut_after: int | None = None
    """Its first assets download breaks off after this many bytes (then the partition is broken)."""
    assets_pack: bytes | None = None
    """What its assets partition holds at first (None: a default pack that wakes on 你好小智)."""
    wake_level_db: float | None = None
    """Waking by its wake word (``say(wake_word=…)``), it first sends the wake word's own audio (about
    2 s of Opus, ``CONFIG_SEND_WAKE_WORD_DATA``) with speech at this level (dBFS) over its noise
    (``noise_db``), as the firmware does. None: no wake audio (a build without the option)."""
    noise_db: float = -50.0
    """The level (dBFS) of the room's noise in its wake audio; with a microphone of more gain, both rise."""
    reboots: bool = False
    """After a reboot it boots again by itself, as a real device does: the OTA check (where a
    ``firmware`` in the answer is installed), then its transport. Off: the caller boots it."""
