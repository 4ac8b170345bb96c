"""`doctor`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from wheelsmith.arch import Arch
from wheelsmith.cli import doctor_view
from wheelsmith.cli._common import (
    SECONDS,
    emit_json,
    index_url_option,
    json_option,
    main,
    parse_archs,
)
from wheelsmith.doctor import examine, fastpath, judge
from wheelsmith.errors import DoctorError, UsageError
from wheelsmith.toolchain import tools
from wheelsmith.toolchain.driver import find_driver


@main.command()
@click.option("--arch", "arch_value", metavar="X.Y",
              help="Check for this compute capability (default: the GPU's).")
@index_url_option("Base URL of the wheelsmith index the fixes install from; each fix is "
                  "checked against it (what it lacks gets a `wheelsmith build` line).")
@click.option("--python", "python", type=click.Path(path_type=Path), default=sys.executable,
              show_default="this Python", help="The Python environment to examine.")
@click.option("--need", "need", multiple=True,
              type=click.Choice(["fla", "causal_conv1d", "mamba_ssm", "flash_attn"]),
              help="Fast-path modules your models need (repeatable). Default: the fast-path "
                   "packages installed; with --model-type/--model, added to what "
                   "the model needs.")
@click.option("--model-type", "model_type", metavar="TYPE",
              help="The transformers model type you train (qwen3_5, qwen3_next, mamba2, "
                   "falcon_h1, ...): its modeling code says which fast-path functions it needs.")
@click.option("--model", "model_dir", metavar="DIR",
              type=click.Path(path_type=Path, file_okay=False),
              help="A local checkpoint directory: the model type of its config.json (nothing "
                   "is downloaded).")
@click.option("--run/--no-run", "run", default=None,
              help="Run the installed fast-path ops on tiny inputs against plain PyTorch "
                   "(default: yes; they need a GPU visible to the examined torch, and are "
                   "not run without one).")
@click.option("--op-timeout", "op_timeout", type=SECONDS, metavar="SECONDS",
              default=fastpath.OP_TIMEOUT_S, show_default=True,
              help="Time limit of each op's run (a cold Triton cache compiles first).")
@json_option
def doctor(arch_value: str | None, index_url: str, python: Path, need: tuple[str, ...],
           model_type: str | None, model_dir: Path | None, run: bool | None,
           op_timeout: float, as_json: bool) -> None:
    """Is this environment on the fast path, for the model you train? Checks every
    CUDA-extension package's kernels for the GPU's arch, runs the fast-path ops (fla,
    causal_conv1d, mamba_ssm, flash_attn) against plain PyTorch, asks transformers what the
    model needs, and applies known-bad.yaml's runtime rules."""

    if model_type and model_dir:
        raise UsageError("give --model-type or --model, not both")
    if model_type is not None:
        fastpath.model_type_given(model_type)  # before anything runs: one line, or nothing
    info = examine.probe(python)
    if arch_value:
        arch, source = _single_arch(arch_value), "--arch"
    elif info.get("gpu"):
        major, minor = info["gpu"]["capability"]
        arch, source = _single_arch(f"{major}.{minor}"), "gpu"
    else:
        raise UsageError("no GPU is visible to this Python's torch, so there is no arch to "
                         "check", hint="pass the arch of the GPU you will run on, e.g. --arch 12.0")
    model = _model(python, model_type, model_dir, info)
    importable = {m for m, state in info.get("fast_path", {}).items() if state["ok"]}
    ops = (fastpath.run_ops(python, fastpath.ops_to_run(importable), op_timeout)
           if fastpath.should_run(run, bool(info.get("gpu")), os.environ) else None)
    cuobjdump = tools.cuobjdump_for(None, Path(sys.executable))
    report = examine.examine(info, arch, source, cuobjdump, index_url=index_url, need=need,
                             model=model, ops=ops, knowledge=judge.knowledge(),
                             driver=find_driver())
    bad_input = UsageError(model.message or "", hint=_MODEL_HINT) if model.input_error else None
    if as_json:
        emit_json(report.as_dict())  # the report says healthy: false and why
        if bad_input is not None or not report.healthy:
            click.get_current_context().exit(
                UsageError.exit_code if bad_input is not None else DoctorError.exit_code)
        return
    report.own_python = click.get_current_context().get_parameter_source(
        "python") is click.core.ParameterSource.DEFAULT
    doctor_view.render_doctor(report)
    if bad_input is not None:
        raise bad_input
    if not report.healthy:
        raise DoctorError(f"not on the fast path for {arch.sm}: {len(report.problems)} "
                          "problem(s)", findings=report.problems,
                          hint="\n".join(["to fix:", *report.fixes]) if report.fixes else None)


_MODEL_HINT = ("give a checkpoint directory with its config.json (--model DIR), or the model "
               "type (--model-type TYPE)")


def _model(python: Path, model_type: str | None, model_dir: Path | None,
           info: dict[str, Any]) -> fastpath.ModelView:
    """The model's view: --model DIR's config.json, --model-type, or the default set (the
    fast-path packages installed)."""
    if model_dir is not None:
        view = fastpath.model_type_of(model_dir)
    elif model_type:
        view = fastpath.ModelView("--model-type", model_type)
    else:
        return fastpath.default_view(fastpath.installed(info.get("fast_path", {})))
    if view.error is None:
        fastpath.ask_transformers(python, view)
    if view.error == "unknown":
        view.message = (f"unknown model type '{view.model_type}'; model types whose "
                        f"transformers {view.transformers} code uses a fast path: "
                        f"{', '.join(view.known_types)}")
    return view


def _single_arch(value: str) -> Arch:
    archs = parse_archs((value,))
    if archs is None or len(archs.archs) != 1:
        raise UsageError(f"--arch: give one arch for doctor, got '{value}'")
    return archs.archs[0]
