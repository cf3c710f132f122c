"""One request frame in, one response frame out (or none): the header, the API's schema from kio,
the handler, the response header. Everything a handler needs is on the :class:`Broker`."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from .api_versions import (
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DESCRIBE_CONFIGS,
    FETCH,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    SUPPORTED,
    api_versions_response,
    supports,
)
from .context import BrokerState
from .create_topics import create_topics
from .delete_records import delete_records
from .describe_configs import describe_configs
from .fetch import fetch
from .framing import FrameError, frame, parse_request_header, peek_api, response_header
from .group_apis import CLIENT_ID, GROUP_HANDLERS
from .init_producer_id import init_producer_id
from .list_offsets import list_offsets
from .messages import decode_request, encode, encode_frame, request_class
from .metadata import metadata
from .produce import produce
from .spliced_frame import SplicedBody, SplicedFrame, splice

__all__ = ["Broker"]

log = logging.getLogger("seglogfs.kafka")

Handler = Callable[[BrokerState, Any, int], Any]

_HANDLERS: dict[int, Handler] = {
    PRODUCE: produce,
    FETCH: fetch,
    LIST_OFFSETS: list_offsets,
    METADATA: metadata,
    API_VERSIONS: lambda broker, request, version: api_versions_response(version),
    CREATE_TOPICS: create_topics,
    DELETE_RECORDS: delete_records,
    INIT_PRODUCER_ID: init_producer_id,
    DESCRIBE_CONFIGS: describe_configs,
    **GROUP_HANDLERS,
}
assert set(_HANDLERS) == set(SUPPORTED)


class Broker(BrokerState):
    """The state, and the dispatch of one request frame to its handler."""

    async def handle(self, buf: bytes) -> bytes | SplicedFrame | None:
        """The response frame to the request frame ``buf`` (without its size), None when the request
        gets none (Produce with acks=0); a Fetch's large records stay in the files (SplicedFrame).
        FrameError: close the connection (Kafka's answer to a request it cannot read, or to an API
        or version it does not serve)."""
        api_key, version, correlation_id = peek_api(buf)
        if api_key == API_VERSIONS and not supports(api_key, version):
            # Kafka answers an ApiVersions it does not know in v0, so the client can pick a version.
            body = encode(api_versions_response(0, ErrorCode.unsupported_version))
            return frame(response_header(correlation_id, False, api_key), body)
        if not supports(api_key, version):
            raise FrameError(f"api key {api_key} version {version} is not served")
        cls = request_class(api_key, version)
        header = parse_request_header(buf, cls.__flexible__)
        try:
            request = decode_request(cls, buf, header.body_at)
        except Exception as exc:  # kio raises what its parsers meet: any of them means malformed
            raise FrameError(f"malformed {cls.__name__} v{version}: {exc!r}") from None
        CLIENT_ID.set(header.client_id or "")
        result = _HANDLERS[api_key](self, request, version)
        if inspect.isawaitable(result):
            result = await result
        if result is None:
            return None
        head = response_header(correlation_id, cls.__flexible__, api_key)
        if not isinstance(result, SplicedBody):
            return encode_frame(head, result)
        try:
            frame_bytes = encode_frame(head, result.entity)
            if not result.regions:
                return frame_bytes
            return splice(frame_bytes, result, flexible=cls.__flexible__)
        finally:
            result.close()
