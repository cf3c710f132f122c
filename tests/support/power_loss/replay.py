"""Rebuild a directory as a power loss would leave it, from a snapshot and the shim's journal.

``journal_shim.c`` (LD_PRELOAD) journals every change a process makes under a directory, in order,
with the syncs that make changes durable. :func:`replay` walks the journal up to a cut (the moment the
power goes) over a model of the directory, keeping two states of every file and directory:

* the volatile state (the page cache): every change applies to it;
* the durable state (the disk): what a sync made durable, per POSIX:
  - ``fsync`` / ``fdatasync`` of a file: its bytes and size (not its name: that is its directory's);
  - ``msync(MS_SYNC)``: the bytes of the synced range of a mapping, and the file's size as far as
    reading them back needs it (a mapping never runs past the end of its file);
  - ``fsync`` of a directory: its entries (creates, renames, unlinks, mkdir in it) as they are now.

A change no sync covered before the cut is dropped (``keep=0``, the dm-log-writes replay), or, in the
harsh variant, kept with probability ``keep`` per change (seeded): the kernel may have written back
any page or journalled any name change on its own, in any order. A kept write may also be kept only in
some of its pages (a torn multi-page write). :func:`materialize` writes the durable state out as a
directory tree to load after the "restart".
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "MARK",
    "RENAME",
    "Entry",
    "Snapshot",
    "build_shim",
    "mark",
    "marks",
    "materialize",
    "read_journal",
    "replay",
    "shim_env",
]

HERE = Path(__file__).resolve().parent
(CREATE, MKDIR, WRITE, TRUNCATE, FALLOCATE, FSYNC, FDATASYNC, MSYNC, RENAME, UNLINK, RMDIR, MARK,
 UNSUPPORTED) = range(1, 14)
RECORD = struct.Struct("<IIqqqIIII")  # magic, op, ino, a, b, len(path1), len(path2), len(data), pad
MAGIC = 0x504C4A31
PAGE = 4096


def build_shim(out_dir: Path) -> Path:
    """Compile ``journal_shim.c`` with gcc into ``out_dir`` (the install script requires gcc)."""
    lib = out_dir / "journal_shim.so"
    if not lib.exists():
        subprocess.run(
            ["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-o", str(lib), str(HERE / "journal_shim.c"),
             "-ldl", "-lpthread"],
            check=True, capture_output=True,
        )
    return lib


def shim_env(lib: Path, root: Path, journal: Path) -> dict[str, str]:
    """The environment entries that trace a process's changes under ``root`` into ``journal``."""
    return {"LD_PRELOAD": str(lib), "SEGLOG_PL_ROOT": str(root), "SEGLOG_PL_JOURNAL": str(journal)}


def mark(journal: Path, text: str) -> None:
    """Append a mark (an acknowledgement a test checks later) to the journal, in one O_APPEND write:
    its place in the journal is after every change journalled before it was made."""
    data = text.encode()
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, RECORD.pack(MAGIC, MARK, 0, 0, 0, 0, 0, len(data), 0) + data)
    finally:
        os.close(fd)


@dataclass
class Entry:
    """One journal record."""

    op: int
    ino: int
    a: int
    b: int
    path1: str
    path2: str
    data: bytes


def read_journal(journal: Path) -> list[Entry]:
    """Every record of ``journal``, in order."""
    raw = journal.read_bytes()
    entries, at = [], 0
    while at < len(raw):
        magic, op, ino, a, b, l1, l2, ld, _ = RECORD.unpack_from(raw, at)
        assert magic == MAGIC, f"journal {journal} is damaged at byte {at}"
        at += RECORD.size
        p1 = raw[at : at + l1].decode()
        p2 = raw[at + l1 : at + l1 + l2].decode()
        data = raw[at + l1 + l2 : at + l1 + l2 + ld]
        at += l1 + l2 + ld
        entries.append(Entry(op, ino, a, b, p1, p2, data))
    return entries


@dataclass(eq=False)
class Node:
    """A file or directory (an inode) with its volatile and durable states."""

    is_dir: bool
    data: bytearray = field(default_factory=bytearray)  # volatile bytes (len == size)
    disk: bytearray = field(default_factory=bytearray)  # durable bytes (may run past disk_size)
    disk_size: int = 0
    entries: dict[str, Node] = field(default_factory=dict)  # volatile names (directories)
    disk_entries: dict[str, Node] = field(default_factory=dict)  # durable names


def _write(buf: bytearray, offset: int, data: bytes) -> None:
    if len(buf) < offset:
        buf.extend(bytes(offset - len(buf)))
    buf[offset : offset + len(data)] = data


def _resize(buf: bytearray, size: int) -> None:
    if len(buf) > size:
        del buf[size:]
    else:
        buf.extend(bytes(size - len(buf)))


@dataclass
class Snapshot:
    """A directory as it was when tracing began, taken as durable: ``(relative path, inode number,
    is a directory, bytes)`` for the root (path "") and everything under it."""

    items: list[tuple[str, int, bool, bytes]]

    @classmethod
    def take(cls, root: Path) -> Snapshot:
        items = [("", os.stat(root).st_ino, True, b"")]
        for dirpath, dirnames, filenames in os.walk(root):
            for name in sorted(dirnames) + sorted(filenames):
                path = Path(dirpath, name)
                st = path.lstat()
                assert not path.is_symlink(), f"the snapshot holds a symlink: {path}"
                is_dir = path.is_dir()
                content = b"" if is_dir else path.read_bytes()
                items.append((str(path.relative_to(root)), st.st_ino, is_dir, content))
        return cls(items)


