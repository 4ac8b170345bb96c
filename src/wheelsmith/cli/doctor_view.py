"""doctor's report as the terminal shows it: the environment, the model's view, the kernels, the
fast path and the ops, and the healthy line."""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING, Any

from wheelsmith.doctor.report import missing_dependency

if TYPE_CHECKING:
    from wheelsmith.doctor.report import Report


def render_doctor(report: Report, stream: IO[str] | None = None) -> None:
    out = stream or sys.stdout
    gpu = report.gpu or "none visible"
    own = ("; wheelsmith's own: --python PATH examines your environment"
           if report.own_python else "")
    out.write(f"python   {report.python} ({report.python_version}){own}\n")
    out.write(f"torch    {report.torch or '-'} (CUDA {report.torch_cuda or '-'})\n")
    out.write(f"GPU      {gpu}; checking kernels for {report.arch.sm} "
              f"(from {report.arch_source})\n")
    if report.driver is not None:
        out.write(f"driver   {report.driver.describe()}\n")
    out.write(f"channel  {report.channel or '- (no CUDA torch)'}\n")
    out.write(f"model    {_model_line(report)}\n\n")
    width = max([len(p.name) for p in report.packages] + [16])
    out.write(f"{'package':<{width}}  {'version':<40}  kernels for {report.arch.sm}\n")
    labels = {"sass": "SASS (native)", "ptx": "PTX only (JIT at start)", "none": "NONE"}
    for package in report.packages:
        out.write(f"{package.name:<{width}}  {package.version:<40}  {labels[package.status]}\n")
    if not report.packages:
        out.write("(no CUDA-extension packages installed)\n")
    out.write("\nfast path: " + ", ".join(
        f"{module} {_import_state(module, state)}" for module, state in report.fast_path.items())
        + "\n")
    _render_ops(report, out)
    for note in report.notes:
        out.write(f"note: {note}\n")
    if report.healthy:
        ran = ", its ops run correctly" if report.ops else ""
        imports = (f"the fast path imports{ran}" if report.needed else
                   "no fast-path package is installed or asked for")
        out.write(f"\nhealthy: every extension has native kernels for {report.arch.sm}, "
                  f"{imports}\n")
    out.flush()


def _import_state(module: str, state: dict[str, Any]) -> str:
    """ok, or why not: the package is not there, or it is there but does not import (a
    dependency missing, or another error such as an undefined symbol)."""
    if state["ok"]:
        return "ok"
    dependency = missing_dependency(module, state)
    if dependency is None and (state.get("error") or "").startswith("ModuleNotFoundError"):
        return "MISSING" if state["needed"] else "not installed"
    said = "DOES NOT IMPORT" if state["needed"] else "does not import"
    return f"{said} ({dependency} is missing)" if dependency else said


def _model_line(report: Report) -> str:
    model = report.model
    if model.source == "default":
        judged = ", ".join(model.modules) or "none installed"
        return (f"not given; judging {model.model_type} ({judged}); --model-type or --model "
                "asks transformers what your model needs")
    if model.input_error:
        return f"not examined: {model.message}"
    said = f"{model.model_type} (transformers {model.transformers or '-'})"
    if model.error is not None:
        return f"{said}: cannot tell (see below)"
    if not model.needs:
        return f"{said}: uses no fast-path kernels"
    missing, undecided, taken = model.unavailable(), model.undecided(), model.taken()
    if missing:
        return f"{said}: FALLS BACK to torch without {', '.join(missing)}"
    parts = [f"fast path through {', '.join(taken)}"] if taken else []
    if undecided:
        parts.append(f"undecided for {', '.join(undecided)} (see the note)")
    seen = {"fake-cuda": " (its dispatch run on CUDA inputs without storage: no GPU here)",
            "no-device": " (its dispatch run on inputs of no device)"}.get(model.device or "", "")
    return f"{said}: {'; '.join(parts)}{seen if taken else ''}"


def _render_ops(report: Report, out: IO[str]) -> None:
    if report.ops is None:
        out.write(f"ops: not run: no GPU is visible to the torch in {report.python}, and the "
                  "ops need one\n"
                  if report.gpu is None else "ops: not run (--no-run)\n")
        return
    if not report.ops:
        out.write("ops: none installed\n")
        return
    out.write("\nop (vs plain PyTorch)              result\n")
    for op in report.ops:
        seconds = f"{op['seconds']:.1f} s" if op.get("seconds") is not None else ""
        if op["status"] in ("ok", "wrong"):
            result = (f"{'ok' if op['status'] == 'ok' else 'WRONG':<8}max error "
                      f"{op['max_error'] if op['max_error'] is not None else float('inf'):.2g}")
        else:
            result = {"timeout": "TIMEOUT", "not-run": "not run"}.get(
                op["status"], f"ERROR in {op['phase'] or 'its run'}")
            compared = [e for e in (op.get("errors") or {}).values() if e is not None]
            if compared:  # the forward pass was compared before the backward failed
                result += f" (forward: max error {max(compared):.2g})"
        out.write(f"{op['op']:<34} {result:<28} {seconds}".rstrip() + "\n")
