"""The pre-build check: did the requested archs reach the generated build files?

torch's BuildExtension writes a `build.ninja` and runs `ninja` in that directory. The build
environment puts a small `ninja` first on PATH that runs this module: it reads the
`-gencode`/`-arch` targets of the CUDA rules from `build.ninja`, records them, and stops the
build (exit 86) when they differ from the request — before hours of compiling, where the
post-build cubin check would only catch it afterwards. With WHEELSMITH_CONFIGURE_ONLY it
records every extension's build.ninja and compiles none of them: empty files stand in for
the objects (the linker takes them), so setup.py goes on to its next extension; the wheel
that comes out is thrown away (a configure-only build for packages too big to compile in
CI); with WHEELSMITH_SAMPLE_COMPILE it first compiles the cheapest host and CUDA object of
each for real (sample.py: `build --check`, exit 89 when one fails). Sources the build would
compile but the tree does not hold (an sdist without its csrc/) stop it too (exit 88), before
any arch is looked at. Otherwise it chooses nvcc's
split-compile from the CUDA files it found (parallel.refine), adds it to NVCC_APPEND_FLAGS
unless the build already sets one, says so (`wheelsmith plan: ...`) and hands over to the
real ninja.

Longest first: ninja starts the compiles that are ready in build.ninja's order, so a heavy
file listed last runs alone at the end while the other cores idle (flash-attn for 9.0 on 16
cores: its last 4 objects ran with 12 cores idle). Given an earlier run's seconds per object
(WHEELSMITH_OBJECT_SECONDS: the newest run of the same recipe and version in the work
directory, resume.earlier_object_seconds), the check writes build.ninja's compile statements
longest first; objects that run did not time go first, in their own order. Nothing else in
the file changes, and ninja keys its log by command, so no object compiles again for it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import replace
from pathlib import Path

from wheelsmith.builder import ninjafile, parallel, sample
from wheelsmith.builder.gencode import (
    Targets,
    family_targets,
    gencode_targets,
    rewritten_targets,
)

MISMATCH = 86
CONFIGURED = 87  # a configure-only CMake build, stopped after its generate step
STOOD_IN = 0
MISSING = 88
SOURCE_CHECK = "wheelsmith source check: "
CMAKE_STOP = "wheelsmith configure-only stop: "  # the one failure a configure-only build wants
REAL_NINJA = "WHEELSMITH_REAL_NINJA"
EXPECT_SASS = "WHEELSMITH_EXPECT_SASS"
EXPECT_PTX = "WHEELSMITH_EXPECT_PTX"
REPORT = "WHEELSMITH_PREBUILD_REPORT"
CONFIGURE_ONLY = "WHEELSMITH_CONFIGURE_ONLY"
TIMINGS = "WHEELSMITH_OBJECT_SECONDS"  # a JSON file: an earlier run's seconds per object

_GIVEN_SPLIT_RE = re.compile(r"(?:^|\s)--?split-compile[= ](\d+)")
PLAN_LINE = "wheelsmith plan: "
RESUME_LINE = "wheelsmith resume: "


extension_name = ninjafile.extension_name
count_units = ninjafile.count_units
already_built = ninjafile.already_built


def missing_sources(ninja_text: str, directory: Path) -> list[str]:
    """The compile inputs of a build.ninja that do not exist (relative to its directory)."""
    inputs = [unit.source for unit in ninjafile.units(ninja_text)]
    return [name for name in dict.fromkeys(inputs) if not (directory / name).exists()]


def given_split(environ: Mapping[str, str]) -> str | None:
    """A split-compile the build sets itself (NVCC_APPEND/PREPEND_FLAGS: --env or the recipe)."""
    for var in ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"):
        match = _GIVEN_SPLIT_RE.search(environ.get(var, ""))
        if match:
            return match[1]
    return None


def apply_parallelism(ninja_text: str, environ: MutableMapping[str, str]) -> str | None:
    """Refine the build's parallelism with build.ninja's files and put the split-compile flag
    into NVCC_APPEND_FLAGS; returns the plan line (None without a plan or CUDA files). The
    flags nvcc will get are written to the compile cache's file for them (NVCC_FLAGS_FILE)."""
    line = _split_into_flags(ninja_text, environ)
    if environ.get(parallel.NVCC_FLAGS_FILE):
        Path(environ[parallel.NVCC_FLAGS_FILE]).write_text(environ.get("NVCC_APPEND_FLAGS", ""))
    return line


