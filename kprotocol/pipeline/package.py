"""`kprotocol pipeline package --out dist/`: kprotocol for Spark executors, as PySpark documents it.

A fresh virtual environment gets kprotocol (built from this checkout when there is one, else the
installed version from the package index), with its compiled extensions, and what the executors
need of the `pipeline` extra (pyarrow; not PySpark, which the cluster brings, nor matplotlib, which
only the report uses); venv-pack packs it into `kprotocol-env.tar.gz`. Submit with

    PYSPARK_DRIVER_PYTHON=python PYSPARK_PYTHON=./environment/bin/python \\
        spark-submit --archives dist/kprotocol-env.tar.gz#environment ...

The archive holds symbolic links to this machine's Python interpreter: the executors need the same
Python at the same path (as for any packed virtualenv).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import kprotocol

ARCHIVE = "kprotocol-env.tar.gz"
DRIVER_ONLY = {"pyspark", "matplotlib", "venv-pack"}  # brought by the cluster / used on the driver only


def source() -> str:
    """What pip installs: this checkout (a source tree beside the package), else the released version."""
    root = Path(kprotocol.__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "setup.py").is_file():
        return str(root)
    return f"kprotocol=={kprotocol.__version__}"


def executor_requirements() -> list[str]:
    """The `pipeline` extra's requirements that executors import."""
    wanted = []
    for requirement in metadata.requires("kprotocol") or []:
        spec, _, marker = requirement.partition(";")
        name = re.match(r"[A-Za-z0-9_.-]+", spec.strip())
        if name and "extra == \"pipeline\"" in marker and name.group(0).lower() not in DRIVER_ONLY:
            wanted.append(spec.strip())
    return wanted


def package(out: Path, *, quiet: bool = True) -> Path:
    """Build `out/kprotocol-env.tar.gz`; returns its path."""
    import venv_pack

    out.mkdir(parents=True, exist_ok=True)
    archive = out / ARCHIVE
    with tempfile.TemporaryDirectory(prefix="kprotocol-env-") as work:
        env = Path(work) / "env"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        pip = [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install",
               "--no-warn-script-location", *(["-q"] if quiet else [])]
        subprocess.run([*pip, source(), *executor_requirements()], check=True)
        probe = "from kprotocol.pipeline.executor import compiled; s = compiled(); " \
                "assert all(s.values()), f'compiled extensions missing: {s}'"
        subprocess.run([str(env / "bin" / "python"), "-c", probe], check=True, cwd=work)
        venv_pack.pack(prefix=str(env), output=str(archive), force=True, compress_level=1)
    return archive
