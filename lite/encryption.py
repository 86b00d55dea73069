"""Model protection: a .ms file encrypted with AES-GCM under the user's key (converter_lite --encryptKey, MindSpore
Lite's flag; Model.build_from_file(..., dec_key=...)). The `cryptography` package does the cipher work.

Layout: a 40-byte header (magic b"MSLENC01", chunk size u32, chunk count u64, plaintext size u64, a random 8-byte
nonce prefix, 4 reserved bytes), then the chunks, each its ciphertext followed by its 16-byte GCM tag. Chunk i is
sealed with nonce = prefix || i (big-endian u32) and, as associated data, the header and i with a flag for the last
chunk, so a changed byte anywhere, chunks swapped, dropped or appended, or a wrong key all fail the tag check. Chunks
(16 MiB) keep memory flat: a model is encrypted and decrypted a chunk at a time."""
from __future__ import annotations

import os
import struct
from typing import BinaryIO

from ._memfile import anonymous_fd

MAGIC = b"MSLENC01"
HEADER = struct.Struct("<8sIQQ8s4x")   # magic, chunk size, chunks, plaintext size, nonce prefix
TAG_BYTES = 16
CHUNK_BYTES = 16 << 20
KEY_BYTES = (16, 24, 32)   # AES-128 / 192 / 256


class DecryptionError(ValueError):
    """A wrong key, or an encrypted model that was changed."""


def parse_key(key: str | bytes | bytearray) -> bytes:
    """A key given as hex text (converter_lite's --encryptKey) or as raw bytes: 16, 24 or 32 bytes."""
    if isinstance(key, str):
        text = key.strip()
        if text[:2].lower() == "0x":
            text = text[2:]
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raise ValueError("the key must be hexadecimal text (32, 48 or 64 hex digits: a 16, 24 or 32-byte AES "
                             "key)") from None
    elif isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
    else:
        raise TypeError(f"the key must be hex text or bytes, got {type(key).__name__}")
    if len(raw) not in KEY_BYTES:
        raise ValueError(f"the key holds {len(raw)} bytes; AES-GCM takes 16, 24 or 32")
    return raw


def _aesgcm(key: bytes):
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise NotImplementedError("encrypted models need the 'cryptography' package (pip install cryptography)") \
            from None
    return AESGCM(key)


def _aad(header: bytes, index: int, last: bool) -> bytes:
    return header + struct.pack("<QB", index, 1 if last else 0)


def is_encrypted(path: str | os.PathLike) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def encrypt_stream(src: BinaryIO, size: int, dst: BinaryIO, key: bytes) -> None:
    """Encrypts `size` bytes read from `src` into `dst`."""
    cipher = _aesgcm(key)
    chunks = max(1, -(-size // CHUNK_BYTES))
    prefix = os.urandom(8)
    header = HEADER.pack(MAGIC, CHUNK_BYTES, chunks, size, prefix)
    dst.write(header)
    for i in range(chunks):
        data = src.read(min(CHUNK_BYTES, size - i * CHUNK_BYTES))
        dst.write(cipher.encrypt(prefix + struct.pack(">I", i), data, _aad(header, i, i == chunks - 1)))


def decrypt_stream(src: BinaryIO, dst: BinaryIO, key: bytes, name: str = "model") -> int:
    """Decrypts an encrypted model read from `src` into `dst`; returns the plaintext size. DecryptionError on a wrong
    key or changed bytes (nothing of a chunk that fails its check is written)."""
    from cryptography.exceptions import InvalidTag
    cipher = _aesgcm(key)
    header = src.read(HEADER.size)
    if len(header) < HEADER.size:
        raise DecryptionError(f"{name}: truncated encrypted model (no header)")
    magic, chunk_bytes, chunks, size, prefix = HEADER.unpack(header)
    if magic != MAGIC:
        raise DecryptionError(f"{name}: not an encrypted model")
    if chunk_bytes == 0 or chunk_bytes > 1 << 30 or chunks != max(1, -(-size // chunk_bytes)):
        raise DecryptionError(f"{name}: the encrypted model's header is invalid (changed?)")
    for i in range(chunks):
        want = min(chunk_bytes, size - i * chunk_bytes) + TAG_BYTES
        sealed = src.read(want)
        if len(sealed) != want:
            raise DecryptionError(f"{name}: the encrypted model is truncated (chunk {i} of {chunks})")
        try:
            dst.write(cipher.decrypt(prefix + struct.pack(">I", i), sealed, _aad(header, i, i == chunks - 1)))
        except InvalidTag:
            raise DecryptionError(f"{name}: decryption failed: the key is wrong or the file was changed "
                                  f"(chunk {i} of {chunks} fails its AES-GCM tag)") from None
    if src.read(1):
        raise DecryptionError(f"{name}: the encrypted model has bytes after its last chunk (changed?)")
    return size


def decrypted_fd(path: str, key: str | bytes) -> int:
    """An anonymous in-memory file (memfd; an unlinked temporary file where there is none) holding the decrypted model:
    the plaintext never gets a name on disk. The caller closes it once the runtime has mapped it."""
    raw = parse_key(key)
    fd = anonymous_fd("lite_model")
    try:
        with open(path, "rb") as src, os.fdopen(os.dup(fd), "wb") as dst:
            decrypt_stream(src, dst, raw, name=f"'{path}'")
    except BaseException:
        os.close(fd)
        raise
    return fd
