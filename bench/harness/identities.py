"""Many throwaway identities for the hostile benches: RSA keys cached on disk (loaded without validation, so a
thousand load in well under a second) and a DHT validator that signs each record with the identity its subkey
names — one DHT peer, many identities.

    cache_dir             the bench's cache: $SWARM_CACHE_DIR/bench (default ~/.cache/rlswarm/bench)
    cached_keys(n)        n RSA keys, the first ones from the cache, new ones added to it
    many_keys_validator   the validator that signs with whichever of the keys a record's subkey names
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("SWARM_CACHE_DIR", Path.home() / ".cache" / "rlswarm")) / "bench"


def cached_keys(n: int):
    from cryptography.hazmat.primitives import serialization
    from hivemind.utils.crypto import RSAPrivateKey

    path = cache_dir() / "sybil-keys.bin"
    blobs = []
    if path.exists():
        data = path.read_bytes()
        while data and len(blobs) < n:
            size = int.from_bytes(data[:4], "big")
            blobs.append(data[4:4 + size])
            data = data[4 + size:]
    keys = []
    for blob in blobs:  # our own keys: loaded without the (≈ 40 ms) RSA validation
        key = RSAPrivateKey.__new__(RSAPrivateKey)
        key._private_key = serialization.load_der_private_key(blob, None, unsafe_skip_rsa_key_validation=True)
        keys.append(key)
    while len(keys) < n:
        keys.append(RSAPrivateKey())
    if len(blobs) < n:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(len(b).to_bytes(4, "big") + b for b in (k.to_bytes() for k in keys)))
    return keys[:n]


def many_keys_validator(keys):
    from hivemind.dht.crypto import RSASignatureValidator

    class ManyKeys(RSASignatureValidator):
        """Signs a record with whichever of its keys the record's subkey names: one DHT peer, many identities."""

        def __init__(self):
            super().__init__(keys[0])
            self.by_subkey = {RSASignatureValidator(k).local_public_key: k for k in keys}

        def sign_value(self, record):
            found = self._PUBLIC_KEY_RE.search(record.subkey or b"")  # the subkey arrives msgpack-serialized
            key = found and self.by_subkey.get(b"[owner:" + found.group(1) + b"]")
            if key is None:
                return record.value
            return record.value + self.SIGNATURE_FORMAT.replace(b"_value_", key.sign(self._serialize_record(record)))

    return ManyKeys()