def _split_into_flags(ninja_text: str, environ: MutableMapping[str, str]) -> str | None:
    chosen = environ.get(parallel.PLAN_ENV)
    if not chosen or not ninjafile.has_cuda(ninja_text):
        return None
    plan = parallel.refine(parallel.Parallelism.from_json(chosen), *count_units(ninja_text))
    given = given_split(environ)
    if given is not None:
        plan = replace(plan, split_setting=given, split=int(given))
        return plan.describe_units() + " (set by the build's NVCC flags)"
    flag = plan.split_flag()
    if flag is not None:
        environ["NVCC_APPEND_FLAGS"] = " ".join(filter(None, [
            environ.get("NVCC_APPEND_FLAGS", ""), flag]))
    return plan.describe_units()


def _ninja_file(argv: list[str]) -> Path:
    directory, name = Path(), "build.ninja"
    for flag, value in zip(argv, [*argv[1:], ""], strict=False):
        if flag == "-C":
            directory = Path(value)
        elif flag == "-f":
            name = value
    return directory / name


def _expected(var: str) -> frozenset[str]:
    return frozenset(v for v in os.environ.get(var, "").split(",") if v)


def _builds(argv: list[str], ninja_file: Path) -> bool:
    """Whether ninja is asked to build from `ninja_file`: not `--version`, not a tool (CMake
    runs `-t recompact` and `-t restat` at its generate step), not one of CMake's configure
    checks, nor anything else CMake builds while it configures (FetchContent's sub-builds:
    vllm's cutlass, whose build.ninja the check once took for the project's and stopped)."""
    return "--version" not in argv and not any(a.startswith("-t") for a in argv) and \
        ninja_file.is_file() and not ninjafile.try_compile(ninja_file) and \
        not cmake_configuring()


# what runs between a configuring cmake and the ninja it starts: `cmake --build` of a
# sub-build, a shell, another ninja
_SHELLS = ("sh", "bash", "dash")
MAX_ANCESTORS = 16


def cmake_configuring(pid: int | None = None) -> bool:
    """Whether this ninja runs for a cmake that is configuring (`cmake -S ... -B ...`, not
    `cmake --build`, `-E` or `-P`): the nearest ancestors that are cmake, ninja or a shell are
    read from /proc; the first other program ends the search (python: the package's build)."""
    pid = os.getppid() if pid is None else pid
    for _ in range(MAX_ANCESTORS):
        argv = _cmdline(pid)
        name = Path(argv[0]).name if argv else ""
        if name.startswith("cmake"):
            if not {"--build", "-E", "-P", "--install"} & set(argv[1:]):
                return True
        elif not name.startswith("ninja") and name not in _SHELLS:
            return False
        pid = _parent(pid)
        if pid <= 1:
            return False
    return False


def _cmdline(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace")
                for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rpartition(")")[2].split()[1])


def check(argv: list[str]) -> int | None:
    """Exit code to stop with, or None to hand over to the real ninja."""
    ninja_file = _ninja_file(argv)
    if not _builds(argv, ninja_file):
        return None
    rewritten_targets(ninja_file, os.environ)
    text = family_targets(ninja_file, os.environ)
    missing = missing_sources(text, ninja_file.parent)
    if missing:  # ninja would stop at them ("missing and no known rule to make it")
        sys.stderr.write(f"{SOURCE_CHECK}{ninja_file.resolve()} compiles {len(missing)} "
                         f"file(s) the source tree does not hold: {', '.join(missing)}; "
                         "stopping before compiling\n")
        return MISSING
    configure_only = bool(os.environ.get(CONFIGURE_ONLY))
    if not ninjafile.has_cuda(text) and not configure_only:
        return None  # no CUDA sources in this extension
    found = gencode_targets(text)
    wanted = Targets(_expected(EXPECT_SASS), _expected(EXPECT_PTX))
    samples = sample.choose(text, ninja_file.parent.resolve(), earlier_seconds(os.environ)) \
        if configure_only and os.environ.get(sample.SAMPLE) else ()
    if os.environ.get(REPORT):  # a C++-only one (configure-only) too: cuda_units 0
        cuda, cxx = count_units(text)
        hosts = ninjafile.host_libraries(text) if cuda and ninjafile.from_cmake(text) else []
        with Path(os.environ[REPORT]).open("a") as report:
            report.write(json.dumps({"build_ninja": str(ninja_file.resolve()),
                                     "extension": extension_name(text),
                                     **found.as_dict(), "cuda_units": cuda,
                                     "cxx_units": cxx, **({"host_libraries": hosts}
                                                          if hosts else {}), "samples": [
                                         s.as_dict(ninja_file.parent.resolve())
                                         for s in samples]}) + "\n")
    if ninjafile.has_cuda(text) and found != wanted:
        sys.stderr.write(
            f"wheelsmith pre-build check: {ninja_file.resolve()} compiles SASS "
            f"{', '.join(sorted(found.sass)) or '-'} and PTX {', '.join(sorted(found.ptx)) or '-'}"
            f", but SASS {', '.join(sorted(wanted.sass)) or '-'} and PTX "
            f"{', '.join(sorted(wanted.ptx)) or '-'} were requested; stopping before compiling\n")
        return MISMATCH
    return configured(text, ninja_file, argv, found, samples) if configure_only else None


