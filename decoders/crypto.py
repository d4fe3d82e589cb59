"""End-to-end encrypted payloads, opened with the consumer's private key.

How the Pulsar producer encrypts (checked against the real-client corpus):

* a random 32-byte data key encrypts the (already compressed) payload with
  AES-256-GCM; IV = MessageMetadata.encryption_param, no additional authenticated
  data, the 16-byte tag at the end of the payload;
* the data key is wrapped per consumer key with RSA-OAEP (SHA-1, MGF1-SHA-1) and
  stored in MessageMetadata.encryption_keys[].value, named by .key.

The private key is read by the caller (from a file, never a flag value) and passed in
as PEM bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import DecryptionError, LedgerctlError


def load_private_key(pem: bytes, password: bytes | None = None) -> Any:
    """Parse a PEM or DER private key; raise LedgerctlError when it is not one."""
    from cryptography.hazmat.primitives import serialization

    loaders = (serialization.load_pem_private_key, serialization.load_der_private_key)
    encrypted = wrong = False
    for loader in loaders:
        try:
            return loader(pem, password=password)
        except TypeError as exc:  # encrypted without a passphrase, or one given needlessly
            encrypted = encrypted or ("encrypted" in str(exc) and password is None)
        except ValueError as exc:
            wrong = wrong or (password is not None and "password" in str(exc).lower())
    if encrypted:
        raise LedgerctlError(
            "the private key is encrypted: give its passphrase with "
            "--private-key-passphrase-env or --private-key-passphrase-file"
        )
    if wrong:
        raise LedgerctlError("the private key's passphrase is wrong")
    raise LedgerctlError("the private key file holds no PEM or DER private key")


def decrypt_payload(
    payload: bytes | memoryview,
    encryption_keys: Sequence[Any],
    iv: bytes,
    private_key: Any,
) -> tuple[bytes, str, bytes]:
    """Decrypt ``payload``; return the plaintext, the name of the key that opened it, and
    the data key (kept so that a decoded entry can be encrypted again byte for byte).
    """
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if not isinstance(private_key, rsa.RSAPrivateKey):
        raise DecryptionError("only RSA private keys are supported for decryption")
    if len(iv) != 12:
        raise DecryptionError(f"encryption_param is {len(iv)} bytes, expected a 12-byte IV")
    oaep = padding.OAEP(
        mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None
    )
    reasons = []
    for entry in encryption_keys:
        try:
            data_key = private_key.decrypt(bytes(entry.value), oaep)
        except ValueError:
            reasons.append(f"{entry.key}: data key does not unwrap with this private key")
            continue
        if len(data_key) not in (16, 24, 32):
            reasons.append(f"{entry.key}: unwrapped data key has {len(data_key)} bytes")
            continue
        try:
            return AESGCM(data_key).decrypt(iv, bytes(payload), None), entry.key, data_key
        except InvalidTag:
            reasons.append(f"{entry.key}: AES-GCM tag does not verify")
    if not reasons:
        raise DecryptionError("the entry lists no encryption keys")
    raise DecryptionError("; ".join(reasons))
