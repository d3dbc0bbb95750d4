"""Private payloads: an AES-256-GCM payload codec and the keys it uses.

Temporal stores every workflow input, activity result, update argument and report in its
history, in plain JSON unless a payload codec encodes them on the client and worker side.
With a key configured, every payload leaves the process encrypted: the server (and anyone
reading its database or Temporal Web without the key) sees only ciphertext, and the key
never leaves the processes that were given it.

Keys rotate. Each encrypted payload names, in its metadata, the id of the key that
encrypted it (``encryption-key-id``); the *current* key encrypts, and every configured key
decodes. Adding a new current key while keeping the old one listed lets running plans and
old histories decode; once nothing needs the old key any more, it can be dropped.

Configuration (read by ``Settings.from_env`` through ``keyring_from_env``):

* ``DPLAN_PAYLOAD_KEY``: the current key, as ``KEY`` or ``ID=KEY``;
* ``DPLAN_PAYLOAD_KEY_FILE``: a file of keys, one ``ID=KEY`` (or ``KEY``) per line,
  blank lines and ``#`` comments ignored; the first key is the current one, the others
  only decode (not together with ``DPLAN_PAYLOAD_KEY``: one place says which is current);
* ``DPLAN_PAYLOAD_KEYS``: further decode-only keys, ``ID=KEY`` entries separated by
  commas or whitespace (for deployments that configure everything through environment).

A ``KEY`` is 32 random bytes written as 64 hex digits or as base64 (standard or URL-safe,
padding optional): ``openssl rand -base64 32``. A key given without an id gets
``sha256:`` + the first 12 hex digits of its SHA-256 as its id, so two unnamed keys never
share one; naming keys (``2025-06=...``) makes rotation easier to follow.

Wire format of an encrypted payload: metadata ``encoding: binary/encrypted`` and
``encryption-key-id: ID``; data ``nonce (12 random bytes) || AES-GCM(serialized inner
Payload)``, with the key id as associated data (a payload whose key id was altered fails
to decrypt instead of being tried under another key). Payloads that are not encrypted pass
through decoding unchanged, so histories written before encryption was enabled still read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from google.protobuf.message import Message as ProtoMessage
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from durable_plans._errors import PayloadKeyError

__all__ = [
    "ENCODING",
    "KEY_ID_METADATA",
    "EncryptionCodec",
    "PayloadKeyError",
    "PayloadKeyring",
    "generate_key",
    "key_ids_in",
    "keyring_from_env",
    "parse_key",
    "parse_key_entries",
]

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
KEY_BYTES = 32
NONCE_BYTES = 12

ENV_KEY = "DPLAN_PAYLOAD_KEY"
ENV_KEY_FILE = "DPLAN_PAYLOAD_KEY_FILE"
ENV_KEYS = "DPLAN_PAYLOAD_KEYS"

_KEY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
_FORMAT_HINT = (
    "a key is 32 bytes written as 64 hex digits or as base64 "
    "(e.g. the output of `openssl rand -base64 32`)"
)


def generate_key() -> str:
    """A new random key, base64-encoded (what ``DPLAN_PAYLOAD_KEY`` takes)."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def _fingerprint_id(key: bytes) -> str:
    # 48 bits of a hash of a 256-bit random key identify it without revealing it.
    return "sha256:" + hashlib.sha256(key).hexdigest()[:12]


