"""Build the optional compiled fast path; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("kprotocol._speedups", ["kprotocol/_speedups.c"], optional=True, extra_compile_args=["-O2"]),
    ]
)
