"""The one C extension (seglogfs/records/_scan.c and its headers); everything else is in pyproject.toml.

A setup.py because setuptools declares extension modules in pyproject.toml only from 74.1 on (and as
experimental), while the build requires setuptools>=68. ``pip install -e .`` builds it in place.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "seglogfs.records._scan",
            sources=["seglogfs/records/_scan.c"],
            depends=["seglogfs/records/_scan_walk.h", "seglogfs/records/_scan_run.h",
                     "seglogfs/records/_scan_record.h"],
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
