"""Node identity: one RSA key that is both the libp2p peer id and the DHT signing key.

hivemind's p2pd reads its identity from a file holding a libp2p ``PrivateKey`` protobuf
(``crypto_pb2.PrivateKey{key_type=RSA, data=<PKCS#1 DER>}``, written by
``P2P.generate_identity``). The libp2p peer id of an RSA key is

    peer_id = base58( multihash_sha2_256( PublicKey{key_type=RSA, data=<SubjectPublicKeyInfo DER>} ) )

We sign every DHT announcement with *the same* key (hivemind ``RSASignatureValidator``: the
subkey carries ``[owner:<ssh-rsa public key>]`` and the value a signature). A receiver therefore
recomputes the peer id from the subkey's public key and checks it against the announcement, so
no peer can announce under another peer's id: the binding is cryptographic, not a convention.

Restarting a node with the same ``identity_path`` keeps its peer id. Without a path a fresh key
is written to a private temporary file that is deleted once the daemon has read it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import multihash
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.p2p import P2P, PeerID
from hivemind.proto import crypto_pb2
from hivemind.utils.crypto import RSAPrivateKey


class IdentityError(ValueError):
    """The identity file exists but cannot be used (wrong format or key type)."""


def load_or_create_identity(path: str | os.PathLike) -> tuple[RSAPrivateKey, bool]:
    """Return (the RSA key stored at ``path``, whether it was just created).

    A missing file is created with hivemind's own writer (mode 0400) so p2pd reads the same key.
    """
    path = Path(path)
    created = False
    if not path.exists():
        if not path.parent.is_dir():
            raise IdentityError(f"directory {str(path.parent)!r} for the identity file does not exist")
        P2P.generate_identity(str(path))
        created = True
    return _read_identity(path), created


def ephemeral_identity() -> tuple[RSAPrivateKey, Path]:
    """A fresh key written to a private temporary file; the caller deletes it (and its folder) after start."""
    path = Path(tempfile.mkdtemp(prefix="rlswarm-identity-")) / "identity.key"  # dir is mode 0700
    P2P.generate_identity(str(path))
    return _read_identity(path), path


def _read_identity(path: Path) -> RSAPrivateKey:
    try:
        proto = crypto_pb2.PrivateKey.FromString(path.read_bytes())
    except Exception as exc:  # protobuf raises DecodeError, a plain Exception subclass
        raise IdentityError(f"identity file {str(path)!r} is not a libp2p private key: {exc}") from exc
    if proto.key_type != crypto_pb2.KeyType.RSA:
        name = crypto_pb2.KeyType.Name(proto.key_type)
        raise IdentityError(f"identity file {str(path)!r} holds a {name} key; an RSA key is required "
                            "(it also signs DHT announcements)")
    try:
        der = serialization.load_der_private_key(proto.data, password=None)
    except ValueError as exc:
        raise IdentityError(f"identity file {str(path)!r} has a malformed RSA key: {exc}") from exc
    if not isinstance(der, rsa.RSAPrivateKey):
        raise IdentityError(f"identity file {str(path)!r} does not hold an RSA key")
    key = RSAPrivateKey.__new__(RSAPrivateKey)
    key.__setstate__({"_private_key": proto.data})  # hivemind's own (un)pickling path
    return key


def peer_id_of_key(key: RSAPrivateKey) -> str:
    """The libp2p peer id (base58) that p2pd derives from this key."""
    return peer_id_of_public_ssh(key.get_public_key().to_bytes())


def peer_id_of_public_ssh(ssh_public_key: bytes) -> str:
    """The libp2p peer id (base58) of an RSA public key in OpenSSH format. Raises ValueError."""
    public = serialization.load_ssh_public_key(ssh_public_key)
    if not isinstance(public, rsa.RSAPublicKey):
        raise ValueError("not an RSA public key")
    spki = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    encoded = crypto_pb2.PublicKey(key_type=crypto_pb2.RSA, data=spki).SerializeToString()
    digest = multihash.encode(hashlib.sha256(encoded).digest(), multihash.coerce_code("sha2-256"))
    return PeerID(digest).to_base58()


def owner_subkey(key: RSAPrivateKey) -> bytes:
    """The DHT subkey a node announces under: ``b"[owner:" + ssh_rsa_public_key + b"]"``."""
    return RSASignatureValidator(key).local_public_key


def peer_id_of_subkey(subkey: object) -> str | None:
    """Peer id bound to a signed subkey, or None when the subkey is not exactly one owner marker.

    Only meaningful for records that passed ``RSASignatureValidator.validate`` (hivemind runs it on
    every stored and fetched record), which proves the value was signed by that key.
    """
    if not isinstance(subkey, bytes):
        return None
    prefix, suffix = b"[owner:", b"]"
    if not (subkey.startswith(prefix) and subkey.endswith(suffix)) or subkey.count(prefix) != 1:
        return None
    try:
        return peer_id_of_public_ssh(subkey[len(prefix):-len(suffix)])
    except (ValueError, TypeError):
        return None
