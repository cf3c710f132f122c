"""The classic consumer-group protocol's coordinator (Kafka's GroupCoordinator, one node): members join,
the leader assigns, everyone syncs, heartbeats keep members in; a join, a leave or a missed session
starts a rebalance. Runs on the listener's event loop: JoinGroup and SyncGroup answers wait on
futures. Membership lives in memory (after a restart members join again); committed offsets live in
the ``__consumer_offsets`` logs (:mod:`seglogfs.kafka.offsets_topic`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

__all__ = ["Group", "GroupCoordinator", "GroupError", "JoinResult", "Member"]

EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"
EXPIRY_CHECK_S = 0.2


class GroupError(Exception):
    """A group request refused with a Kafka error code."""

    def __init__(self, code: ErrorCode, member_id: str = "") -> None:
        super().__init__(code.name)
        self.code = code
        self.member_id = member_id


@dataclass
class Member:
    """One member of a group."""

    member_id: str
    client_id: str
    client_host: str
    session_timeout_s: float
    rebalance_timeout_s: float
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_seen: float = field(default_factory=time.monotonic)
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None

    def joining(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()


@dataclass(frozen=True)
class JoinResult:
    """What a JoinGroup answers one member."""

    generation: int
    protocol: str | None
    leader: str
    member_id: str
    members: list[tuple[str, bytes]]  # for the leader only: every member's metadata for the protocol


@dataclass
class Group:
    """One group's state."""

    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: ids handed out by MEMBER_ID_REQUIRED, until when they may join (one session timeout, as Kafka)
    pending_ids: dict[str, float] = field(default_factory=dict)
    deadline: asyncio.TimerHandle | None = None
    #: the first rebalance of an Empty group waits for more members (Kafka's initial delayed join):
    #: whether it waits, how much of the rebalance timeout is left, and whether a member joined meanwhile
    initial_delay: bool = False
    initial_delay_left_s: float = 0.0
    joined_during_delay: bool = False