def _decode_key(text: str) -> bytes | None:
    """The key bytes ``text`` writes, or None when it is neither hex nor base64 of 32
    bytes."""
    if _HEX.match(text):
        return bytes.fromhex(text)
    candidate = text.replace("-", "+").replace("_", "/")  # URL-safe alphabet
    candidate += "=" * (-len(candidate) % 4)
    try:
        raw = base64.b64decode(candidate, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == KEY_BYTES else None


def _describe_bad_key(text: str) -> str:
    """Why ``text`` is not a key, in words that do not repeat it."""
    if re.fullmatch(r"[0-9a-fA-F]+", text):
        return f"{len(text)} hex digits (need 64)"
    candidate = text.replace("-", "+").replace("_", "/")
    candidate += "=" * (-len(candidate) % 4)
    try:
        raw = base64.b64decode(candidate, validate=True)
    except (binascii.Error, ValueError):
        return "neither hex nor base64"
    return f"base64 of {len(raw)} bytes (need {KEY_BYTES})"


def parse_key(entry: str, source: str) -> tuple[str, bytes]:
    """``(key id, key)`` from one ``KEY`` or ``ID=KEY`` entry; ``source`` names where it
    came from in the error (a variable, ``file:line``).

    A whole entry that decodes as a key is a key without id: base64 may end in ``=``
    padding but never holds one in the middle, so ``ID=KEY`` cannot be mistaken for one.
    """
    text = entry.strip()
    if not text:
        raise PayloadKeyError(f"{source}: empty key; {_FORMAT_HINT}")
    key = _decode_key(text)
    if key is not None:
        return _fingerprint_id(key), key
    key_id, sep, rest = text.partition("=")
    key_id, rest = key_id.strip(), rest.strip()
    if not rest.strip("="):
        # Only base64 padding after the '=': a (bad) key without id, whose text must not
        # be shown as if it were an id.
        sep = rest = ""
    if sep and rest and _KEY_ID.match(key_id):
        key = _decode_key(rest)
        if key is None:
            raise PayloadKeyError(
                f"{source}: key '{key_id}' is {_describe_bad_key(rest)}; {_FORMAT_HINT}"
            )
        return key_id, key
    if sep and rest and not _KEY_ID.match(key_id):
        raise PayloadKeyError(
            f"{source}: a key id is 1-64 letters, digits, '.', '_', ':' or '-' "
            "(starting with a letter or digit), before the '='"
        )
    raise PayloadKeyError(f"{source}: the key is {_describe_bad_key(text)}; {_FORMAT_HINT}")


def parse_key_entries(text: str, source: str, *, lines: bool) -> list[tuple[str, bytes]]:
    """Keys from a file's text (``lines``: one per line, ``#`` comments) or from a
    variable's value (entries separated by commas or whitespace)."""
    found: list[tuple[str, bytes]] = []
    if lines:
        for number, line in enumerate(text.splitlines(), start=1):
            content = line.split("#", 1)[0].strip()
            if content:
                found.append(parse_key(content, f"{source}:{number}"))
    else:
        for index, item in enumerate(re.split(r"[,\s]+", text.strip()), start=1):
            if item:
                found.append(parse_key(item, f"{source} (entry {index})"))
    return found


class PayloadKeyring:
    """The configured keys: one current (it encrypts), all of them decode.

    Its ``repr`` shows key ids only: a keyring may end up in a log line or a traceback.
    """

    __slots__ = ("_keys", "current_id")

    def __init__(self, current_id: str, keys: Mapping[str, bytes]) -> None:
        if current_id not in keys:
            raise PayloadKeyError(f"the current key id '{current_id}' has no key")
        for key_id, key in keys.items():
            if len(key) != KEY_BYTES:
                raise PayloadKeyError(f"key '{key_id}' is {len(key)} bytes, not {KEY_BYTES}")
        self.current_id = current_id
        self._keys = dict(keys)

    @classmethod
    def from_entries(cls, entries: Sequence[tuple[str, bytes]]) -> PayloadKeyring:
        """The first entry is current; an id listed twice must name the same key."""
        if not entries:
            raise PayloadKeyError("no payload key given")
        keys: dict[str, bytes] = {}
        for key_id, key in entries:
            if keys.get(key_id, key) != key:
                raise PayloadKeyError(f"key id '{key_id}' is given twice with different keys")
            keys[key_id] = key
        return cls(entries[0][0], keys)

    @property
    def ids(self) -> tuple[str, ...]:
        """Every key id, the current one first."""
        return (self.current_id, *(k for k in self._keys if k != self.current_id))

    def key(self, key_id: str) -> bytes | None:
        return self._keys.get(key_id)

    def codec(self) -> EncryptionCodec:
        return EncryptionCodec(self)

    def __repr__(self) -> str:
        return f"PayloadKeyring(current={self.current_id!r}, ids={list(self.ids)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PayloadKeyring):
            return NotImplemented
        return self.current_id == other.current_id and self._keys == other._keys

    def __hash__(self) -> int:
        return hash((self.current_id, tuple(sorted(self._keys))))


def keyring_from_env(env: Mapping[str, str]) -> PayloadKeyring | None:
    """The keys ``DPLAN_PAYLOAD_KEY`` / ``_KEY_FILE`` / ``_KEYS`` configure, or None when
    none is set (payloads stay plain). Raises ``PayloadKeyError`` saying what is wrong."""
    single = env.get(ENV_KEY, "").strip()
    file_name = env.get(ENV_KEY_FILE, "").strip()
    extra = env.get(ENV_KEYS, "").strip()
    if not (single or file_name or extra):
        return None
    if single and file_name:
        raise PayloadKeyError(
            f"set {ENV_KEY} or {ENV_KEY_FILE}, not both: the first key of the file is the "
            f"current one (list older keys after it, or in {ENV_KEYS})"
        )
    entries: list[tuple[str, bytes]] = []
    if single:
        entries.append(parse_key(single, ENV_KEY))
    elif file_name:
        path = Path(file_name).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise PayloadKeyError(
                f"{ENV_KEY_FILE}: cannot read {path}: {err.strerror or err}"
            ) from None
        from_file = parse_key_entries(text, str(path), lines=True)
        if not from_file:
            raise PayloadKeyError(f"{ENV_KEY_FILE}: {path} holds no key")
        entries.extend(from_file)
    else:
        raise PayloadKeyError(
            f"{ENV_KEYS} lists keys that only decode; set {ENV_KEY} (or {ENV_KEY_FILE}) "
            "to the key that encrypts"
        )
    if extra:
        entries.extend(parse_key_entries(extra, ENV_KEYS, lines=False))
    return PayloadKeyring.from_entries(entries)


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole payloads, with the key id in each payload's metadata.

    Encoding uses the keyring's current key; decoding uses the key the payload names and
    fails with a ``PayloadKeyError`` naming that id when it is not configured. Payloads
    without the ``binary/encrypted`` encoding are returned as they are.
    """

    def __init__(self, keyring: PayloadKeyring) -> None:
        # Imported here: only a process with a key configured pays for it.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.keyring = keyring
        self._ciphers = {kid: AESGCM(keyring.key(kid) or b"") for kid in keyring.ids}
        self._current = self._ciphers[keyring.current_id]
        self._current_id = keyring.current_id.encode("utf-8")

    def __repr__(self) -> str:
        return f"EncryptionCodec({self.keyring!r})"

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._current.encrypt(nonce, payload.SerializeToString(), self._current_id)
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: self._current_id},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        raw_id = payload.metadata.get(KEY_ID_METADATA)
        if raw_id is None:
            raise PayloadKeyError(
                f"an encrypted payload has no '{KEY_ID_METADATA}' metadata: it was not "
                "written by this codec"
            )
        key_id = raw_id.decode("utf-8", errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise PayloadKeyError(
                f"payload encrypted with key id '{key_id}', which is not among the configured "
                f"keys ({', '.join(repr(k) for k in self.keyring.ids)}); add that key to "
                f"{ENV_KEY_FILE} or {ENV_KEYS}"
            )
        from cryptography.exceptions import InvalidTag

        data = payload.data
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], raw_id)
        except InvalidTag:
            raise PayloadKeyError(
                f"payload encrypted with key id '{key_id}' does not decrypt with the key "
                "configured under that id (a different key with the same id, or altered data)"
            ) from None
        return Payload.FromString(plain)


def _payloads(message: ProtoMessage) -> Iterator[Payload]:
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            yield from (
                p for v in value.values() if isinstance(v, ProtoMessage) for p in _payloads(v)
            )
        elif isinstance(value, ProtoMessage):
            yield from _payloads(value)
        else:  # a repeated message field
            for item in value:
                yield from _payloads(item)


def key_ids_in(messages: Iterable[ProtoMessage]) -> set[str]:
    """The key ids of every encrypted payload inside ``messages`` (history events, say):
    what a reader needs before it can decode them."""
    return {
        p.metadata[KEY_ID_METADATA].decode("utf-8", errors="replace")
        for m in messages
        for p in _payloads(m)
        if p.metadata.get("encoding") == ENCODING and KEY_ID_METADATA in p.metadata
    }
