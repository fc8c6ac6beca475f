"""Signing a version off: an ed25519 signature by a key that lives outside the data folder.

Each reviewer has one key, made on their first sign-off, under the user's configuration folder
(``$PHENOFORGE_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/phenoforge``, else ``~/.config/phenoforge``), in
``keys/<hash of the name>.pem``: created with permissions 0600 in a folder of 0700, never replaced. A version
records the public half of the key it was signed with, and every read verifies the signature over the
version's content (everything but the digest and the signature) and checks that the public key is the one
this computer holds for the reviewer the version names.

What this proves, and what it does not: a version that verifies was signed with the key this computer holds
for the reviewer it names, so someone who edited the file without that key (a code changed, the reviewer's name
changed, the digest recomputed) cannot make it verify. It does not prove who typed at the keyboard: anyone who
can read the key file can sign as that reviewer. Moving keys between computers, trusting another computer's
keys, revoking a key: none of that is done here (a version signed elsewhere reads as signed with a key this
computer does not know, and is not shown as signed off).
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path
from typing import Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel

from phenoforge.errors import PhenoforgeError

CONFIG_ENV = "PHENOFORGE_CONFIG_DIR"
MAX_KEY_BYTES = 4096

SignatureState = Literal["verified", "unsigned", "bad", "unknown-key", "unchecked"]


class SigningError(PhenoforgeError):
    """A reviewer's key cannot be made or read (the message says where and why)."""


class SignatureCheck(BaseModel):
    """What a version's signature says when it was read."""

    state: SignatureState
    message: str

    @property
    def verified(self) -> bool:
        return self.state == "verified"


UNCHECKED = SignatureCheck(state="unchecked", message="the signature was not checked")
VERIFIED = SignatureCheck(state="verified", message="signature verified with the reviewer's key on this computer")


def config_dir() -> Path:
    """The user's phenoforge configuration folder (never under the data folder)."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME")
    return (Path(base) if base else Path.home() / ".config") / "phenoforge"


def keys_dir() -> Path:
    return config_dir() / "keys"


def key_path(reviewer: str) -> Path:
    """The reviewer's key file (named by a hash of the name, which may hold any letter)."""
    return keys_dir() / f"{hashlib.sha256(reviewer.encode('utf-8')).hexdigest()[:32]}.pem"


def _public_text(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def _read_key(path: Path) -> Ed25519PrivateKey:
    """The key at ``path``: a regular file (not a link) only its owner can read or write."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise SigningError(f"cannot read the signing key {path} ({error.strerror or error})") from None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise SigningError(f"the signing key {path} is not a regular file")
        if info.st_mode & 0o077:
            raise SigningError(
                f"the signing key {path} can be read or written by other users (mode {stat.S_IMODE(info.st_mode):o}):"
                f" make it private (`chmod 600 {path}`); moving it aside makes a new key, and the versions signed"
                " with this one then no longer verify here"
            )
        data = os.read(handle, MAX_KEY_BYTES + 1)
    finally:
        os.close(handle)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"the signing key {path} is not an ed25519 key phenoforge wrote")
    return key


def signing_key(reviewer: str) -> Ed25519PrivateKey:
    """The reviewer's key, made on their first sign-off (0600, in a folder of 0700); never replaced."""
    path = key_path(reviewer)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise SigningError(
            f"cannot make the folder for signing keys {path.parent} ({error.strerror or error})"
        ) from None
    if os.path.lexists(path):
        return _read_key(path)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # another sign-off made it meanwhile: use that one
        return _read_key(path)
    except OSError as error:
        raise SigningError(f"cannot make the signing key {path} ({error.strerror or error})") from None
    try:
        os.write(handle, pem)
        os.fsync(handle)
    finally:
        os.close(handle)
    return key


def known_public_key(reviewer: str) -> str | None:
    """The public half of the key this computer holds for ``reviewer``; None when it holds none (or it is
    unreadable: then nothing signed by that reviewer verifies here)."""
    path = key_path(reviewer)
    if not os.path.lexists(path):
        return None
    try:
        return _public_text(_read_key(path).public_key())
    except SigningError:
        return None


def key_problem(reviewer: str) -> str | None:
    """Why the key this computer holds for ``reviewer`` cannot be used (its mode, its kind), None when it can
    or when there is none: a reader is told that, not that the key is missing."""
    path = key_path(reviewer)
    if not os.path.lexists(path):
        return None
    try:
        _read_key(path)
    except SigningError as error:
        return str(error)
    return None


def sign(content: bytes, key: Ed25519PrivateKey) -> tuple[str, str]:
    """(signature, public key), both base64."""
    return base64.b64encode(key.sign(content)).decode("ascii"), _public_text(key.public_key())


def public_key_of(key: Ed25519PrivateKey) -> str:
    return _public_text(key.public_key())


def verify(content: bytes, reviewer: str, signature: str, public_key: str) -> SignatureCheck:
    """Whether ``signature`` signs ``content`` with ``public_key``, and that key is the reviewer's here."""
    if not signature or not public_key:
        return SignatureCheck(state="unsigned", message="not signed: it carries no signature (not signed off)")
    try:
        key = Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key, validate=True))
        key.verify(base64.b64decode(signature, validate=True), content)
    except (InvalidSignature, ValueError):
        return SignatureCheck(
            state="bad",
            message="badly signed: the signature does not match the content (edited after sign-off?); not signed off",
        )
    exposed = key_problem(reviewer)
    if exposed is not None:
        return SignatureCheck(state="unknown-key", message=f"not verified here: {exposed}")
    known = known_public_key(reviewer)
    if known is None:
        return SignatureCheck(
            state="unknown-key",
            message="signed with a key this computer does not hold for the reviewer it names: not verified here, "
            "not shown as signed off",
        )
    if known != public_key:
        return SignatureCheck(
            state="bad",
            message="badly signed: the key is not the one this computer holds for the reviewer it names; "
            "not signed off",
        )
    return VERIFIED
