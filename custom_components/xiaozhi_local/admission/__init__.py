"""Who gets in: OTA checks, pairing by spoken code, tokens, and what a transport asks of the hub.

- ``ota.py``: the OTA/config views, where a device learns its URLs and token, or pairs.
- ``policy.py``: ``Admission``, pairing by code, tokens, devices paired without a code.
- ``pairing.py``: the codes handed to unknown devices, who may still claim one, what a check says.
- ``pairing_session.py``: a pairing-only session that tells a client its code.
- ``identities.py``: ``IdentityJournal``, the one place device tokens are kept.
- ``gate.py``: ``DeviceGate``, what a transport needs of the hub to accept a device, and refusals.
- ``reports.py``: what a device says of itself at its OTA check (device registry, firmware facts).
- ``urls.py``: the URLs devices are given.
"""
