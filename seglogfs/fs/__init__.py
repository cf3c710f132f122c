"""The FUSE adapter: paths -> engine calls -> bytes / errnos (no knowledge of the record format).

mfusepy looks for libfuse2 first; we ask for libfuse3 before it is imported anywhere, because fuse3
negotiates 1 MiB writes (max_pages) where fuse2 without ``big_writes`` splits every write at 4 KiB,
which would cost an order of magnitude on ``cat file > append``. ``FUSE_LIBRARY_PATH`` still wins.
"""

import os

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")
