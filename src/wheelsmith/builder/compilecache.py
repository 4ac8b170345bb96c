"""The compile cache: ccache in front of nvcc and the host compiler.

torch's build honours `PYTORCH_NVCC` (the nvcc in build.ninja), which becomes the nvcc
launcher (NVCC_LAUNCHER: `ccache nvcc`, each option nvcc passes on to another tool joined to its
value, as CMake's CUDA launcher too); the host compiler `c++` is a launcher script first on PATH
that runs `ccache c++`. Objects go
to a local directory (default `~/.cache/wheelsmith/ccache`) and, optionally, to a shared
remote (ccache's redis or http storage) so CI runners reuse each other's objects. Nothing
else about the build changes, so the cache is not part of the content key.

What may reuse an object: ccache hashes the compiler binary (compiler_check=content), every
argument (so each -gencode arch), the preprocessed source or its includes, and — as an extra
file — the toolchain's identity (pins, torch, nvcc; not the Python, which reaches an object
only through the headers it includes) and how build paths are kept out of objects
(reproducible.SCHEME).

An object from the cache is the object a compile without it makes: same key, same bytes with
the cache off, cold or warm, local or remote. So ccache compiles with the paths it was given
(no base_dir: SAME_BYTES), and a fresh directory on another runner, or a build for another
Python, still hits because the compile sees the toolchain and the source at fixed paths
(pathview.py). Where there is no path view, objects are reused only at the same paths (the
same work directory: a resumed or repeated build of the key).
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

from wheelsmith.builder import parallel, reproducible
from wheelsmith.errors import UsageError
from wheelsmith.toolchain.env import Toolchain

ENV = "WHEELSMITH_COMPILE_CACHE"
LOCAL_ENV = "WHEELSMITH_CCACHE_DIR"  # the local object directory (default <cache>/ccache)
REMOTE_SCHEMES = ("redis://", "redis+unix://", "http://", "https://")
HIT_COUNTERS = ("direct_cache_hit", "preprocessed_cache_hit")
# ccache's base_dir does not only hash paths under it relative to the compile's directory: it
# compiles with them so (`-I../../../site/torch/include`, `../../csrc/x.cu`), and the compilers
# record the relative forms where a build without the cache records the absolute ones, which
# the prefix maps then fix (reproducible.py): `__FILE__` in host code and torch's checks, and
# `-lineinfo`'s file table, which also takes the compile's directory (`.../temp.linux-x86_64-
# cpython-311/../../../site/...`). An object from the cache then differed from one compiled
# without it. The empty value also overrides a base_dir in ccache.conf (the cache directory's
# or the system's); the fixed paths of the path view are what lets another work directory or
# Python hit (pathview.py).
SAME_BYTES = {"CCACHE_BASEDIR": ""}
LAUNCHER_DIR = "launchers"  # under the build's work directory, first on its PATH
NVCC_LAUNCHER = "nvcc-launcher"
# nvcc's options that pass their value on to another tool (the host compiler, ptxas, the
# linkers, cudafe). Given as two words (`-Xptxas -Werror`), ccache 4.7 takes the value for an
# option of its own and moves it (`-Werror -Xptxas`: nvcc fatal: Value '-Xptxas' is not
# defined for option 'Werror'; `-Xcompiler -DX` loses its -DX to the preprocessor's
# arguments). Joined (`-Xptxas=-Werror`), they mean the same to nvcc and ccache keeps them.
PASS_THROUGH = ("-Xcompiler", "--compiler-options", "-Xptxas", "--ptxas-options", "-Xlinker",
                "--linker-options", "-Xnvlink", "--nvlink-options", "-Xarchive",
                "--archive-options", "-Xfatbin", "--fatbin-options", "-Xcudafe")


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
        return {**compiler_launchers(self.ccache, "wheelsmith compile cache"),
                NVCC_LAUNCHER: nvcc_launcher(self.ccache)}

    def env(self, toolchain: Toolchain, work: Path) -> dict[str, str]:
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
            "PYTORCH_NVCC": f"{work / LAUNCHER_DIR / NVCC_LAUNCHER} {toolchain.nvcc}",
            "CCACHE_DIR": str(self.local),
            **SAME_BYTES,
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


def nvcc_launcher(wrapper: str) -> str:
    """A script that runs the compile it is given (`nvcc ARGS`) through `wrapper`, each of
    nvcc's PASS_THROUGH options joined to the word after it."""
    return ("#!/bin/sh\n# wheelsmith compile cache: nvcc through ccache, each option nvcc passes "
            "on joined to its value\n"
            "fresh=1 held=\n"
            "for word in \"$@\"; do\n"
            "  if [ \"$fresh\" = 1 ]; then set --; fresh=0; fi\n"
            "  if [ -n \"$held\" ]; then set -- \"$@\" \"$held=$word\"; held=; continue; fi\n"
            f"  case \"$word\" in\n    {'|'.join(PASS_THROUGH)}) held=$word ;;\n"
            "    *) set -- \"$@\" \"$word\" ;;\n  esac\ndone\n"
            "if [ -n \"$held\" ]; then set -- \"$@\" \"$held\"; fi\n"
            f"exec {shlex.quote(wrapper)} \"$@\"\n")


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


def stats(work: Path, source: Path) -> dict[str, object]:
    """Hits and misses of this build, from ccache's per-call stats log, and what each source
    file got (`sources`: its path relative to `source`, the tree as the compilers saw it,
    "hit (direct)", "hit (preprocessed)" or "miss", "+ remote" when the object came from the
    remote)."""
    log = work / "ccache-stats.log"
    calls = _calls(log.read_text(), source) if log.is_file() else []
    counts = Counter(counter for _, found in calls for counter in found)
    sources = {name: _outcome(found) for name, found in calls if _outcome(found)}
    return {"hits": sum(counts[c] for c in HIT_COUNTERS), "misses": counts["cache_miss"],
            "remote_hits": counts["remote_storage_hit"], "sources": sources}


def _calls(text: str, source: Path) -> list[tuple[str, set[str]]]:
    """(input file, counters) per ccache call: a `# FILE` line, then its counters."""
    calls: list[tuple[str, set[str]]] = []
    for line in filter(None, map(str.strip, text.splitlines())):
        if line.startswith("#"):
            calls.append((_relative(Path(line.removeprefix("#").strip()), source), set()))
        elif calls:
            calls[-1][1].add(line)
    return calls


def _relative(name: Path, source: Path) -> str:
    """`<source>/csrc/x.cu` (torch's ninja names its inputs so) and `../../csrc/x.cu`
    (relative to build/temp.*, where it compiles) as `csrc/x.cu`."""
    if name.is_relative_to(source):
        return name.relative_to(source).as_posix()
    parts = name.parts
    while parts and parts[0] == "..":
        parts = parts[1:]
    return Path(*parts).as_posix() if parts else ""


def _outcome(counters: set[str]) -> str:
    remote = " + remote" if "remote_storage_hit" in counters else ""
    if "direct_cache_hit" in counters:
        return "hit (direct)" + remote
    if "preprocessed_cache_hit" in counters:
        return "hit (preprocessed)" + remote
    return "miss" if "cache_miss" in counters else ""
