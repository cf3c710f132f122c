"""The classic consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, over :class:`GroupCoordinator` and
:class:`OffsetStore`."""

from __future__ import annotations

import contextvars
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from seglogfs.errors import SeglogError

from .group_coordinator import GroupError
from .messages import make, nested, response_class
from .offsets_topic import Committed, now_ms

if TYPE_CHECKING:
    from .context import BrokerState

__all__ = ["CLIENT_ID", "GROUP_HANDLERS"]

#: the client id of the request being handled (set per connection task by the broker)
CLIENT_ID: contextvars.ContextVar[str] = contextvars.ContextVar("client_id", default="")
FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP = 10, 11, 14, 12, 13
OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, DESCRIBE_GROUPS = 8, 9, 16, 15
_ZERO = timedelta(0)
_CLIENT_HOST = "/127.0.0.1"  # loopback only
MAX_METADATA_CHARS = 4096  # Kafka's offset.metadata.max.bytes (it counts characters)


def find_coordinator(broker: BrokerState, request: Any, version: int) -> Any:
    """This node coordinates every group; transactions are not served."""
    cls = response_class(FIND_COORDINATOR, version)
    host, port = broker.advertised
    error = ErrorCode.none if getattr(request, "key_type", 0) == 0 else ErrorCode.coordinator_not_available
    node = broker.node_id if error == ErrorCode.none else -1
    if version >= 4:
        entry = nested(cls, "Coordinator")
        coordinators = tuple(
            make(entry, key=key, node_id=node, host=host, port=port, error_code=error, error_message=None)
            for key in request.coordinator_keys
        )
        return make(cls, throttle_time=_ZERO, coordinators=coordinators)
    return make(cls, throttle_time=_ZERO, error_code=error, error_message=None, node_id=node, host=host,
                port=port)


async def join_group(broker: BrokerState, request: Any, version: int) -> Any:
    cls = response_class(JOIN_GROUP, version)
    client_id = CLIENT_ID.get()
    session = request.session_timeout.total_seconds()
    rebalance = getattr(request, "rebalance_timeout", request.session_timeout).total_seconds()
    if rebalance < 0:
        rebalance = session
    try:
        if not request.group_id:
            raise GroupError(ErrorCode.invalid_group_id)
        config = broker.config
        if not config.min_session_timeout_ms <= session * 1000 <= config.max_session_timeout_ms:
            raise GroupError(ErrorCode.invalid_session_timeout)
        result = await broker.groups.join(
            request.group_id, request.member_id, client_id=client_id or "consumer", client_host=_CLIENT_HOST,
            protocol_type=request.protocol_type, protocols=[(p.name, p.metadata) for p in request.protocols],
            session_timeout_s=session, rebalance_timeout_s=rebalance, require_known_member=version >= 4,
        )
    except GroupError as exc:
        return make(cls, throttle_time=_ZERO, error_code=exc.code, generation_id=-1, protocol_type=None,
                    protocol_name=None if version >= 7 else "", leader="", member_id=exc.member_id,
                    members=())
    member_cls = nested(cls, "JoinGroupResponseMember")
    members = tuple(
        make(member_cls, member_id=m, group_instance_id=None, metadata=data) for m, data in result.members
    )
    return make(cls, throttle_time=_ZERO, error_code=ErrorCode.none, generation_id=result.generation,
                protocol_type=request.protocol_type,
                protocol_name=result.protocol if result.protocol is not None or version >= 7 else "",
                leader=result.leader,
                skip_assignment=False, member_id=result.member_id, members=members)


async def sync_group(broker: BrokerState, request: Any, version: int) -> Any:
    cls = response_class(SYNC_GROUP, version)
    assignments = {a.member_id: a.assignment for a in request.assignments}
    try:
        assignment = await broker.groups.sync(request.group_id, request.member_id, request.generation_id,
                                              assignments)
        error = ErrorCode.none
    except GroupError as exc:
        assignment, error = b"", exc.code
    group = broker.groups.groups.get(request.group_id)
    return make(cls, throttle_time=_ZERO, error_code=error,
                protocol_type=group.protocol_type if group else None,
                protocol_name=group.protocol if group else None, assignment=assignment)


def heartbeat(broker: BrokerState, request: Any, version: int) -> Any:
    cls = response_class(HEARTBEAT, version)
    try:
        broker.groups.heartbeat(request.group_id, request.member_id, request.generation_id)
        error = ErrorCode.none
    except GroupError as exc:
        error = exc.code
    return make(cls, throttle_time=_ZERO, error_code=error)


def leave_group(broker: BrokerState, request: Any, version: int) -> Any:
    cls = response_class(LEAVE_GROUP, version)
    if version < 3:
        return make(cls, throttle_time=_ZERO,
                    error_code=broker.groups.leave(request.group_id, request.member_id))
    entry = nested(cls, "MemberResponse")
    members = tuple(
        make(entry, member_id=m.member_id, group_instance_id=m.group_instance_id,
             error_code=broker.groups.leave(request.group_id, m.member_id))
        for m in request.members
    )
    return make(cls, throttle_time=_ZERO, error_code=ErrorCode.none, members=members)