def configured(text: str, ninja_file: Path, argv: list[str], found: Targets,
               samples: tuple[ninjafile.Unit, ...]) -> int:
    """A configure-only build's extension: said, its samples compiled, the rest stood in
    (torch's); CMake's build stops here, after its generate step (CONFIGURED: one build.ninja
    holds the whole project, and its link steps could not take stand-ins)."""
    sys.stderr.write(f"wheelsmith configure-only: {ninja_file.resolve()} "
                     f"({extension_name(text) or '?'}) targets "
                     f"{', '.join(sorted(found.sass)) or 'no CUDA'}; not compiled\n")
    if samples and sample.compile_sample(
            os.environ[REAL_NINJA], argv, ninja_file, samples,
            extension_name(text) or ninja_file.parent.name):
        return sample.FAILED
    if ninjafile.from_cmake(text):
        sys.stderr.write(f"{CMAKE_STOP}{ninja_file.resolve()}: CMake's build stopped after "
                         "its generate step\n")
        return CONFIGURED
    stand_in(text, ninja_file.parent)
    return STOOD_IN


def stand_in(ninja_text: str, directory: Path) -> None:
    """Empty files in place of a configure-only build's objects: the linker takes them, so
    setup.py goes on to its next extension's build.ninja and nothing is compiled."""
    for unit in ninjafile.units(ninja_text):
        output = directory / unit.output
        output.parent.mkdir(parents=True, exist_ok=True)
        output.touch()


def _statements(ninja_text: str) -> list[str]:
    """build.ninja cut into its statements: a line at column 0 with the indented (and
    blank) lines after it."""
    statements: list[str] = []
    for line in ninja_text.splitlines(keepends=True):
        if statements and (not line.strip() or line[0] in " \t"):
            statements[-1] += line
        else:
            statements.append(line)
    return statements


def longest_first(ninja_text: str, build_dir: str, seconds: Mapping[str, float]
                  ) -> tuple[str, int]:
    """build.ninja with its compile statements longest first by `seconds` (keyed by the
    object's path under `build_dir`, as resume.object_seconds names them; untimed ones first,
    in their order), and how many were timed."""
    statements = _statements(ninja_text)

    def name(statement: str) -> str | None:
        output = ninjafile.output_of(statement)
        return None if output is None else output.split(f"/{build_dir}/", 1)[-1]

    compiles = [(i, name(st)) for i, st in enumerate(statements) if name(st) is not None]
    ordered = sorted(compiles, key=lambda item: (item[1] in seconds,
                                                 -seconds.get(item[1] or "", 0.0), item[0]))
    placed = dict(zip([i for i, _ in compiles], [i for i, _ in ordered], strict=True))
    text = "".join(statements[placed.get(i, i)] for i in range(len(statements)))
    return text, sum(item[1] in seconds for item in compiles)


def earlier_seconds(environ: Mapping[str, str]) -> dict[str, float]:
    """An earlier run's seconds per object (TIMINGS), or none."""
    try:
        seconds = json.loads(Path(environ[TIMINGS]).read_text()) if environ.get(TIMINGS) else {}
    except (OSError, ValueError):
        return {}
    return seconds if isinstance(seconds, dict) else {}


