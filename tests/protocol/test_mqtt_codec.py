"""The MQTT codec on its own (``protocol/mqtt.py``): what the firmware and py-xiaozhi send, however it arrives.

Packets are built by the simulator's own MQTT code (``xiaozhi_sim.mqtt``, written from the clients),
as esp-mqtt and paho send them; the codec must read the same whatever the TCP segments are.
"""

import itertools

from hypothesis import given, settings, strategies as st
import pytest

from custom_components.xiaozhi_local.protocol import mqtt as codec
from xiaozhi_sim.mqtt_wire import DISCONNECT, PINGREQ, mqtt_connect, mqtt_publish, mqtt_subscribe

FIRMWARE_STREAM = b"".join(
    (
        mqtt_connect("GID_test@@@cc_ba_97_04_92_94", "cc:ba:97:04:92:94", "t" * 43, 240),
        mqtt_publish("xiaozhi_local/device", b'{"type":"hello","version":3,"transport":"udp"}'),
        mqtt_publish("xiaozhi_local/device", b'{"type":"mcp","payload":' + b'{"x":"' + b"y" * 300 + b'"}}'),
        PINGREQ,
        mqtt_publish("t", b"z" * 20_000),  # a remaining length of three bytes
        DISCONNECT,
    )
)
PY_XIAOZHI_STREAM = b"".join(
    (
        mqtt_connect("py-client", "user", "pass", 60),
        mqtt_subscribe(1, "devices/p2p/cc_ba_97_04_92_94", 1),
        bytes([0x32]) + bytes([2 + 1 + 2 + 4]) + b"\x00\x01t\x00\x07" + b"data",  # a QoS 1 PUBLISH
        PINGREQ,
    )
)


def decode_all(chunks: list[bytes]) -> list[codec.Packet]:
    decoder = codec.PacketDecoder()
    return [packet for chunk in chunks for packet in decoder.feed(chunk)]


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


@pytest.mark.parametrize("stream", [FIRMWARE_STREAM, PY_XIAOZHI_STREAM], ids=["firmware", "py-xiaozhi"])
@given(cuts=st.lists(st.integers(min_value=0, max_value=30_000), max_size=40))
@settings(max_examples=150, deadline=None)
def test_every_packet_decodes_the_same_whatever_the_split_points(stream: bytes, cuts: list[int]) -> None:
    assert decode_all(split(stream, cuts)) == decode_all([stream])


def test_byte_by_byte_too() -> None:
    assert decode_all([bytes([b]) for b in FIRMWARE_STREAM]) == decode_all([FIRMWARE_STREAM])


def test_what_the_firmware_and_py_xiaozhi_send_reads_back() -> None:
    packets = decode_all([FIRMWARE_STREAM])
    assert [p.type for p in packets] == [
        codec.PacketType.CONNECT,
        codec.PacketType.PUBLISH,
        codec.PacketType.PUBLISH,
        codec.PacketType.PINGREQ,
        codec.PacketType.PUBLISH,
        codec.PacketType.DISCONNECT,
    ]
    connect = codec.parse_connect(packets[0].body)
    assert (connect.client_id, connect.username, connect.password, connect.keepalive) == (
        "GID_test@@@cc_ba_97_04_92_94",
        "cc:ba:97:04:92:94",
        "t" * 43,
        240,
    )
    publish = codec.parse_publish(packets[1])
    assert (publish.topic, publish.qos, publish.packet_id) == ("xiaozhi_local/device", 0, None)
    assert publish.payload.startswith(b'{"type":"hello"')
    assert len(codec.parse_publish(packets[4]).payload) == 20_000
    paho = decode_all([PY_XIAOZHI_STREAM])
    assert codec.parse_subscribe(paho[1].body) == (1, [("devices/p2p/cc_ba_97_04_92_94", 1)])
    qos1 = codec.parse_publish(paho[2])
    assert (qos1.topic, qos1.qos, qos1.packet_id, qos1.payload) == ("t", 1, 7, b"data")


def test_the_builders_read_back() -> None:
    (connack,) = decode_all([codec.connack(codec.ConnectCode.BAD_CREDENTIALS)])
    assert (connack.type, connack.body) == (codec.PacketType.CONNACK, bytes([0, 4]))
    (publish,) = decode_all([codec.publish("xiaozhi_local/ccba", b"{}")])
    assert codec.parse_publish(publish).payload == b"{}"
    (suback,) = decode_all([codec.suback(9, [0, 1, 2])])
    assert suback.body == bytes([0, 9, 0, 1, 1])  # QoS 2 granted as 1
    (ack,) = decode_all([codec.acknowledge(codec.PacketType.PUBACK, 300)])
    assert codec.parse_packet_id(ack.body) == 300
    assert decode_all([codec.PINGRESP])[0].type == codec.PacketType.PINGRESP


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (bytes([0x00, 0x00]), "malformed"),  # reserved type 0
        (bytes([0xF0, 0x00]), "malformed"),  # reserved type 15
        (bytes([0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]), "too_large"),
        (bytes([0x30, 0x80, 0x80, 0x80, 0x80, 0x00]), "malformed"),  # a length of five bytes
    ],
)
def test_bad_headers_are_refused(data: bytes, kind: str) -> None:
    with pytest.raises(codec.MqttError) as err:
        decode_all([data])
    assert err.value.kind == kind


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x00\x04MQTT\x05\x02\x00\x3c\x00\x00",  # MQTT 5
        b"\x00\x04MQTT\x04\x03\x00\x3c\x00\x00",  # the reserved flag
        b"\x00\x04MQTT\x04\xc2\x00\x3c\x00\x01a\x00\x05us",  # a user name that runs past the end
        b"\x00\x04MQTT\x04\x02\x00\x3c\x00\x02\xff\xfe",  # a client id that is not UTF-8
    ],
)
def test_bad_connects_are_refused(body: bytes) -> None:
    with pytest.raises(codec.MqttError):
        codec.parse_connect(body)


def test_a_password_that_is_not_utf8_is_a_wrong_one() -> None:
    body = b"\x00\x04MQTT\x04\xc2\x00\x3c\x00\x01a\x00\x01u\x00\x02\xff\xfe"
    assert codec.parse_connect(body).password == ""


def test_mqtt_31_is_accepted() -> None:
    assert codec.parse_connect(b"\x00\x06MQIsdp\x03\x02\x00\x3c\x00\x01a").level == 3


@given(st.binary(max_size=300))
@settings(max_examples=400, deadline=None)
def test_random_bytes_raise_only_mqtt_errors(data: bytes) -> None:
    try:
        for packet in decode_all([data]):
            if packet.type == codec.PacketType.CONNECT:
                codec.parse_connect(packet.body)
            elif packet.type == codec.PacketType.PUBLISH:
                codec.parse_publish(packet)
            elif packet.type == codec.PacketType.SUBSCRIBE:
                codec.parse_subscribe(packet.body)
            else:
                codec.parse_packet_id(packet.body)
    except codec.MqttError:
        pass