def offset_commit(broker: BrokerState, request: Any, version: int) -> Any:
    cls = response_class(OFFSET_COMMIT, version)
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    part_cls = nested(cls, "OffsetCommitResponsePartition")
    generation = getattr(request, "generation_id_or_member_epoch", getattr(request, "generation_id", -1))
    error = ErrorCode.none
    if not request.group_id:
        error = ErrorCode.invalid_group_id
    elif broker.read_only:
        error = ErrorCode.group_authorization_failed
    else:
        try:
            broker.groups.check_commit(request.group_id, request.member_id, generation)
        except GroupError as exc:
            error = exc.code
    stamp = now_ms()
    entries: dict[tuple[str, int], Committed] = {}
    codes: dict[tuple[str, int], ErrorCode] = {}
    for topic in request.topics:
        for part in topic.partitions:
            where = (topic.name, part.partition_index)
            if error != ErrorCode.none:
                codes[where] = error
            elif broker.topics.log(topic.name, part.partition_index) is None:
                codes[where] = ErrorCode.unknown_topic_or_partition
            elif len(part.committed_metadata or "") > MAX_METADATA_CHARS:
                codes[where] = ErrorCode.offset_metadata_too_large
            else:
                codes[where] = ErrorCode.none
                entries[where] = Committed(part.committed_offset, getattr(part, "committed_leader_epoch", -1),
                                           part.committed_metadata or "", stamp)
    if entries:
        try:
            broker.offsets.commit(request.group_id, entries)
        except (SeglogError, OSError):
            for where in entries:
                codes[where] = ErrorCode.coordinator_not_available
    topics = tuple(
        make(topic_cls, name=topic.name, partitions=tuple(
            make(part_cls, partition_index=p.partition_index,
                 error_code=codes[(topic.name, p.partition_index)])
            for p in topic.partitions))
        for topic in request.topics
    )
    return make(cls, throttle_time=_ZERO, topics=topics)


def _fetched(broker: BrokerState, cls: type, group_id: str, topics: Any, names: tuple[str, str]) -> tuple:
    topic_cls, part_cls = nested(cls, names[0]), nested(cls, names[1])
    committed = broker.offsets.committed(group_id)
    if topics is None:
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in topics}
    out = []
    for topic, partitions in wanted.items():
        parts = []
        for partition in partitions:
            found = committed.get((topic, partition))
            parts.append(make(
                part_cls, partition_index=partition, committed_offset=found.offset if found else -1,
                committed_leader_epoch=found.leader_epoch if found else -1,
                metadata=found.metadata if found else "", error_code=ErrorCode.none,
            ))
        out.append(make(topic_cls, name=topic, partitions=tuple(parts)))
    return tuple(out)


def offset_fetch(broker: BrokerState, request: Any, version: int) -> Any:
    cls = response_class(OFFSET_FETCH, version)
    if version >= 8:
        group_cls = nested(cls, "OffsetFetchResponseGroup")
        groups = tuple(
            make(group_cls, group_id=g.group_id, error_code=ErrorCode.none,
                 topics=_fetched(broker, cls, g.group_id, g.topics,
                                 ("OffsetFetchResponseTopics", "OffsetFetchResponsePartitions")))
            for g in request.groups
        )
        return make(cls, throttle_time=_ZERO, groups=groups)
    topics = _fetched(broker, cls, request.group_id, request.topics,
                      ("OffsetFetchResponseTopic", "OffsetFetchResponsePartition"))
    return make(cls, throttle_time=_ZERO, topics=topics, error_code=ErrorCode.none)


def list_groups(broker: BrokerState, request: Any, version: int) -> Any:
    cls = response_class(LIST_GROUPS, version)
    entry = nested(cls, "ListedGroup")
    states = set(getattr(request, "states_filter", ()) or ())
    groups = tuple(
        make(entry, group_id=g.group_id, protocol_type=g.protocol_type or "consumer", group_state=g.state,
             group_type="classic")
        for g in broker.groups.groups.values() if not states or g.state in states
    )
    return make(cls, throttle_time=_ZERO, error_code=ErrorCode.none, groups=groups)


def describe_groups(broker: BrokerState, request: Any, version: int) -> Any:
    cls = response_class(DESCRIBE_GROUPS, version)
    group_cls, member_cls = nested(cls, "DescribedGroup"), nested(cls, "DescribedGroupMember")
    out = []
    for group_id in request.groups:
        group = broker.groups.groups.get(group_id)
        if group is None:
            out.append(make(group_cls, error_code=ErrorCode.none, group_id=group_id, group_state="Dead",
                            protocol_type="", protocol_data="", members=()))
            continue
        members = tuple(
            make(member_cls, member_id=m.member_id, group_instance_id=None, client_id=m.client_id,
                 client_host=m.client_host,
                 member_metadata=next((d for n, d in m.protocols if n == group.protocol), b""),
                 member_assignment=m.assignment)
            for m in group.members.values()
        )
        out.append(make(group_cls, error_code=ErrorCode.none, group_id=group_id, group_state=group.state,
                        protocol_type=group.protocol_type or "", protocol_data=group.protocol or "",
                        members=members))
    return make(cls, throttle_time=_ZERO, groups=tuple(out))


GROUP_HANDLERS = {
    FIND_COORDINATOR: find_coordinator,
    JOIN_GROUP: join_group,
    SYNC_GROUP: sync_group,
    HEARTBEAT: heartbeat,
    LEAVE_GROUP: leave_group,
    OFFSET_COMMIT: offset_commit,
    OFFSET_FETCH: offset_fetch,
    LIST_GROUPS: list_groups,
    DESCRIBE_GROUPS: describe_groups,
}