class Model:
    """The directory tree being replayed."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.root = Node(True)
        self.by_ino: dict[int, Node] = {}
        for rel, ino, is_dir, content in snapshot.items:
            if not rel:
                self.by_ino[ino] = self.root
                continue
            node = Node(is_dir, bytearray(content), bytearray(content), len(content))
            parent, name = self.parent(rel)
            parent.entries[name] = parent.disk_entries[name] = node
            self.by_ino[ino] = node

    def parent(self, rel: str) -> tuple[Node, str]:
        parts = rel.split("/")
        node = self.root
        for part in parts[:-1]:
            node = node.entries[part]
        return node, parts[-1]

    def node(self, ino: int) -> Node:
        return self.by_ino[ino]


def replay(
    snapshot: Snapshot,
    entries: list[Entry],
    cut: int,
    *,
    keep: float = 0.0,
    rng: random.Random | None = None,
    forced: Collection[int] = (),
    torn: float = 0.3,
) -> Model:
    """The model after the first ``cut`` records of ``entries`` over ``snapshot`` (the directory as
    it was when tracing began, taken as durable). ``keep``: the chance that a change no sync covered
    reached the disk anyway (needs ``rng``), a multi-page write only in some of its pages with
    probability ``torn``; the changes at the indexes in ``forced`` reach it."""
    model = Model(snapshot)
    rng = rng or random.Random(0)

    def kept(index: int) -> bool:
        return index in forced or (keep > 0 and rng.random() < keep)

    for index, entry in enumerate(entries[:cut]):
        op = entry.op
        if op in (CREATE, MKDIR):
            parent, name = model.parent(entry.path1)
            assert name not in parent.entries, f"create of an existing name: {entry}"
            node = Node(op == MKDIR)
            model.by_ino[entry.ino] = node
            parent.entries[name] = node
            if kept(index):
                parent.disk_entries[name] = node
        elif op == WRITE:
            node = model.node(entry.ino)
            _write(node.data, entry.a, entry.data)
            if kept(index):
                # Write-back is per page, of the page as it is now (earlier writes to it included); a
                # multi-page write may be torn: only some of its pages reach the disk.
                end = entry.a + len(entry.data)
                tear = len(entry.data) > PAGE and rng.random() < torn
                for page in range(entry.a - entry.a % PAGE, end, PAGE):
                    if not tear or rng.random() < 0.5:
                        hi = min(page + PAGE, len(node.data))
                        _write(node.disk, page, bytes(node.data[page:hi]))
                        node.disk_size = max(node.disk_size, hi)
        elif op == TRUNCATE:
            node = model.node(entry.ino)
            _resize(node.data, entry.a)
            if kept(index):
                _resize(node.disk, entry.a)
                node.disk_size = entry.a
        elif op == FALLOCATE:
            node = model.node(entry.ino)
            end = entry.a + entry.b
            if len(node.data) < end:
                _resize(node.data, end)
                if kept(index):
                    node.disk_size = max(node.disk_size, end)
        elif op in (FSYNC, FDATASYNC):
            node = model.node(entry.ino)
            if node.is_dir:
                node.disk_entries = dict(node.entries)
            else:
                node.disk = bytearray(node.data)
                node.disk_size = len(node.data)
        elif op == MSYNC:
            node = model.node(entry.ino)
            hi = min(entry.a + entry.b, len(node.data))
            if hi > entry.a:
                _write(node.disk, entry.a, bytes(node.data[entry.a : hi]))
                # as fdatasync: the size too, as far as reading the synced bytes back needs it
                node.disk_size = max(node.disk_size, hi)
        elif op == RENAME:
            src, old = model.parent(entry.path1)
            dst, new = model.parent(entry.path2)
            node = src.entries.pop(old)
            dst.entries[new] = node
            if kept(index):
                if src.disk_entries.get(old) is node:
                    del src.disk_entries[old]
                dst.disk_entries[new] = node
        elif op in (UNLINK, RMDIR):
            parent, name = model.parent(entry.path1)
            node = parent.entries.pop(name)
            if kept(index) and parent.disk_entries.get(name) is node:
                del parent.disk_entries[name]
        elif op == MARK:
            pass
        else:
            raise AssertionError(f"the shim journalled a call the replay cannot model: {entry}")
    return model


def materialize(model: Model, dest: Path) -> None:
    """Write the durable state of ``model`` as a directory tree at ``dest`` (which must not exist)."""

    def write(node: Node, path: Path) -> None:
        path.mkdir()
        for name, child in sorted(node.disk_entries.items()):
            if child.is_dir:
                write(child, path / name)
            else:
                content = bytes(child.disk[: child.disk_size])
                (path / name).write_bytes(content + bytes(child.disk_size - len(content)))

    write(model.root, dest)


def marks(entries: list[Entry]) -> list[tuple[int, str]]:
    """``(index, text)`` of every mark in the journal."""
    return [(i, e.data.decode()) for i, e in enumerate(entries) if e.op == MARK]
