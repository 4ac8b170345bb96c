"""How wide a build runs: compile jobs, nvcc threads and nvcc split-compile workers. Pure.

`MAX_JOBS` compiles files side by side; `NVCC_THREADS` (a package's `nvcc --threads`) runs one
file's per-arch passes side by side; `--split-compile=N` splits each pass's optimisation into N
threads. The last files of a build run alone (causal-conv1d's causal_conv1d_bwd.cu is its whole
critical path), so without a split a 16-core machine compiles the tail on two cores.

The rules:
- threads = archs, at most 4 and at most the cores (as before);
- jobs = the cores (plus a compile farm's CPUs), bounded by what fits in memory: jobs x threads x
  the recipe's `memory_per_job_gb` <= available memory;
- split (auto) = enough workers for one file to fill the machine alone (cores / threads), no
  more than what fits in memory counting each worker as a whole job, and no more than
  OVERSUBSCRIBE threads per core while the CUDA files of build.ninja compile side by side.
  Off when the file alone already has every core (cores / threads < 2: 2 cores with 2 archs,
  where 2 threads x 2 workers measured 554 s against 454 s without), with no CUDA files, and
  with a compile farm (its servers are full with jobs).

The split goes to ptxas only (`--ptxas-options=--split-compile=N`), not to nvcc as a whole:
nvcc's own `--split-compile` also splits cicc's optimisation, whose result depends on how its
threads ran (nvcc 13.0, one kernel, `--split-compile=2`: two PTX variants in 6 runs, one with a
common subexpression not eliminated, so different SASS; a 16-kernel file: 3 variants in 6).
ptxas's split gave one cubin in every run and the same code as no split (16 kernels, 2, 3, 4,
0 workers, pinned to one CPU or not); the one thing its count changes is ptxas's command line
in the cubin's `.note.nv.tkinfo` note (`-split-compile N`): a wheel is bit-identical to another
built with the same count (reproducible.py).

`fast` asks for nvcc's own split (`--split-compile=0`: cicc and ptxas, one worker per CPU)
by name: faster on many cores (causal-conv1d for 9.0 on 16 cores: 181 s against 231 s with
the reproducible split), but its bytes vary from run to run. It is outside the content key,
like every split setting, and the wheel's provenance says its bytes are not promised
(reproducible.promise), so `verify --rebuild` says so instead of calling a difference
tampering.

The split count needs the number of CUDA files, which only build.ninja knows: the pre-build
check (prebuild.py) refines it there with `refine` and passes the flag to nvcc.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

SPLIT_ENV = "WHEELSMITH_SPLIT_COMPILE"  # auto | off | N, the default of --split-compile
PLAN_ENV = "WHEELSMITH_PARALLELISM"  # the chosen Parallelism, for the pre-build check
# the compile cache's file that the pre-build check writes NVCC_APPEND_FLAGS to, so ccache
# (which hashes that file, not the environment) keys objects by the split count
NVCC_FLAGS_FILE = "WHEELSMITH_NVCC_FLAGS_FILE"
MAX_THREADS = 4
MIN_SPLIT = 2  # fewer idle cores per thread than this: no split
OVERSUBSCRIBE = 4  # compiler threads per core, at most, while files compile side by side
AUTO, OFF, FAST = "auto", "off", "fast"
# nvcc's --split-compile splits cicc's optimisation too, and cicc's split is not deterministic;
# ptxas's split is (the module docstring)
PTXAS_SPLIT = "--ptxas-options=--split-compile={}"
NVCC_SPLIT = "--split-compile=0"  # FAST: nvcc's own, one worker per CPU; not deterministic


class SplitSettingError(ValueError):
    pass


def parse_split(value: str) -> str:
    """`auto`, `off`, a worker count (`0`: one per CPU) or `fast` (nvcc's own split)."""
    text = value.strip().lower()
    # ASCII digits, at most 3 (not '²', which isdigit() but int() refuses, nor 5,000 of them)
    digits = text.isascii() and text.isdigit() and len(text) <= 3
    if text in (AUTO, OFF, FAST) or (digits and int(text) <= 256):
        return str(int(text)) if digits else text
    raise SplitSettingError(f"'{value}' is not auto, off, fast or a number of workers (0-256)")


@dataclass(frozen=True, slots=True)
class Parallelism:
    jobs: int
    nvcc_threads: int
    cores: int
    available_gb: float
    split: int = 1  # --split-compile workers per thread; 1: no split, 0: one per CPU
    split_setting: str = AUTO  # auto | off | fast | N (N=0: one per CPU)
    fits: int = 1  # compiler processes that fit in memory
    farm_cpus: int = 0
    cuda_units: int | None = None  # CUDA files in build.ninja, once known
    cxx_units: int | None = None

    @property
    def reproducible(self) -> bool:
        """Whether the split gives the same device code every run (all but `fast`)."""
        return self.split_setting != FAST

    def split_flag(self) -> str | None:
        """The nvcc flag for NVCC_APPEND_FLAGS, or None for no split: ptxas's split only
        (module docstring: nvcc's own split varies the device code), unless `fast`."""
        if self.split_setting == FAST:
            return NVCC_SPLIT
        if self.split_setting not in (AUTO, OFF):
            return PTXAS_SPLIT.format(self.split_setting)
        return PTXAS_SPLIT.format(self.split) if self.split > 1 else None

    def describe_split(self) -> str:
        if self.split_setting == OFF:
            return "split-compile off"
        if self.split_setting == FAST:
            return "split-compile fast (nvcc's own: bytes not reproducible)"
        if self.split_setting != AUTO:
            return f"split-compile={self.split_setting}"
        if self.cuda_units is None:  # before build.ninja: the most it can become
            most = _split(self, None)
            return f"split-compile auto (up to {most})" if most > 1 else "split-compile off"
        return f"split-compile={self.split}" if self.split > 1 else "split-compile off"

    def describe(self) -> str:
        farm = f", farm {self.farm_cpus} CPUs" if self.farm_cpus else ""
        return (f"MAX_JOBS={self.jobs} NVCC_THREADS={self.nvcc_threads} "
                f"{self.describe_split()} ({self.cores} cores, {self.available_gb:.1f} GB "
                f"available{farm})")

    def describe_units(self) -> str:
        """The plan once build.ninja is known (the pre-build check's line)."""
        return (f"{self.cuda_units} CUDA + {self.cxx_units} C++ file(s): MAX_JOBS={self.jobs} "
                f"NVCC_THREADS={self.nvcc_threads} {self.describe_split()}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Parallelism:
        return cls(**json.loads(text))


def choose(cores: int, available_gb: float, per_job_gb: float, n_archs: int, *,
           jobs: int | None = None, split: str = AUTO, farm_cpus: int = 0) -> Parallelism:
    """The plan before build.ninja exists (its split is the most `refine` can choose)."""
    threads = max(1, min(n_archs, cores, MAX_THREADS))
    fits = max(1, int(available_gb // per_job_gb)) if per_job_gb > 0 else cores * MAX_THREADS
    if fits < threads:
        threads = 1
    chosen = jobs if jobs is not None else max(1, min(cores + farm_cpus, fits // threads))
    plan = Parallelism(chosen, threads, cores, available_gb, split_setting=split, fits=fits,
                       farm_cpus=farm_cpus)
    return replace(plan, split=_split(plan, None))


def refine(plan: Parallelism, cuda_units: int, cxx_units: int) -> Parallelism:
    """The plan once build.ninja's files are known."""
    known = replace(plan, cuda_units=cuda_units, cxx_units=cxx_units)
    return replace(known, split=_split(known, cuda_units))


def _split(plan: Parallelism, cuda_units: int | None) -> int:
    if plan.split_setting in (OFF, FAST):
        return 1 if plan.split_setting == OFF else 0  # fast: nvcc's own, one per CPU
    if plan.split_setting != AUTO:
        return int(plan.split_setting)
    threads = plan.nvcc_threads
    alone = plan.cores // threads  # the last file, alone, fills the machine
    if cuda_units == 0 or plan.farm_cpus or alone < MIN_SPLIT:
        return 1
    in_memory = plan.fits // threads
    side_by_side = min(plan.jobs, cuda_units if cuda_units is not None else 1)
    crowd = (OVERSUBSCRIBE * plan.cores) // (side_by_side * threads)
    return max(1, min(alone, in_memory, crowd))
