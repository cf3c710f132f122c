"""The libfuse session a mount owns: create, mount, loop, stop what calls into it, unmount, destroy.

mfusepy serves through libfuse's ``fuse_main_real``, which runs the loop and then tears the mount
down in one call. The notifier thread (seglogfs.fs.invalidation) calls ``fuse_invalidate_path``,
which looks the path up in the ``struct fuse``'s node tables; ``fuse_destroy`` frees those tables
and destroys their lock *before* it calls the filesystem's ``destroy`` (where the notifier used to
be stopped), so an invalidation landing in between would touch freed memory. :func:`owned_loop`
gives mfusepy a ``fuse_main_real`` made of libfuse's own steps (as its helper.c makes it) with one
addition: ``on_loop_end`` runs after the loop returns and before anything is torn down.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable, Iterator

import mfusepy

log = logging.getLogger("seglogfs.fs")


class _FuseArgs(ctypes.Structure):
    """libfuse's ``struct fuse_args``."""

    _fields_ = (
        ("argc", ctypes.c_int),
        ("argv", ctypes.POINTER(ctypes.c_char_p)),
        ("allocated", ctypes.c_int),
    )


#: options fuse_main_real's command-line parser takes (fuse_new refuses them): the loop's settings
_LOOP_OPTIONS = ("max_idle_threads", "max_threads", "clone_fd")
_PATCH_LOCK = threading.Lock()  # mfusepy.fuse_main_real is one module global


def _libfuse() -> ctypes.CDLL:
    lib = mfusepy._libfuse
    # dlsym finds each symbol's default version: fuse_new@@FUSE_3.1, fuse_loop_mt@@FUSE_3.12
    lib.fuse_new.argtypes = (ctypes.POINTER(_FuseArgs), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    lib.fuse_new.restype = ctypes.c_void_p
    for name in ("fuse_loop", "fuse_unmount", "fuse_destroy", "fuse_get_session"):
        getattr(lib, name).argtypes = (ctypes.c_void_p,)
    lib.fuse_mount.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
    lib.fuse_get_session.restype = ctypes.c_void_p
    lib.fuse_set_signal_handlers.argtypes = (ctypes.c_void_p,)
    lib.fuse_remove_signal_handlers.argtypes = (ctypes.c_void_p,)
    lib.fuse_loop_mt.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
    lib.fuse_loop_cfg_create.restype = ctypes.c_void_p
    lib.fuse_loop_cfg_set_idle_threads.argtypes = (ctypes.c_void_p, ctypes.c_uint)
    lib.fuse_loop_cfg_set_max_threads.argtypes = (ctypes.c_void_p, ctypes.c_uint)
    lib.fuse_loop_cfg_destroy.argtypes = (ctypes.c_void_p,)
    return lib


class _Command:
    """What mfusepy's argv asks for: ``fuse [-f] [-s] [-d] -o OPTIONS MOUNTPOINT``."""

    def __init__(self, argv: list[bytes]) -> None:
        self.single = b"-s" in argv
        self.debug = b"-d" in argv
        self.mount_point = argv[-1]
        options = argv[argv.index(b"-o") + 1].split(b",") if b"-o" in argv else []
        self.loop = {}
        kept = []
        for option in options:
            name, _, value = option.decode().partition("=")
            if name in _LOOP_OPTIONS:
                self.loop[name] = int(value or 1)
            else:
                kept.append(option)
        if self.debug:
            kept.append(b"debug")
        self.new_args = [b"fuse", b"-o", b",".join(kept)] if kept else [b"fuse"]


def _fuse_main(on_loop_end: Callable[[], None]) -> Callable[..., int]:
    """A ``fuse_main_real(argc, argv, ops, ops_size, user_data)`` that calls ``on_loop_end`` between
    the loop's return and the teardown."""

    def fuse_main_real(argc: int, argv: ctypes.Array, ops: object, ops_size: int, user_data: object) -> int:
        lib = _libfuse()
        command = _Command([argv[i] for i in range(argc)])
        argv_new = (ctypes.c_char_p * len(command.new_args))(*command.new_args)
        args = _FuseArgs(len(command.new_args), argv_new, 0)
        # pointers stay c_void_p objects: an int passed where argtypes are unset is cut to 32 bits
        fuse = ctypes.c_void_p(lib.fuse_new(ctypes.byref(args), ops, ops_size, None))
        if not fuse.value:
            return 1
        try:
            if lib.fuse_mount(fuse, command.mount_point) != 0:
                return 1
            try:
                session = ctypes.c_void_p(lib.fuse_get_session(fuse))
                if lib.fuse_set_signal_handlers(session) != 0:
                    return 1
                try:
                    result = _loop(lib, fuse, command)
                finally:
                    _run_quietly(on_loop_end)
                    lib.fuse_remove_signal_handlers(session)
            finally:
                lib.fuse_unmount(fuse)
        finally:
            lib.fuse_destroy(fuse)
        # fuse_loop returns the signal that ended it (SIGTERM: 15); fuse_main_real reports any as 8
        return 8 if result else 0

    return fuse_main_real


def _run_quietly(step: Callable[[], None]) -> None:
    try:
        step()
    except Exception:  # the teardown must still run: it unmounts
        log.exception("stopping what calls into libfuse failed")


def _loop(lib: ctypes.CDLL, fuse: ctypes.c_void_p, command: _Command) -> int:
    if command.single:
        return int(lib.fuse_loop(fuse))
    config = ctypes.c_void_p(lib.fuse_loop_cfg_create())
    try:
        if "max_idle_threads" in command.loop:
            lib.fuse_loop_cfg_set_idle_threads(config, command.loop["max_idle_threads"])
        if "max_threads" in command.loop:
            lib.fuse_loop_cfg_set_max_threads(config, command.loop["max_threads"])
        return int(lib.fuse_loop_mt(fuse, config))
    finally:
        lib.fuse_loop_cfg_destroy(config)


def owned_loop_available() -> bool:
    """libfuse 3.12 or later (the loop config API), as Debian 12's 3.14."""
    if mfusepy.fuse_version_major != 3:
        return False
    return hasattr(mfusepy._libfuse, "fuse_loop_cfg_create") and hasattr(mfusepy, "fuse_main_real")


@contextlib.contextmanager
def owned_loop(on_loop_end: Callable[[], None]) -> Iterator[None]:
    """While in this block, mfusepy serves through :func:`_fuse_main`, calling ``on_loop_end``
    before the mount is torn down."""
    with _PATCH_LOCK:
        original = mfusepy.fuse_main_real
        mfusepy.fuse_main_real = _fuse_main(on_loop_end)
        try:
            yield
        finally:
            mfusepy.fuse_main_real = original
