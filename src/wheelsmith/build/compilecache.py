"""The compile cache: ccache in front of nvcc and the host compiler.

torch's build honours `PYTORCH_NVCC` (the nvcc in build.ninja), which becomes `ccache nvcc`;
the host compiler `c++` is a launcher script first on PATH that runs `ccache c++`. Objects go
to a local directory (default `~/.cache/wheelsmith/ccache`) and, optionally, to a shared
remote (ccache's redis or http storage) so CI runners reuse each other's objects. Nothing
else about the build changes, so the cache is not part of the content key.

What may reuse an object: ccache hashes the compiler binary (compiler_check=content), every
argument (so each -gencode arch), the preprocessed source or its includes, and — as an extra
file — the toolchain's identity (pins, torch, nvcc; not the Python, which reaches an object
only through the headers it includes) and how build paths are kept out of objects
(reproducible.SCHEME). Paths under the base directory (the fixed paths the build sees,
pathview.py, else the work directory) are made relative (base_dir), so a fresh directory on
another runner, or a build for another Python, still hits.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from wheelsmith.build import parallel, reproducible
from wheelsmith.errors import UsageError
from wheelsmith.toolchain.env import Toolchain

ENV = "WHEELSMITH_COMPILE_CACHE"
LOCAL_ENV = "WHEELSMITH_CCACHE_DIR"  # the local object directory (default <cache>/ccache)
REMOTE_SCHEMES = ("redis://", "redis+unix://", "http://", "https://")
HIT_COUNTERS = ("direct_cache_hit", "preprocessed_cache_hit")


@dataclass(frozen=True, slots=True)
class CompileCache:
    ccache: str
    local: Path
    remote: str | None = None

    @property
    def needs_network(self) -> bool:
        """A TCP remote cannot be reached from inside a fresh network namespace."""
        return self.remote is not None and not self.remote.startswith("redis+unix://")

    def describe(self) -> str:
        return f"ccache {self.local}" + (f" + {self.remote}" if self.remote else "")

    def launchers(self) -> dict[str, str]:
        return compiler_launchers(self.ccache, "wheelsmith compile cache")

    def env(self, toolchain: Toolchain, work: Path, *, base_dir: Path) -> dict[str, str]:
        """`base_dir`: paths under it are hashed relative to the compile's directory."""
        identity = work / "toolchain-identity.json"
        # nvcc's flags for reproducible objects reach it through NVCC_PREPEND_FLAGS, which
        # ccache does not see: objects made before them must not be reused
        identity.write_text(json.dumps({**cache_identity(toolchain),
                                        "build_paths": reproducible.SCHEME}, sort_keys=True))
        # nor NVCC_APPEND_FLAGS, where the pre-build check puts the split count (which ptxas
        # writes into each cubin): it writes them to this file before ninja runs
        nvcc_flags = work / "nvcc-append-flags.txt"
        nvcc_flags.write_text("")
        env = {
            "PYTORCH_NVCC": f"{self.ccache} {toolchain.nvcc}",
            "CCACHE_DIR": str(self.local),
            "CCACHE_BASEDIR": str(base_dir),
            "CCACHE_NOHASHDIR": "1",
            "CCACHE_COMPILERCHECK": "content",
            "CCACHE_EXTRAFILES": f"{identity}:{nvcc_flags}",
            parallel.NVCC_FLAGS_FILE: str(nvcc_flags),
            "CCACHE_SLOPPINESS": "include_file_mtime,include_file_ctime,time_macros",
            "CCACHE_STATSLOG": str(work / "ccache-stats.log"),
        }
        if self.remote:
            env["CCACHE_REMOTE_STORAGE"] = self.remote
        return env


def cache_identity(toolchain: Toolchain) -> dict[str, object]:
    """What of the toolchain an object may depend on beyond what ccache hashes itself (nvcc's
    binary, the arguments, the preprocessed text): its torch and CUDA, and the NVIDIA
    packages' pins, which hold the compiler's other parts (cicc, ptxas, libdevice). Not the
    Python, nor the pins that differ by Python (networkx, numpy: an object sees them only
    through headers it includes, which are in the preprocessed text), so a file that does not
    include Python.h serves every Python (pathview.py)."""
    identity = {k: v for k, v in toolchain.identity().items() if k not in ("python", "pins")}
    return {**identity, "pins": [pin for pin in toolchain.pins
                                 if canonicalize_name(re.split(r"[=<>!~;\[ ]", pin)[0])
                                 .startswith("nvidia-")]}


def compiler_launchers(wrapper: str, comment: str) -> dict[str, str]:
    """`c++`/`g++` scripts that run the real compiler through `wrapper` (ccache, sccache).
    torch checks the compiler named by CXX, so `CXX="ccache c++"` would fail its version
    check; a script first on PATH does not."""
    scripts = {}
    for name in ("c++", "g++"):
        real = shutil.which(name)
        if real is not None:
            scripts[name] = (f"#!/bin/sh\n# {comment}\n"
                             f"exec {shlex.quote(wrapper)} {shlex.quote(real)} \"$@\"\n")
    return scripts


def resolve(spec: str | None, cache_root: Path) -> CompileCache | None:
    """`off`, a directory, or a remote URL (local objects are kept too); default: a local
    directory when ccache is installed, else no cache."""
    value = spec if spec is not None else os.environ.get(ENV)
    if value == "off":
        return None
    ccache = shutil.which("ccache")
    if ccache is None:
        if value:
            raise UsageError(f"--compile-cache {value} needs ccache, which is not installed",
                             hint="apt install ccache (4.7 or newer), or --compile-cache off")
        return None
    local = Path(os.environ.get(LOCAL_ENV) or cache_root / "ccache")
    if value and value.startswith(REMOTE_SCHEMES):
        return CompileCache(ccache, local, value)
    return CompileCache(ccache, Path(value).resolve() if value else local)


def stats(work: Path) -> dict[str, object]:
    """Hits and misses of this build, from ccache's per-call stats log, and what each source
    file got (`sources`: its path relative to the source tree, "hit (direct)",
    "hit (preprocessed)" or "miss", "+ remote" when the object came from the remote)."""
    log = work / "ccache-stats.log"
    calls = _calls(log.read_text()) if log.is_file() else []
    counts = Counter(counter for _, found in calls for counter in found)
    sources = {name: _outcome(found) for name, found in calls if _outcome(found)}
    return {"hits": sum(counts[c] for c in HIT_COUNTERS), "misses": counts["cache_miss"],
            "remote_hits": counts["remote_storage_hit"], "sources": sources}


def _calls(text: str) -> list[tuple[str, set[str]]]:
    """(input file, counters) per ccache call: a `# FILE` line, then its counters."""
    calls: list[tuple[str, set[str]]] = []
    for line in filter(None, map(str.strip, text.splitlines())):
        if line.startswith("#"):
            calls.append((_relative(line.removeprefix("#").strip()), set()))
        elif calls:
            calls[-1][1].add(line)
    return calls


def _relative(name: str) -> str:
    """`../../csrc/x.cu` (relative to build/temp.*, where torch's ninja compiles) as
    `csrc/x.cu`."""
    parts = Path(name).parts
    while parts and parts[0] == "..":
        parts = parts[1:]
    return "/".join(parts)


def _outcome(counters: set[str]) -> str:
    remote = " + remote" if "remote_storage_hit" in counters else ""
    if "direct_cache_hit" in counters:
        return "hit (direct)" + remote
    if "preprocessed_cache_hit" in counters:
        return "hit (preprocessed)" + remote
    return "miss" if "cache_miss" in counters else ""
