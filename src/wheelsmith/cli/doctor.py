"""`doctor`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wheelsmith import console, pipeline
from wheelsmith import doctor as checkup
from wheelsmith.arch import Arch
from wheelsmith.cli._common import emit_json, json_option, main, parse_archs
from wheelsmith.errors import DoctorError, UsageError


@main.command()
@click.option("--arch", "arch_value", metavar="X.Y",
              help="Check for this compute capability (default: the GPU's).")
@click.option("--index", "index_url", default="http://127.0.0.1:8080", show_default=True,
              help="Base URL of the wheelsmith index the fixes install from; each fix is checked "
                   "against it (what it lacks gets a `wheelsmith build` line).")
@click.option("--python", "python", type=click.Path(path_type=Path), default=sys.executable,
              show_default="this Python", help="The Python environment to examine.")
@click.option("--need", "need", multiple=True,
              type=click.Choice(["fla", "causal_conv1d", "mamba_ssm", "flash_attn"]),
              help="Fast-path modules your models need (repeatable). Default: fla and "
                   "causal_conv1d (GatedDeltaNet hybrids); add mamba_ssm for Mamba models.")
@json_option
def doctor(arch_value: str | None, index_url: str, python: Path, need: tuple[str, ...],
           as_json: bool) -> None:
    """Is this environment on the fast path? Checks every CUDA-extension package's kernels
    for the GPU's arch and whether fla, causal_conv1d, mamba_ssm and flash_attn import."""

    info = checkup.probe(python)
    if arch_value:
        arch, source = _single_arch(arch_value), "--arch"
    elif info.get("gpu"):
        major, minor = info["gpu"]["capability"]
        arch, source = _single_arch(f"{major}.{minor}"), "gpu"
    else:
        raise UsageError("no GPU is visible to this Python's torch, so there is no arch to "
                         "check", hint="pass the arch of the GPU you will run on, e.g. --arch 12.0")
    cuobjdump = pipeline.cuobjdump_for(None, Path(sys.executable))
    report = checkup.examine(info, arch, source, cuobjdump, index_url=index_url,
                             need=need or checkup.DEFAULT_NEED)
    if as_json:
        emit_json(report.as_dict())  # the report says healthy: false and why
        if not report.healthy:
            click.get_current_context().exit(DoctorError.exit_code)
        return
    console.render_doctor(report)
    if not report.healthy:
        raise DoctorError(f"not on the fast path for {arch.sm}: {len(report.problems)} "
                          "problem(s)", findings=report.problems,
                          hint="\n".join(["to fix:", *report.fixes]) if report.fixes else None)


def _single_arch(value: str) -> Arch:
    archs = parse_archs((value,))
    if archs is None or len(archs.archs) != 1:
        raise UsageError(f"--arch: give one arch for doctor, got '{value}'")
    return archs.archs[0]