def order_by_earlier_run(ninja_file: Path, environ: Mapping[str, str]) -> str | None:
    """Rewrite `ninja_file` longest first when an earlier run's times are given; what was done
    (for the plan line), or None."""
    seconds = earlier_seconds(environ)
    if not seconds:
        return None
    text = ninja_file.read_text(errors="replace")
    build_dir = ninja_file.resolve().parent.name
    ordered, timed = longest_first(text, build_dir, seconds)
    if not timed:
        return None
    if ordered != text:
        scratch = ninja_file.with_name(f"{ninja_file.name}.wheelsmith-order")
        scratch.write_text(ordered)
        scratch.replace(ninja_file)
    said = f"longest first by an earlier run ({timed} of {sum(count_units(text))} objects timed)"
    jobs = environ.get("MAX_JOBS", "")
    if not jobs.isdigit() or int(jobs) < 1:
        return said
    names = [u.output.split(f"/{build_dir}/", 1)[-1] for u in ninjafile.units(text)]
    left = estimate([seconds.get(n) for n in names], int(jobs))
    return f"{said}; about {_minutes(left)} on {jobs} jobs by those times" + (
        f"; {LONG_HINT}" if left > LONG_S else "")


LONG_S = 1800  # a build longer than this here is said with the ways out
LONG_HINT = ("long on this machine: a compile farm (--compile-farm URL), a machine with more "
             "cores, or a published wheel (wheelsmith install) is faster")


def estimate(seconds: list[float | None], jobs: int) -> float:
    """The wall time of compiling objects of these seconds on `jobs` jobs, longest first (an
    untimed one at the timed ones' mean): the busiest job's total."""
    timed = [s for s in seconds if s is not None]
    mean = sum(timed) / len(timed) if timed else 0.0
    loads = [0.0] * jobs
    for each in sorted((s if s is not None else mean for s in seconds), reverse=True):
        loads[loads.index(min(loads))] += each
    return max(loads)


def _minutes(seconds: float) -> str:
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min" if hours else f"{max(minutes, 1)} min"


def wrapper_script(python: str, real_ninja: str) -> str:
    """The `ninja` put first on the build's PATH.

    It imports this module from where it lies (`-I`: no PYTHONPATH, no user site), not from
    the build's environment: wheelsmith run from a checkout with PYTHONPATH=src would
    otherwise give a launcher whose `ninja --version` fails, and torch would silently compile
    one file at a time without the pre-build check."""
    home = str(Path(__file__).resolve().parents[2])  # the directory holding wheelsmith/
    code = (f"import sys; sys.path.insert(0, {home!r}); "
            "from wheelsmith.builder.prebuild import main; main()")
    return (f"#!/bin/sh\n# wheelsmith pre-build check, then the real ninja\n"
            f"{REAL_NINJA}={shlex.quote(real_ninja)} exec {shlex.quote(python)} -I -c "
            f"{shlex.quote(code)} \"$@\"\n")


def planned_jobs(argv: list[str], ninja_text: str, environ: Mapping[str, str]) -> list[str]:
    """CMake's build runs ninja with the package's own job count (natten: a quarter of the
    cores; scikit-build-core: none, so ninja's cores + 2): it gets the plan's MAX_JOBS instead,
    as torch's build passes it. torch's own command line is left as it is."""
    jobs = environ.get("MAX_JOBS", "")
    if not ninjafile.from_cmake(ninja_text) or not jobs.isdigit():
        return argv
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "-j":
            skip = True
        elif not re.fullmatch(r"-j\d+", arg):
            kept.append(arg)
    return ["-j", jobs, *kept]


def _say(prefix: str, line: str | None) -> None:
    if line is not None:
        sys.stderr.write(prefix + line + "\n")
        sys.stderr.flush()


def main() -> None:
    argv = sys.argv[1:]
    code = check(argv)
    if code is not None:
        sys.exit(code)
    ninja_file = _ninja_file(argv)
    real = os.environ[REAL_NINJA]
    if _builds(argv, ninja_file):
        text = ninja_file.read_text(errors="replace")
        argv = planned_jobs(argv, text, os.environ)
        plan = "; ".join(filter(None, [apply_parallelism(text, os.environ),
                                       order_by_earlier_run(ninja_file, os.environ)]))
        _say(PLAN_LINE, plan and f"{extension_name(text) or ninja_file.resolve().parent.name}: "
                             f"{plan}")
        _say(RESUME_LINE, already_built(real, argv, ninja_file))
    os.execv(real, [real, *argv])  # noqa: S606 - hand over to the real ninja


if __name__ == "__main__":
    main()
