"""``seglogd``, the seglogfs daemon: this folder is the package imported as ``seglogd``.

pyproject.toml maps the import name to this folder (``package-dir``), and the ``seglogd`` command runs
:func:`seglogd.__main__.main`. The process opens a data dir with the engine (:mod:`seglogfs`) and
serves it through the FUSE adapter (:mod:`seglogfs.fs`):

- ``__main__.py``: the command line (``seglogd --config FILE``), logging, process limits, start-up signals;
- ``config.py``: the YAML config file -> a validated :class:`~seglogd.config.DaemonConfig`;
- ``service.py``: :class:`~seglogd.service.Daemon`, the life cycle: open the logs, mount, maintenance,
  watchdog, config reload (file change or SIGHUP), clean shutdown;
- ``notify.py``: sd_notify for systemd (READY, STATUS, WATCHDOG, STOPPING);
- ``long_lived.py``: the objects of the start and of each reload frozen out of the collector's passes.
"""
