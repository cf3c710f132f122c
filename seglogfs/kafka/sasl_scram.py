"""SCRAM-SHA-256 (RFC 5802 with RFC 7677's hash), the server side, as Kafka's SASL mechanism.

The server keeps only a salted credential per user (salt, iterations, StoredKey, ServerKey), never
the password: StoredKey = H(ClientKey) lets it check a client's proof, ServerKey lets it prove
itself. :func:`make_credential` derives one from a password (``seglogfs kafka-user add``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections import Counter
from dataclasses import dataclass

__all__ = [
    "MECHANISM",
    "MIN_ITERATIONS",
    "ScramCredential",
    "ScramError",
    "ScramExchange",
    "make_credential",
]

MECHANISM = "SCRAM-SHA-256"
MIN_ITERATIONS = 4096  # RFC 7677's minimum, and Kafka's for SCRAM-SHA-256
DEFAULT_ITERATIONS = 8192
_HASH = "sha256"
_KEY_BYTES = 32


class ScramError(ValueError):
    """A client message that fails the exchange (malformed, or a proof that does not match)."""


@dataclass(frozen=True, repr=False)
class ScramCredential:
    """One user's stored SCRAM-SHA-256 credential. Its keys are secrets (with a recorded exchange,
    StoredKey lets one log in), so its repr leaves them out."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __post_init__(self) -> None:
        if self.iterations < MIN_ITERATIONS:
            raise ValueError(f"iterations {self.iterations}: at least {MIN_ITERATIONS}")
        if len(self.stored_key) != _KEY_BYTES or len(self.server_key) != _KEY_BYTES:
            raise ValueError(f"stored_key and server_key must be {_KEY_BYTES} bytes (SHA-256)")
        if len(self.salt) < 16:
            raise ValueError("salt must be at least 16 bytes")

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations}, keys hidden)"

    def to_yaml_fields(self) -> dict[str, object]:
        """The entry's fields as the daemon config writes them (base64 bytes)."""
        return {
            "salt": base64.b64encode(self.salt).decode(),
            "iterations": self.iterations,
            "stored_key": base64.b64encode(self.stored_key).decode(),
            "server_key": base64.b64encode(self.server_key).decode(),
        }


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, _HASH).digest()


def make_credential(
    password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """The stored credential of ``password`` (a fresh random salt unless given)."""
    salt = secrets.token_bytes(32) if salt is None else salt
    # RFC 5802 asks for SASLprep of the password; Kafka's clients send it as UTF-8 unchanged.
    salted = hashlib.pbkdf2_hmac(_HASH, password.encode(), salt, iterations)
    client_key = _hmac(salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        iterations=iterations,
        stored_key=hashlib.sha256(client_key).digest(),
        server_key=_hmac(salted, b"Server Key"),
    )


def _attributes(message: str, what: str) -> dict[str, str]:
    """``a=value,b=value`` as a dict (values may contain '='; never ',')."""
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed {what}")
        out.setdefault(part[0], part[2:])
    return out


def _username(text: str) -> str:
    """A SCRAM ``saslname`` unescaped (``=2C`` is ',', ``=3D`` is '='; any other '=' is malformed)."""
    out, at = [], 0
    while at < len(text):
        if text[at] == "=":
            code = text[at : at + 3]
            if code not in ("=2C", "=3D"):
                raise ScramError("malformed user name")
            out.append("," if code == "=2C" else "=")
            at += 3
        else:
            out.append(text[at])
            at += 1
    return "".join(out)


class ScramExchange:
    """One SCRAM-SHA-256 authentication: :meth:`first` answers the client-first message,
    :meth:`final` checks the client-final message's proof and answers the server signature.

    An unknown user gets a made-up salt (the same one for that name during this exchange's process),
    so the answer to the first message does not tell which users exist; its proof then fails as a
    wrong password does."""

    _decoy_key = secrets.token_bytes(32)

    def __init__(self, users: dict[str, ScramCredential], server_nonce: str | None = None) -> None:
        """``server_nonce``: the server's part of the nonce (random unless given, for RFC test vectors)."""
        self._users = users
        self._server_nonce = server_nonce
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._known = False
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self._nonce = ""

    def first(self, message: bytes) -> bytes:
        """The server-first message for the client-first ``message``."""
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-first message is not UTF-8") from None
        # gs2-header: "n,," or "y,," (no channel binding; "p=" asks for one, which Kafka has not)
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag not in ("n", "y"):
            raise ScramError("client-first message: expected a gs2 header n,, or y,, (no channel binding)")
        if authzid and not authzid.startswith("a="):
            raise ScramError("malformed authorization id")
        attrs = _attributes(bare, "client-first message")
        if "m" in attrs:
            raise ScramError("mandatory extension not supported")
        if "n" not in attrs or "r" not in attrs or not attrs["r"] or not attrs["n"]:
            raise ScramError("client-first message without a user name or nonce")
        user = _username(attrs["n"])
        if authzid and _username(authzid[2:]) != user:
            raise ScramError("authorization id differs from the user name")
        if "tokenauth" in attrs and attrs["tokenauth"].lower() == "true":
            raise ScramError("delegation tokens are not supported")
        credential = self._users.get(user)
        self._known = credential is not None
        if credential is None:
            decoy = _hmac(self._decoy_key, user.encode())
            # the users' most common iteration count, so that the answer looks like theirs
            counts = Counter(known.iterations for known in self._users.values())
            iterations = counts.most_common(1)[0][0] if counts else DEFAULT_ITERATIONS
            credential = ScramCredential(decoy, iterations, decoy, decoy)
        self.user, self._credential = user, credential
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = attrs["r"] + (self._server_nonce or secrets.token_urlsafe(24))
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        """The server-final message (``v=`` signature) for the client-final ``message``; ScramError
        when the channel binding, nonce or proof is wrong."""
        if self._credential is None:
            raise ScramError("client-final message before the client-first one")
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-final message is not UTF-8") from None
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final message without a proof")
        attrs = _attributes(without_proof, "client-final message")
        expected_binding = base64.b64encode(self._gs2_header.encode()).decode()
        if attrs.get("c") != expected_binding:
            raise ScramError("channel binding does not match the gs2 header")
        # the nonce must end with the one sent: librdkafka 2.0 (Debian's kcat) repeats the client's
        # part in front. All of it is under the proof (AuthMessage), and the fresh server part ends
        # it, so a replayed final message still fails.
        if not attrs.get("r", "").endswith(self._nonce):
            raise ScramError("nonce does not match")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("malformed proof") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        client_signature = _hmac(credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        matches = hmac.compare_digest(hashlib.sha256(client_key).digest(), credential.stored_key)
        if not (matches and self._known):
            raise ScramError("invalid credentials")
        signature = base64.b64encode(_hmac(credential.server_key, auth_message)).decode()
        return f"v={signature}".encode()
