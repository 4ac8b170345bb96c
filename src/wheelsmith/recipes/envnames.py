"""The environment variables that are wheelsmith's in a package's build: neither a recipe's
`build.env` (refused where the recipe is read, naming its file and line) nor a build's `--env`
(refused before anything is fetched) may set them. Each rule: name patterns (matched in any
case), why they are wheelsmith's, what to use instead (builder/buildenv.py sets them)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from wheelsmith.errors import UsageError

PASS_THROUGH = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", "TERM")
PROXIES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy")
NO_PROXY = ("no_proxy", "NO_PROXY")

_PROGRAMS = ("the toolchain profile provides the compilers, CUDA and Python (--toolchain, "
             "--python, --platform); a library the build needs goes in build.libraries "
             "(wheelsmith sets its *_ROOT, *_HOME and *_DIR); another path comes from a "
             "recipe patch")
_RULES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("WHEELSMITH_*",), "it is wheelsmith's own setting",
     "set it in wheelsmith's own environment (docs/cli.md, Environment)"),
    (("*ARCH*",), "the archs come from --arch, through the recipe's arch knob", "use --arch"),
    (("PYTORCH_*", "TORCH_*"), "wheelsmith sets torch's build settings (torch writes "
     "PYTORCH_NVCC into build.ninja, where a shell runs it)",
     "use --arch, --toolchain or --compile-cache"),
    (("CUDA*", "NVCC"), "the CUDA toolkit is the toolchain's (CUDA_HOME is always set from it)",
     "use --toolchain"),
    (("CC", "CXX", "CPP", "LD", "AR", "AS", "NM", "RANLIB", "STRIP", "OBJCOPY", "HOSTCXX",
      "LDSHARED", "LDCXXSHARED", "LDFLAGS"),
     "it picks the compiler or linker (a cross build's are wheelsmith's)", _PROGRAMS),
    (("*PATH", "*_HOME", "*_ROOT", "*_DIR", "*_DIRS", "LD_*"),
     "it changes where programs, libraries, headers or modules come from", _PROGRAMS),
    (("*PROXY", "PIP_*", "UV_*", *PROXIES, *NO_PROXY),
     "the build is offline: wheelsmith points its network and pip nowhere",
     "nothing is downloaded during a build; the recipe's source is fetched before it"),
    (("PYTHON*", "_PYTHON*", "SETUPTOOLS_*", "DISTUTILS_*"),
     "the Python, the wheel's tags and suffix are the toolchain's",
     "use --python or --platform"),
    (("MAX_JOBS", "NVCC_THREADS"), "wheelsmith chooses the parallelism from cores and memory",
     "use --jobs (and --split-compile)"),
    (("CCACHE_*", "SCCACHE_*"), "the compile cache and farm are wheelsmith's",
     "use --compile-cache or --compile-farm"),
    (("SOURCE_DATE_EPOCH",), "the wheel's times come from its sdist (same inputs, same bytes)",
     "nothing to set: the source fixes it"),
    (("NINJA*",), "wheelsmith reads ninja's progress and checks its build files before it runs",
     "nothing to set"),
    (("CMAKE_GENERATOR", "CMAKE_MAKE_PROGRAM", "CMAKE_*_LAUNCHER", "CMAKE_BUILD_PARALLEL_LEVEL",
      "CMAKE_TOOLCHAIN_FILE", "SKBUILD_*"),
     "a CMake build runs with Ninja, wheelsmith's compile launchers, jobs and build directory",
     "use --jobs or --compile-cache; CMake options go in the recipe's CMAKE_ARGS"),
    (("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "GIT_*", "PERL5OPT", "PERL5LIB",
      "RUBYOPT", "NODE_OPTIONS", "GLIBC_TUNABLES", "MALLOC_*", "HOSTALIASES", "LOCALDOMAIN",
      "RES_OPTIONS", "NLSPATH"),
     "the shell, git or the C library read it in every command the build runs",
     "nothing to set for a package's build"),
    (PASS_THROUGH, "wheelsmith passes it from its own environment", "set it for wheelsmith"),
)
ENV_DOC = "docs/cli.md, 'The build's environment'"


@dataclass(frozen=True, slots=True)
class Protection:
    """Why a variable is wheelsmith's: a build's --env may not set it."""

    name: str
    why: str
    instead: str

    def in_recipe(self) -> tuple[str, str]:
        """A recipe's build.env setting it: the problem and the hint."""
        return (f"{self.name}: {self.why}; a recipe's env cannot set it",
                f"{self.instead}. A recipe's env is for the package's own knobs, e.g. "
                f"FLASH_ATTENTION_FORCE_BUILD: \"TRUE\" ({ENV_DOC})")

    def error(self) -> UsageError:
        """The refusal of a build's --env naming it."""
        return UsageError(f"--env {self.name}: {self.why}; a build's --env cannot override it",
                          hint=f"{self.instead}. --env is for a package's own knobs, e.g. "
                               f"NVCC_APPEND_FLAGS=--split-compile=0 ({ENV_DOC})")


def protection(name: str) -> Protection | None:
    """Why `name` (in any case) is wheelsmith's, or None: a build may be given it."""
    upper = name.upper()
    for patterns, why, instead in _RULES:
        if any(fnmatch.fnmatchcase(upper, pattern.upper()) for pattern in patterns):
            return Protection(name, why, instead)
    return None
