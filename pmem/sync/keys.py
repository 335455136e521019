"""Keys and sealed files: the one place bytes are encrypted or opened.

A sync key is 32 random bytes. Every file on the remote is sealed with ChaCha20-Poly1305 and
carries a small plain header (device, seq, key id, nonce) that is authenticated as associated
data, so a file renamed, swapped between devices or sealed with another key fails to open. The
key itself stays on the device: in a key file (0600) or wrapped by a passphrase through scrypt.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import zlib
from pathlib import Path
from typing import Any

from ..errors import PmemError, UsageError

MAGIC = b"pmem-sync 1\n"
KEY_BYTES = 32
MAX_FILE = 256 * 1024 * 1024  # bytes; a larger file on the remote is refused before it is read
MAX_PLAIN = 1024 * 1024 * 1024  # bytes a changeset may inflate to (a zip bomb is refused)
KEYCHECK = b'{"pmem":"keycheck"}'
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1  # ~0.1 s and 32 MiB: a passphrase guess costs the same
HEADER_FIELDS = {"device", "seq", "key", "nonce"}
_NONCE = re.compile(r"[0-9a-f]{24}")  # 12 bytes; fullmatch (`$` would match before a final newline)
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_SALT = re.compile(r"[0-9a-f]{32}")


class SyncError(PmemError):
    """Sync cannot go on: a wrong key, a tampered or missing changeset, a copied home..."""


class WrongKey(SyncError):
    """The key does not open the remote's files."""


def _aead(key: bytes):
    try:
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
    except ImportError:  # pragma: no cover - a dependency; named for a broken install
        raise SyncError("sync needs the `cryptography` package: pip install cryptography") from None
    return ChaCha20Poly1305(key)


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def key_id(key: bytes) -> str:
    """A short public name for the key (not the key: a hash of 256 random bits reveals nothing)."""
    return hashlib.sha256(b"pmem-sync key id\0" + key).hexdigest()[:16]


def encode_key(key: bytes) -> str:
    """The key as groups of base32 letters to type on the next device."""
    text = base64.b32encode(key).decode().rstrip("=").lower()
    return "-".join(text[i:i + 4] for i in range(0, len(text), 4))


def decode_key(text: str) -> bytes:
    letters = "".join(ch for ch in text.strip() if ch.isalnum()).upper()
    try:
        key = base64.b32decode(letters + "=" * (-len(letters) % 8))
    except (ValueError, binascii.Error):
        raise UsageError("not a pmem sync key (expected groups of letters and digits, as `pmem sync key` prints)") \
            from None
    if len(key) != KEY_BYTES:
        raise UsageError("not a pmem sync key (wrong length)")
    return key


