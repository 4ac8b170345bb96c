"""Same inputs, same bytes: what keeps where a build ran out of the wheel it makes.

Two builds of one content key (recipe, version, patches, profile, archs, Python, platform) give
one sha256, whatever the work directory or runner. What made them differ, and the answer:

- absolute paths in the binaries: `__FILE__` in host code and the DWARF of the `-g` that
  Python's own CFLAGS carry name the source tree, the toolchain venv, the base Python and the
  CUDA headers. `-ffile-prefix-map` rewrites each to a fixed name (`/wheelsmith/src`, ...) for
  the host compiler (CPPFLAGS, which setuptools appends to the compile flags) and, through
  nvcc's NVCC_PREPEND_FLAGS, for the host compile of every `.cu` (`-Xcompiler`).
- the Python's own compile and link flags: setuptools takes them from the running Python,
  and Debian's (the image) differ from python.org's and pyenv's (`-O2
  -fstack-protector-strong`, `-Bsymbolic-functions` vs `-O3`). Every build gets CPython's
  defaults instead (`python_flags`), so the host and the image give one `.so`.
- nvcc's temporary names: without `-objtemp` nvcc writes its intermediates to
  `/tmp/tmpxft_<pid>_00000000-6_<name>.cudafe1.cpp`, and the host compiler records that name
  (its hex process id) as the object's STT_FILE symbol. `-objtemp` puts them beside the object
  as `<object>.cudafe1.cpp`. nvcc's module id (`__NV_MODULE_ID`) was found to depend on neither
  the path nor the run (one object from two trees and two runs: one sha256).
- cudafe++'s names for anonymous namespaces (`_GLOBAL__N__<path hash>_<len>_<file>_<random>`,
  e.g. from libcu++'s `cuda::std::ignore`) end in a number drawn per run, which changed the
  symbols, host code and fatbin of causal-conv1d's `.so`. nvcc's `-frandom-seed` fixes that
  number. One seed serves every file: the name's first hash is of the file's path, so two
  files never share a name (nvcc asks for a seed per file; the name shows why it needn't).
- nvcc's split-compile: `nvcc --split-compile=N` also splits cicc's optimisation, and that
  split is not deterministic (the tiny kernel's SASS differed between a build and its
  rebuild: a 16-byte longer `.nv_fatbin`, 2,784 bytes of the `.so`). wheelsmith's split goes
  to ptxas only (parallel.PTXAS_SPLIT), which gives the same code as no split; its worker
  count stays in the cubin's `.note.nv.tkinfo` (ptxas's command line), so wheels are
  bit-identical where the split count is: the same machine, or `--split-compile off|N`.
  nvcc's own split is there by name, `--split-compile fast`, for speed on many cores; such a
  wheel's provenance says its bytes are not promised (`promise`), and so does one whose
  build's NVCC flags ask for nvcc's split (`--env NVCC_APPEND_FLAGS=--split-compile=0`).
- the compile cache: ccache's base_dir made the compilers record relative paths where a
  build without the cache records absolute ones (compilecache.SAME_BYTES): the cache is used
  without it, and an object from it is the one a compile without it makes.
- the time: SOURCE_DATE_EPOCH is the sdist's newest file (finish.source_epoch), also after the
  recipe's patches, which would make it the time of the build (`clamp_mtimes`); zip entries
  are sorted, dated from it and get fixed permissions (wheelfile.rewrite).
- the provenance: `wheelsmith.json` holds what defines the build; the facts of one run (times,
  durations, parallelism, smoke output, cache and farm use, runner, paths) go to the side file
  `run.json` beside the build's log in its work directory (`write_run`, `read_run`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wheelsmith.builder import prebuild
from wheelsmith.builder.parallel import Parallelism
from wheelsmith.files import atomic_write_text, set_times
from wheelsmith.toolchain.env import Toolchain

log = logging.getLogger(__name__)

SOURCE_AS = "/wheelsmith/src"
TOOLCHAIN_AS = "/wheelsmith/toolchain"
PYTHON_AS = "/wheelsmith/python"
CUDA_AS = "/wheelsmith/cuda"
TARGET_AS = "/wheelsmith/target"  # a cross build's target site (the other CPU's torch)
SITE_AS = "/wheelsmith/site"  # the toolchain's site-packages at a path view's fixed path
SYSTEM_PREFIXES = frozenset({"/", "/usr", "/usr/local"})  # the same on every machine
# what the compile cache adds to its key: objects made under another scheme differ in bytes
SCHEME = ("file-prefix-map to /wheelsmith/*, nvcc -objtemp -frandom-seed, "
          "split-compile in ptxas only, path view, absolute paths (no ccache base_dir)")
RANDOM_SEED = "wheelsmith"
RUN_FILE = "run.json"
NOT_PROMISED = "bytes_not_promised"  # the provenance's mark of a wheel whose bytes vary
# provenance keys that describe one run, not the build: they go to the side file
RUN_KEYS = ("build", "smoke", "prebuild_check", "runner", "compile_cache", "compile_farm",
            "torch_range")


def path_maps(toolchain: Toolchain, source: Path, more: Sequence[tuple[Path, str]] = ()
              ) -> list[tuple[str, str]]:
    """(old, new) prefixes for `-ffile-prefix-map`, the most specific last (GCC uses the last
    option that matches); `more`: others (the host libraries' directories). A path view
    (pathview.py) rewrites the real paths in them to the ones its compilers see."""
    venv = toolchain.python.parent.parent
    base = Path(os.path.realpath(toolchain.python)).parent.parent
    wanted = [(venv, TOOLCHAIN_AS), (base, PYTHON_AS), (toolchain.cuda_home, CUDA_AS),
              (source, SOURCE_AS)]
    if str(base) in SYSTEM_PREFIXES:  # /usr is not mapped, but its Python's headers are
        include = f"include/python{toolchain.python_version}"
        wanted.append((base / include, f"{PYTHON_AS}/{include}"))
    if toolchain.target_site is not None:
        wanted.append((toolchain.target_site, TARGET_AS))
    # the site-packages (torch's headers) has one name whether or not the build runs in a
    # path view: a build in the image, where there is none, gives the bytes of one here
    if toolchain.site is not None:
        wanted.append((toolchain.site, SITE_AS))
    wanted += more
    maps: dict[str, str] = {}
    for path, new in wanted:
        for old in dict.fromkeys([str(path), os.path.realpath(path)]):
            if old in SYSTEM_PREFIXES:
                continue
            if any(c.isspace() or c in ",=" for c in old):  # nvcc splits -Xcompiler at commas
                log.warning("%s holds a space, comma or '=': it stays in the binaries", old)
                continue
            maps.setdefault(old, new)
    return sorted(maps.items(), key=lambda item: len(item[0]))


# CPython's configure defaults (python.org's, pyenv's and manylinux's Pythons carry these) less
# `-g`: the compile flags of every build, whichever Python runs it (python_flags). No host debug
# info, as in torch's and numpy's release wheels: its DWARF holds the Python headers' lines and
# layout, so every patch release of one Python minor (pyenv's 3.11.7, Debian's 3.11.2) gave
# other bytes under one content key; without it they give one .so (the ABI is the minor's).
PYTHON_CFLAGS = "-Wsign-compare -DNDEBUG -fwrapv -O3 -Wall"


def compiler_env(maps: list[tuple[str, str]], env: Mapping[str, str]) -> dict[str, str]:
    """CPPFLAGS and NVCC_PREPEND_FLAGS of `env` with the prefix maps and nvcc's
    `-objtemp` and `-frandom-seed` added (what the build sets itself stays, after ours)."""
    flags = [f"-ffile-prefix-map={old}={new}" for old, new in maps]
    nvcc = ["-objtemp", f"-frandom-seed={RANDOM_SEED}",
            *(part for flag in flags for part in ("-Xcompiler", flag))]

    def joined(var: str, ours: list[str]) -> str:
        return " ".join([*ours, env[var]] if env.get(var) else ours)

    # CPPFLAGS: setuptools appends them to CFLAGS and CXXFLAGS, whoever set those
    return {"CPPFLAGS": joined("CPPFLAGS", flags),
            "NVCC_PREPEND_FLAGS": joined("NVCC_PREPEND_FLAGS", nvcc),
            **python_flags(env)}


def python_flags(env: Mapping[str, str]) -> dict[str, str]:
    """The host compiler's and linker's flags, fixed (what the package's build sets stays).

    setuptools takes them from the running Python's sysconfig, so they were those of whoever
    built that Python: Debian's python3.11 (the image) compiles with `-O2
    -fstack-protector-strong` and links with `-Wl,-Bsymbolic-functions`, python.org's and
    pyenv's with `-O3`, and the same content key gave another `.so` in the image than here
    (a `__stack_chk_fail` reference, among others). The build gets CPython's own defaults for
    every Python instead; setuptools lets CFLAGS, CXXFLAGS, LDSHARED and LDCXXSHARED replace
    sysconfig's."""
    return {"CFLAGS": env.get("CFLAGS") or PYTHON_CFLAGS,
            "CXXFLAGS": env.get("CXXFLAGS") or PYTHON_CFLAGS,
            "LDSHARED": env.get("LDSHARED") or f"{env.get('CC') or 'gcc'} -shared",
            "LDCXXSHARED": env.get("LDCXXSHARED") or f"{env.get('CXX') or 'g++'} -shared"}


def promise(parallelism: Parallelism, env: Mapping[str, str]) -> dict[str, str]:
    """What the provenance says of a build whose bytes its content key does not promise (and
    `verify --rebuild` reads): nvcc's own split-compile, asked for by `--split-compile fast`
    or by the build's NVCC flags, splits cicc's optimisation, whose result varies from run to
    run. Nothing for every other build, so its wheel's bytes stay what they were."""
    given = prebuild.given_split(env)
    if given is not None and given != "1":  # the build's own flags win (prebuild.py)
        why = f"its NVCC flags ask for nvcc's own --split-compile={given}"
    elif not parallelism.reproducible:
        why = "built with --split-compile fast (nvcc's own split)"
    else:
        return {}
    return {NOT_PROMISED: f"{why}: its device code varies from run to run"}


def clamp_mtimes(root: Path, epoch: int) -> None:
    """Files newer than `epoch` (what the patches wrote) get `epoch` as their time."""
    set_times(root, epoch, lambda path: not path.is_symlink() and path.stat().st_mtime > epoch,
              directories=False)


def split_record(record: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what defines the build, what one run of it found)."""
    defining = {k: v for k, v in record.items() if k not in RUN_KEYS}
    return defining, {k: record[k] for k in RUN_KEYS if k in record}


def write_run(work: Path, run: dict[str, Any]) -> None:
    """The facts of the run that built the work directory's key (replacing the last one's)."""
    atomic_write_text(work / RUN_FILE, json.dumps(run, indent=2, sort_keys=True) + "\n")


def read_run(work: Path) -> dict[str, Any]:
    """The facts of the last run in `work`; empty when none were written."""
    try:
        data: dict[str, Any] = json.loads((work / RUN_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data


def portable(path: Path, toolchain: Toolchain) -> str:
    """`path` as the provenance records it: inside the toolchain's venv, relative to it
    (`/wheelsmith/toolchain/lib/...`), so a user's cache directory is not in the wheel."""
    venv = toolchain.python.parent.parent
    for root in dict.fromkeys([venv, Path(os.path.realpath(venv))]):
        if path.is_relative_to(root):
            return str(Path(TOOLCHAIN_AS) / path.relative_to(root))
    return str(path)