class GroupCoordinator:
    """Every group of this node."""

    def __init__(self, has_offsets: Callable[[str], bool] = lambda group_id: False,
                 initial_rebalance_delay_s: float = 3.0) -> None:
        """``has_offsets``: whether a group has committed offsets (an Empty group is kept then).
        ``initial_rebalance_delay_s``: Kafka's ``group.initial.rebalance.delay.ms``, in seconds."""
        self.groups: dict[str, Group] = {}
        self._has_offsets = has_offsets
        self._initial_delay_s = initial_rebalance_delay_s
        self._expiry: asyncio.Task | None = None

    def start(self) -> None:
        """Start the session-expiry checks (on the running loop)."""
        if self._expiry is None:
            self._expiry = asyncio.get_running_loop().create_task(self._expire_sessions())

    def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def group(self, group_id: str) -> Group:
        found = self.groups.get(group_id)
        if found is None:
            found = self.groups[group_id] = Group(group_id)
        return found

    # ------------------------------------------------------------------ join / sync
    async def join(
        self, group_id: str, member_id: str, *, client_id: str, client_host: str, protocol_type: str,
        protocols: list[tuple[str, bytes]], session_timeout_s: float, rebalance_timeout_s: float,
        require_known_member: bool,
    ) -> JoinResult:
        """A JoinGroup; GroupError for a refusal (MEMBER_ID_REQUIRED carries the new id)."""
        self.start()
        group = self.group(group_id)
        if group.members and group.protocol_type != protocol_type:
            raise GroupError(ErrorCode.inconsistent_group_protocol)
        if group.members and not any(name in self._common_protocols(group) for name, _ in protocols):
            raise GroupError(ErrorCode.inconsistent_group_protocol)
        if not member_id:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if require_known_member:
                group.pending_ids[member_id] = time.monotonic() + session_timeout_s
                raise GroupError(ErrorCode.member_id_required, member_id)
        elif member_id not in group.members and group.pending_ids.get(member_id, 0) < time.monotonic():
            group.pending_ids.pop(member_id, None)
            raise GroupError(ErrorCode.unknown_member_id, member_id)
        group.pending_ids.pop(member_id, None)
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = Member(
                member_id, client_id, client_host, session_timeout_s, rebalance_timeout_s, protocols
            )
            group.joined_during_delay = True
        else:
            member.protocols, member.session_timeout_s = protocols, session_timeout_s
            member.rebalance_timeout_s = rebalance_timeout_s
        group.protocol_type = protocol_type
        member.last_seen = time.monotonic()
        member.join_waiter = asyncio.get_running_loop().create_future()
        waiter = member.join_waiter
        if group.state != PREPARING:
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)
        return await waiter

    async def sync(self, group_id: str, member_id: str, generation: int,
                   assignments: dict[str, bytes]) -> bytes:
        """A SyncGroup: the member's assignment once the leader has sent them."""
        group, member = self._member(group_id, member_id)
        if generation != group.generation:
            raise GroupError(ErrorCode.illegal_generation)
        if group.state == PREPARING:
            raise GroupError(ErrorCode.rebalance_in_progress)
        member.last_seen = time.monotonic()
        if group.state == STABLE:
            return member.assignment
        if member_id == group.leader:
            for other in group.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            group.state = STABLE
            for other in group.members.values():
                if other.sync_waiter is not None and not other.sync_waiter.done():
                    other.sync_waiter.set_result(other.assignment)
                other.sync_waiter = None
            return member.assignment
        member.sync_waiter = asyncio.get_running_loop().create_future()
        return await member.sync_waiter

    def _member(self, group_id: str, member_id: str) -> tuple[Group, Member]:
        """The group and the member a request names; GroupError with Kafka's code when either is unknown."""
        group = self.groups.get(group_id)
        if group is None and not self._has_offsets(group_id):
            # a member or a generation of a group that does not exist (Kafka's answer); one known by
            # its offsets only (as after a restart) is one whose members must join again
            raise GroupError(ErrorCode.group_id_not_found)
        if group is None:
            raise GroupError(ErrorCode.unknown_member_id)
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.unknown_member_id)
        return group, member

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> None:
        """A Heartbeat: GroupError when the member must join (again)."""
        group, member = self._member(group_id, member_id)
        member.last_seen = time.monotonic()
        if group.state == PREPARING:
            raise GroupError(ErrorCode.rebalance_in_progress)
        if generation != group.generation:
            raise GroupError(ErrorCode.illegal_generation)

    def leave(self, group_id: str, member_id: str) -> ErrorCode:
        """A LeaveGroup of one member."""
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.unknown_member_id
        self._remove(group, member_id)
        return ErrorCode.none

    def check_commit(self, group_id: str, member_id: str, generation: int) -> None:
        """Whether an OffsetCommit may be stored (generation -1: a commit outside group membership)."""
        if generation < 0 and not member_id:
            group = self.groups.get(group_id)
            if group is not None and group.members:
                raise GroupError(ErrorCode.unknown_member_id)
            return
        group, member = self._member(group_id, member_id)
        if generation != group.generation:
            raise GroupError(ErrorCode.illegal_generation)
        if group.state in (PREPARING, COMPLETING):
            raise GroupError(ErrorCode.rebalance_in_progress)
        member.last_seen = time.monotonic()

    # ------------------------------------------------------------------ rebalancing
    def _common_protocols(self, group: Group) -> set[str]:
        names: set[str] | None = None
        for member in group.members.values():
            own = {name for name, _ in member.protocols}
            names = own if names is None else names & own
        return names or set()

    def _prepare_rebalance(self, group: Group) -> None:
        starts_empty = group.state == EMPTY
        group.state = PREPARING
        for member in group.members.values():  # a sync in flight belongs to the old generation
            if member.sync_waiter is not None and not member.sync_waiter.done():
                member.sync_waiter.set_exception(GroupError(ErrorCode.rebalance_in_progress))
            member.sync_waiter = None
        if group.deadline is not None:
            group.deadline.cancel()
        timeout = max((m.rebalance_timeout_s for m in group.members.values()), default=0)
        loop = asyncio.get_running_loop()
        if starts_empty and self._initial_delay_s > 0:
            # Members of a new group start together; waiting for them gives one assignment, not one
            # rebalance each, and gives clients time for the metadata their assignors need.
            delay = min(self._initial_delay_s, timeout)
            group.initial_delay, group.joined_during_delay = True, False
            group.initial_delay_left_s = max(timeout - delay, 0.0)
            group.deadline = loop.call_later(delay, self._initial_delay_over, group)
        else:
            group.deadline = loop.call_later(timeout, self._rebalance_deadline, group)

    def _initial_delay_over(self, group: Group) -> None:
        """Kafka's rule: a member that joined during the delay extends it by another delay, while the
        rebalance timeout lasts."""
        if group.joined_during_delay and group.initial_delay_left_s > 0:
            delay = min(self._initial_delay_s, group.initial_delay_left_s)
            group.initial_delay_left_s -= delay
            group.joined_during_delay = False
            group.deadline = asyncio.get_running_loop().call_later(delay, self._initial_delay_over, group)
            return
        group.initial_delay = False
        self._rebalance_deadline(group)

    def _rebalance_deadline(self, group: Group) -> None:
        group.deadline = None
        for member_id in [m.member_id for m in group.members.values() if not m.joining()]:
            del group.members[member_id]
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state == PREPARING and not group.initial_delay \
                and all(m.joining() for m in group.members.values()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.deadline is not None:
            group.deadline.cancel()
            group.deadline = None
        group.initial_delay = False
        group.generation += 1
        if not group.members:
            group.state, group.protocol, group.leader = EMPTY, None, None
            return
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        leader = group.members[group.leader]
        common = self._common_protocols(group)
        group.protocol = next((name for name, _ in leader.protocols if name in common), None)
        group.state = COMPLETING
        metadata = [
            (m.member_id, next((data for name, data in m.protocols if name == group.protocol), b""))
            for m in group.members.values()
        ]
        now = time.monotonic()
        for member in group.members.values():
            member.last_seen = now
            waiter, member.join_waiter = member.join_waiter, None
            if waiter is not None and not waiter.done():
                members = metadata if member.member_id == group.leader else []
                waiter.set_result(JoinResult(group.generation, group.protocol, group.leader, member.member_id,
                                             members))

    def _remove(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        for waiter in (member.join_waiter, member.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_exception(GroupError(ErrorCode.unknown_member_id))
        if group.state == PREPARING:
            self._maybe_complete_join(group)
        elif group.members:
            self._prepare_rebalance(group)
        else:
            self._complete_join(group)  # the last one left: a new, empty generation

    def _forget_if_dead(self, group: Group) -> None:
        """Drop an Empty group without members, pending ids or committed offsets (Kafka's Dead): a
        client naming new group ids must not grow memory for ever."""
        if group.state == EMPTY and not group.members and not group.pending_ids and group.deadline is None \
                and not self._has_offsets(group.group_id):
            self.groups.pop(group.group_id, None)

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_CHECK_S)
            now = time.monotonic()
            for group in list(self.groups.values()):
                for member_id, until in list(group.pending_ids.items()):
                    if until < now:
                        del group.pending_ids[member_id]
                self._forget_if_dead(group)
                for member in list(group.members.values()):
                    if not member.joining() and now - member.last_seen > member.session_timeout_s:
                        with contextlib.suppress(KeyError):
                            self._remove(group, member.member_id)