def write_key_file(path: Path, key: bytes) -> None:
    """Write a new key file readable by its owner only; never overwrite one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SyncError(f"key file {path} already exists") from None
    with os.fdopen(fd, "w") as f:
        f.write(encode_key(key) + "\n")


def read_key_file(path: Path) -> bytes:
    try:
        if path.stat().st_size > 4096:
            raise UsageError(f"key file {path} is too large to be a pmem sync key")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"no key file at {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read key file {path}: {exc}") from None
    return decode_key(text)


def wrap_key(key: bytes, passphrase: str) -> bytes:
    """The key sealed under a passphrase (scrypt), for a key kept on disk without a key file."""
    if not passphrase:
        raise UsageError("an empty passphrase protects nothing")
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    salt = os.urandom(16)
    kek = Scrypt(salt=salt, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P).derive(passphrase.encode())
    nonce = os.urandom(12)
    header = json.dumps({"kdf": "scrypt", "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P,
                         "salt": salt.hex(), "nonce": nonce.hex()}, sort_keys=True).encode() + b"\n"
    return MAGIC + header + _aead(kek).encrypt(nonce, key, MAGIC + header)


def unwrap_key(blob: bytes, passphrase: str) -> bytes:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    header, body = _split(blob, "wrapped key")
    n, r, p, salt, nonce = (header.get(f) for f in ("n", "r", "p", "salt", "nonce"))
    if not (_int(n) and 2 <= n <= 2**20 and n & (n - 1) == 0 and _int(r) and 1 <= r <= 32 and _int(p)
            and 1 <= p <= 16 and isinstance(salt, str) and _SALT.fullmatch(salt) and isinstance(nonce, str)
            and _NONCE.fullmatch(nonce)):
        raise SyncError("damaged wrapped key: its header is not one pmem writes")
    try:
        kek = Scrypt(salt=bytes.fromhex(salt), length=32, n=n, r=r, p=p).derive(passphrase.encode())
        return _aead(kek).decrypt(bytes.fromhex(nonce), body, blob[:len(blob) - len(body)])
    except InvalidTag:
        raise WrongKey("wrong passphrase") from None
    except (ValueError, MemoryError) as exc:
        raise SyncError(f"damaged wrapped key: {exc}") from None


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _split(blob: bytes, what: str) -> tuple[dict[str, Any], bytes]:
    if not blob.startswith(MAGIC):
        raise SyncError(f"{what} is not a pmem sync file")
    end = blob.find(b"\n", len(MAGIC))
    if end < 0 or end - len(MAGIC) > 4096:
        raise SyncError(f"{what} has a damaged header")
    try:
        header = json.loads(blob[len(MAGIC):end])
    except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested past Python's limit
        raise SyncError(f"{what} has a damaged header") from None
    if not isinstance(header, dict):
        raise SyncError(f"{what} has a damaged header")
    return header, blob[end + 1:]


def seal(key: bytes, device: str, seq: int, payload: Any) -> bytes:
    """One changeset file: a plain header, then the payload as compressed JSON, encrypted."""
    nonce = os.urandom(12)
    header = json.dumps({"device": device, "seq": seq, "key": key_id(key), "nonce": nonce.hex()},
                        sort_keys=True).encode() + b"\n"
    plain = zlib.compress(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode(), 6)
    return MAGIC + header + _aead(key).encrypt(nonce, plain, MAGIC + header)


def open_sealed(key: bytes, blob: bytes, device: str, seq: int, what: str) -> Any:
    """The payload of a sealed file, after checking that its header names this device, seq and key.
    The header is the remote's (anyone may write it, and the key id is public): every field is
    checked for its type and form before it is used, and anything else is one refusal."""
    from cryptography.exceptions import InvalidTag

    if len(blob) > MAX_FILE:
        raise SyncError(f"{what} is {len(blob):,} bytes; refusing more than {MAX_FILE:,}")
    header, body = _split(blob, what)
    if set(header) != HEADER_FIELDS or not (isinstance(header["key"], str) and _KEY_ID.fullmatch(header["key"])):
        raise SyncError(f"{what} has a damaged header")
    if header["key"] != key_id(key):
        raise WrongKey(f"{what} was sealed with another key (key id {header['key']!r}, "
                       f"this device's is {key_id(key)!r})")
    if header["device"] != device or not _int(header["seq"]) or header["seq"] != seq:
        shown = (f"{header['device']}/{header['seq']}" if isinstance(header["device"], str) and _int(header["seq"])
                 and len(header["device"]) <= 64 and header["device"].isprintable() else "something else")
        raise SyncError(f"{what} says it is {shown}: moved or tampered")
    nonce = header["nonce"]
    if not (isinstance(nonce, str) and _NONCE.fullmatch(nonce)):
        raise SyncError(f"{what} has a damaged header (its nonce)")
    try:
        plain = _aead(key).decrypt(bytes.fromhex(nonce), body, blob[:len(blob) - len(body)])
    except (InvalidTag, ValueError):
        raise SyncError(f"{what} fails authentication: tampered or damaged") from None
    inflate = zlib.decompressobj()
    try:
        data = inflate.decompress(plain, MAX_PLAIN)
    except zlib.error:
        raise SyncError(f"{what} is damaged") from None
    if inflate.unconsumed_tail:
        raise SyncError(f"{what} inflates to more than {MAX_PLAIN:,} bytes; refused")
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise SyncError(f"{what} is damaged (not JSON)") from None


def written_by(key: bytes, blob: bytes, device: str, seq: int) -> str:
    """Who could have written `blob` as device/seq: "key" (it opens with the key: a key holder
    wrote it as that device), or a one-line reason it is not a key holder's file."""
    try:
        open_sealed(key, blob, device, seq, f"changeset {device}/{seq}")
    except WrongKey:
        return "sealed with another key"
    except SyncError as exc:
        return str(exc)
    return "key"


def seal_keycheck(key: bytes) -> bytes:
    return seal(key, "keycheck", 0, json.loads(KEYCHECK))


def check_key(key: bytes, blob: bytes) -> None:
    """Raise WrongKey unless `key` opens the remote's key-check file (before anything is written)."""
    try:
        payload = open_sealed(key, blob, "keycheck", 0, "the remote's key check")
    except WrongKey:
        raise WrongKey("wrong key: it does not open this remote's files (nothing was written)") from None
    except SyncError:
        raise WrongKey("wrong key: it does not open this remote's key check (nothing was written)") from None
    if payload != json.loads(KEYCHECK):
        raise WrongKey("wrong key: the remote's key check holds something else (nothing was written)")
