"""Builds the device-side glue (``glue.cpp``) into a shared library against the installed
ExecuTorch wheel's headers and runtime library, once per source and ExecuTorch version.

The library is cached under ``$MCU_NPU_CACHE`` (default ``$XDG_CACHE_HOME/mcu-npu``, else
``~/.cache/mcu-npu``), named by the digest of the source, the compile command and the
ExecuTorch version; it is compiled to a temporary file and renamed into place, so processes
building at the same time never load a half-written library.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...errors import RuntimeUnavailableError

SOURCE = Path(__file__).with_name("glue.cpp")
DEFINES = ("C10_USING_CUSTOM_GENERATED_MACROS", "ET_EVENT_TRACER_ENABLED")
"""The compile definitions ExecuTorch's CMake package gives its runtime's consumers."""
INSTALL_HINT = "install a C++ compiler (Debian/Ubuntu: apt-get install g++) or set CXX"


@dataclass(frozen=True)
class Wheel:
    """Where the installed ExecuTorch keeps its C++ headers and runtime library."""

    version: str
    include: Path
    c10_include: Path
    lib: Path


def wheel(root: Path | None = None) -> Wheel:
    """The installed ExecuTorch's headers and ``libexecutorch.so`` (``root``: the package
    directory, found by import when None); RuntimeUnavailableError naming what is missing."""
    if root is None:
        spec = importlib.util.find_spec("executorch")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeUnavailableError("ExecuTorch is not installed: pip install executorch")
        root = Path(next(iter(spec.submodule_search_locations)))
    found = Wheel(importlib.metadata.version("executorch"), root / "include",
                  root / "include/executorch/runtime/core/portable_type/c10", root / "lib")
    needed = {"C++ headers": found.include / "executorch/runtime/backend/interface.h",
              "c10 headers": found.c10_include / "c10/util/irange.h",
              "runtime library": found.lib / "libexecutorch.so"}
    missing = [f"{what} ({path})" for what, path in needed.items() if not path.is_file()]
    if missing:
        raise RuntimeUnavailableError(
            f"the installed ExecuTorch {found.version} lacks its {', '.join(missing)}; the "
            "ExecuTorch runtime needs a wheel that ships them (pip install --force-reinstall "
            f"executorch=={found.version})")
    return found


def compiler() -> str:
    """The C++ compiler: ``$CXX``, else ``g++``; RuntimeUnavailableError when absent."""
    name = os.environ.get("CXX", "g++")
    path = shutil.which(name)
    if path is None:
        raise RuntimeUnavailableError(
            f"no C++ compiler found ({name!r} is not on PATH): the ExecuTorch runtime is built "
            f"on first use; {INSTALL_HINT}")
    return path


def command(cxx: str, w: Wheel, output: Path) -> list[str]:
    """The compile command of the glue library."""
    return [cxx, "-std=c++17", "-O2", "-fPIC", "-shared",
            *(f"-D{d}" for d in DEFINES), f"-I{w.include}", f"-I{w.c10_include}",
            str(SOURCE), f"-L{w.lib}", "-lexecutorch", f"-Wl,-rpath,{w.lib}", "-o", str(output)]


def cache_dir() -> Path:
    explicit = os.environ.get("MCU_NPU_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mcu-npu"


def library() -> Path:
    """The built glue library, built now if the cache does not hold it."""
    w, cxx = wheel(), compiler()
    key = hashlib.sha256(SOURCE.read_bytes())
    key.update(" ".join(command(cxx, w, Path("out"))).encode())
    key.update(w.version.encode())
    target = cache_dir() / f"executorch-glue-{w.version}-{key.hexdigest()[:16]}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        result = subprocess.run(command(cxx, w, Path(scratch)), capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeUnavailableError(
                f"building the ExecuTorch runtime glue failed ({cxx}, ExecuTorch {w.version}):\n"
                f"{result.stderr.strip()[-4000:]}")
        os.replace(scratch, target)
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
    return target
