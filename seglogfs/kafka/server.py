"""The listener: an asyncio server in its own thread of seglogd. Each connection reads frames (size
first, bounded by ``socket.request.max.bytes``) and answers them in order; a frame over the limit,
one that cannot be read or a failing request closes that connection only. Connections past
``max.connections`` are closed at once."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import ssl
import struct
import threading
from collections.abc import Callable

from seglogfs.log_manager import LogManager

from .api_versions import API_VERSIONS
from .append_waiters import AppendWaiters
from .broker import Broker
from .framing import FrameError, peek_api
from .listener_config import ListenerConfig
from .loopback_peer import peer_uid
from .sasl_session import PRE_AUTH_MAX_BYTES, SaslSession
from .spliced_frame import SplicedFrame
from .tls import server_context

__all__ = ["KafkaListener"]

log = logging.getLogger("seglogfs.kafka")
_SIZE = struct.Struct(">i")
#: requests read ahead of the one being answered, per connection (Kafka's clients keep at most 5 in
#: flight by default); with the request size limit this bounds a connection's memory
PIPELINE = 8
READ_AHEAD_BYTES = 1 << 20  # past this size a request is read ahead alone
TLS_HANDSHAKE_TIMEOUT = 60.0  # seconds (asyncio's default)


class KafkaListener:
    """Kafka's wire protocol over a :class:`LogManager`. :meth:`start` binds (raising OSError when it
    cannot) and serves from a thread; :meth:`stop` closes every connection and the socket."""

    def __init__(self, manager: LogManager, config: ListenerConfig) -> None:
        self.manager = manager
        self.config = config
        self._loop = asyncio.new_event_loop()
        self.waiters = AppendWaiters(self._loop)
        self.broker = Broker(manager, config, self.waiters)
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self.port = 0
        self._users = config.security.users  # replaced whole by reload_users: read once per connection
        self._tls: ssl.SSLContext | None = None

    def start(self) -> None:
        """Bind the listener's address and serve in a thread."""
        endpoint = self.config.listener
        family = socket.AF_INET6 if ":" in endpoint.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((endpoint.host, endpoint.port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        advertised = self.config.advertised or endpoint
        self.broker.advertised = (advertised.host, advertised.port or self.port)
        if endpoint.protocol in ("SSL", "SASL_SSL"):
            self._tls = server_context(self.config.security)
        # TLS starts in _serve, once the connection counts against max.connections
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, sock=sock, limit=1 << 20)
        )
        self.manager.on_append = self.waiters.appended
        self._thread = threading.Thread(target=self._loop.run_forever, name="seglogd-kafka", daemon=True)
        self._thread.start()
        log.info("Kafka listener on %s (advertised as %s:%d; %s)", f"{endpoint.host}:{self.port}",
                 *self.broker.advertised, endpoint.protocol)

    def config_reloaded(self) -> None:
        """The daemon applied a reloaded config to the logs: give the offsets logs their policy back."""
        self._loop.call_soon_threadsafe(self.broker.offsets.apply_configs)

    def reload_users(self, new: ListenerConfig) -> bool:
        """Apply a reloaded ``kafka:`` whose only change is its SCRAM users (new connections use
        them; authenticated ones stay, as in Kafka); False when anything else changed."""
        security = dataclasses.replace(self.config.security, users=new.security.users)
        if dataclasses.replace(self.config, security=security) != new:
            return False
        self._users = new.security.users
        log.info("Kafka listener: SCRAM users reloaded (%d)", len(self._users))
        return True

    def stop(self) -> None:
        """Close the socket and every connection; wait for the thread."""
        if self._thread is None:
            return
        self.manager.on_append = None
        self.broker.topics.stop(timeout=10)  # before the daemon closes the logs under a creation
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        try:
            future.result(timeout=10)
        except Exception:  # a hung connection must not keep the daemon from stopping
            log.exception("stopping the Kafka listener")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._thread = None
        if not self._loop.is_running():
            self._loop.close()

    async def _shutdown(self) -> None:
        self.broker.groups.stop()
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.config.max_connections:
            log.warning("Kafka listener: refusing a connection: max.connections=%d reached",
                        self.config.max_connections)
            writer.close()
            return
        self._connections.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername")
        try:
            if self.config.checks_local_users and not await self._local_user_allowed(writer):
                return
            if self._tls is not None:
                await writer.start_tls(self._tls, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT)
            sasl = None
            if self.config.listener.protocol.startswith("SASL_"):
                sasl = SaslSession(self._users, peer)
            await self._requests(reader, writer, sasl)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except FrameError as exc:
            log.warning("Kafka listener: closing the connection from %s: %s", peer, exc)
        except (ssl.SSLError, TimeoutError) as exc:
            log.warning("Kafka listener: TLS handshake with %s failed: %s", peer, exc)
        except Exception:
            log.exception("Kafka listener: closing the connection from %s after an error", peer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _local_user_allowed(self, writer: asyncio.StreamWriter) -> bool:
        """Whether the client runs as the daemon's user or root (kafka.loopback.users: owner)."""
        ours, theirs = writer.get_extra_info("sockname"), writer.get_extra_info("peername")
        uid = await asyncio.to_thread(peer_uid, ours, theirs)  # reads the socket table: off the loop
        if uid is not None and uid in (0, os.getuid()):
            return True
        log.warning("Kafka listener: refusing the connection from %s: its user (uid %s) is neither the "
                    "daemon's nor root (kafka.loopback.users: owner; authenticate with SASL or TLS "
                    "client certificates, or set it to everyone)", theirs, uid)
        return False

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sasl: SaslSession | None = None
    ) -> None:
        """Answer the connection's requests in order. Frames a client pipelines are read ahead (at most
        :data:`PIPELINE` of them, one when it is over :data:`READ_AHEAD_BYTES`: a connection holds at
        most about two requests' worth of memory) and the answers to those already waiting go out in
        one write. On a SASL listener, ``sasl`` answers until the client is authenticated."""
        frames: asyncio.Queue[bytes | BaseException] = asyncio.Queue(maxsize=PIPELINE)
        busy = False
        reading = asyncio.create_task(
            self._read_frames(reader, frames, lambda: busy or not frames.empty(), sasl))
        pending: list[bytes] = []
        try:
            while True:
                busy = False
                item = await frames.get()
                busy = True
                response: bytes | SplicedFrame | None
                if isinstance(item, BaseException):
                    if pending:
                        writer.writelines(pending)
                        await writer.drain()
                    raise item
                if sasl is not None and (not sasl.authenticated or peek_api(item)[0] == API_VERSIONS):
                    response, close = sasl.handle(item)
                    if close:  # a refused authentication: its answer, then the end
                        pending.append(response or b"")
                        writer.writelines(pending)
                        await writer.drain()
                        return
                else:
                    response = await self.broker.handle(item)
                frames.task_done()
                if isinstance(response, SplicedFrame):  # after the answers before it, from the files
                    writer.writelines(pending)
                    pending.clear()
                    await response.send(writer)
                elif response is not None:
                    pending.append(response)
                if pending and frames.empty():
                    writer.writelines(pending)
                    pending.clear()
                    await writer.drain()  # a client that stops reading holds only its own connection
        finally:
            reading.cancel()

    async def _read_frames(
        self, reader: asyncio.StreamReader, frames: asyncio.Queue, busy: Callable[[], bool],
        sasl: SaslSession | None = None,
    ) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await self._next_size(reader, busy))
                limit = self.config.max_request_bytes
                if sasl is not None and not sasl.authenticated:
                    limit = min(limit, PRE_AUTH_MAX_BYTES)
                if size > limit:
                    raise FrameError(f"request of {size} bytes is over socket.request.max.bytes={limit}")
                if size < 0:
                    raise FrameError(f"negative request size {size}")
                await frames.put(await reader.readexactly(size))
                if size > READ_AHEAD_BYTES:  # a large one: nothing more is read until it is answered
                    await frames.join()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the end of the stream, or a frame error: after what came before
            await frames.put(exc)

    async def _next_size(self, reader: asyncio.StreamReader, busy: Callable[[], bool]) -> bytes:
        """The next frame's size prefix; FrameError when the connection stays idle (no request being
        answered, none arriving) for ``connections.max.idle.ms``, as Kafka closes it."""
        idle = self.config.max_idle_ms / 1000
        while True:
            try:  # a cancelled readexactly consumes nothing: bytes that came stay in the buffer
                async with asyncio.timeout(idle):  # in this task: no task per read, as wait_for makes
                    return await reader.readexactly(4)
            except TimeoutError:
                if not busy():
                    raise FrameError(f"idle for connections.max.idle.ms={self.config.max_idle_ms}") from None
