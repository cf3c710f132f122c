"""The APIs the listener serves and at which versions: what ApiVersions announces, nothing more.

The ranges are those kio has schemas for, capped where a later version needs what the listener does
not have: Produce and Fetch stop at 12 (13 names topics by id), ListOffsets at 10 (11 asks for the
earliest offset pending upload to tiered storage). No transaction API is announced.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from .messages import make, nested, response_class

__all__ = ["API_VERSIONS", "SUPPORTED", "api_versions_response", "supports"]

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
API_VERSIONS, CREATE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID, DESCRIBE_CONFIGS = 18, 19, 21, 22, 32
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT = 8, 9, 10, 11, 12
LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 13, 14, 15, 16

#: api key -> (min version, max version)
SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 12),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 10),
    METADATA: (0, 12),
    API_VERSIONS: (0, 4),
    CREATE_TOPICS: (2, 7),
    DELETE_RECORDS: (0, 2),
    INIT_PRODUCER_ID: (0, 5),
    DESCRIBE_CONFIGS: (1, 4),
    # the classic consumer-group protocol
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    FIND_COORDINATOR: (0, 4),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 5),
}


def supports(api_key: int, version: int) -> bool:
    """True when the listener serves ``api_key`` at ``version``."""
    bounds = SUPPORTED.get(api_key)
    return bounds is not None and bounds[0] <= version <= bounds[1]


def api_versions_response(
    version: int, error: ErrorCode = ErrorCode.none, table: dict[int, tuple[int, int]] = SUPPORTED
) -> Any:
    """The ApiVersions response at ``version`` (0 when the client asked for an unknown version, as
    Kafka answers so the client can pick one it knows) announcing ``table``."""
    cls = response_class(API_VERSIONS, version)
    entry = nested(cls, "ApiVersion")
    keys = tuple(entry(api_key=k, min_version=low, max_version=high) for k, (low, high) in table.items())
    return make(cls, error_code=error, api_keys=keys, throttle_time=timedelta(0))
