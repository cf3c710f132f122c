"""A SASL listener connection until it is authenticated (``docs/kafka-listener.md`` section 9).

As a Kafka broker: before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are
served and any other request closes the connection; SaslHandshake v1 is followed by SaslAuthenticate
requests carrying the SCRAM messages, v0 by the bare SCRAM messages in size-prefixed frames. A
failed exchange is answered SASL_AUTHENTICATION_FAILED (58) and the connection is closed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from .api_versions import API_VERSIONS, SUPPORTED, api_versions_response
from .framing import FrameError, frame, parse_request_header, peek_api, response_header
from .messages import decode_request, encode, encode_frame, make, request_class, response_class
from .sasl_scram import MECHANISM, ScramCredential, ScramError, ScramExchange

__all__ = ["PRE_AUTH_MAX_BYTES", "SASL_APIS", "SaslSession"]

log = logging.getLogger("seglogfs.kafka")

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_APIS: dict[int, tuple[int, int]] = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}
#: the table a SASL listener announces
SASL_LISTENER_APIS: dict[int, tuple[int, int]] = {**SUPPORTED, **SASL_APIS}
#: the largest request read before authentication (Kafka's ``sasl.server.max.receive.size``)
PRE_AUTH_MAX_BYTES = 524_288
FAILED = (
    f"Authentication failed during authentication due to invalid credentials with SASL mechanism {MECHANISM}"
)


class SaslSession:
    """One connection's SASL state. :meth:`handle` answers a frame while :attr:`authenticated` is
    false (and ApiVersions always, so the table stays the same)."""

    def __init__(self, users: Mapping[str, ScramCredential], peer: object) -> None:
        self.authenticated = False
        self.user: str | None = None
        self._exchange = ScramExchange(dict(users))
        self._peer = peer
        self._handshake_version: int | None = None
        self._step = 0

    def handle(self, buf: bytes) -> tuple[bytes | None, bool]:
        """The response frame to ``buf`` and whether the connection closes after it. FrameError:
        close at once (a request other than the three before authentication)."""
        if self._handshake_version == 0 and not self.authenticated:
            return self._raw_token(buf)
        api_key, version, correlation_id = peek_api(buf)
        if api_key == API_VERSIONS:
            low, high = SASL_LISTENER_APIS[API_VERSIONS]
            ok = low <= version <= high
            error = ErrorCode.none if ok else ErrorCode.unsupported_version
            body = api_versions_response(version if ok else 0, error, SASL_LISTENER_APIS)
            return frame(response_header(correlation_id, False, api_key), encode(body)), False
        bounds = SASL_APIS.get(api_key)
        if self.authenticated or bounds is None or not bounds[0] <= version <= bounds[1]:
            raise FrameError(f"api key {api_key} version {version} before SASL authentication")
        cls: Any = request_class(api_key, version)  # a kio request class: __flexible__ and its fields
        header = parse_request_header(buf, cls.__flexible__)
        try:
            request = decode_request(cls, buf, header.body_at)
        except Exception as exc:  # kio raises what its parsers meet: any of them means malformed
            raise FrameError(f"malformed {cls.__name__} v{version}: {exc!r}") from None
        head = response_header(correlation_id, cls.__flexible__, api_key)
        if api_key == SASL_HANDSHAKE:
            return self._handshake(head, version, request.mechanism)
        return self._authenticate(head, version, request.auth_bytes)

    def _handshake(self, head: bytes, version: int, mechanism: str) -> tuple[bytes, bool]:
        cls = response_class(SASL_HANDSHAKE, version)
        if self._handshake_version is not None:
            return encode_frame(head, make(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=())), True
        if mechanism != MECHANISM:
            log.warning("Kafka listener: %s asked for SASL mechanism %r; closing", self._peer, mechanism)
            response = make(cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=(MECHANISM,))
            return encode_frame(head, response), True
        self._handshake_version = version
        return encode_frame(head, make(cls, error_code=ErrorCode.none, mechanisms=(MECHANISM,))), False

    def _authenticate(self, head: bytes, version: int, token: bytes) -> tuple[bytes, bool]:
        cls = response_class(SASL_AUTHENTICATE, version)
        if self._handshake_version != 1:
            response = make(cls, error_code=ErrorCode.illegal_sasl_state, auth_bytes=b"",
                            error_message="SaslAuthenticate before a SaslHandshake v1",
                            session_lifetime=timedelta(0))
            return encode_frame(head, response), True
        try:
            answer = self._step_exchange(token)
        except ScramError:
            response = make(cls, error_code=ErrorCode.sasl_authentication_failed, error_message=FAILED,
                            auth_bytes=b"", session_lifetime=timedelta(0))
            return encode_frame(head, response), True
        # session lifetime 0: no re-authentication (KIP-368) is asked of the client
        response = make(cls, error_code=ErrorCode.none, error_message=None, auth_bytes=answer,
                        session_lifetime=timedelta(0))
        return encode_frame(head, response), False

    def _raw_token(self, buf: bytes) -> tuple[bytes | None, bool]:
        try:
            return frame(self._step_exchange(buf)), False
        except ScramError:
            return None, True  # Kafka closes a v0 exchange that fails, without an answer

    def _step_exchange(self, token: bytes) -> bytes:
        """The next SCRAM message; ScramError (logged) when the exchange fails."""
        try:
            if self._step == 0:
                self._step = 1
                return self._exchange.first(token)
            if self._step == 1:
                self._step = 2
                answer = self._exchange.final(token)
                self.authenticated, self.user = True, self._exchange.user
                log.info("Kafka listener: %s authenticated as %r (%s)", self._peer, self.user, MECHANISM)
                return answer
            raise ScramError("message after the exchange ended")
        except ScramError as exc:
            log.warning("Kafka listener: SASL authentication of %s (user %r) failed: %s",
                        self._peer, self._exchange.user, exc)
            raise
