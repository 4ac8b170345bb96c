"""Run by the Python that `wheelsmith doctor` examines: which fast-path functions the installed
transformers' modeling code for one model type needs, and whether transformers takes each
package's kernel, decided by exercising transformers' own dispatch.

usage: model_needs.py MODEL_TYPE

The needs are read from the modeling module's own source (modeling_source.py, beside this
script).

Whether a need is met is then seen, not inferred: before the modeling module is imported, each
package function it needs is replaced, in every loaded module of the package, by a recording
stand-in with the same signature; then each of the model's entry points (the wrapped function,
the imported name, the lazily loaded kernel's attribute) is called with tiny tensors on a device
the packages support: the GPU when one is visible, else CUDA tensors that have no storage
(torch's FakeTensorMode). A trace stops the call at the first step into the stand-in or the
package's own code (the kernel: taken) or into the modeling module's torch function (its
fallback). What reaches neither is `undecided`, with the reason. Prints one line
`WHEELSMITH-MODEL {json}`. Never imports wheelsmith; never reaches the hub (HF_HUB_OFFLINE=1).
"""
# transformers, torch and the fast-path packages are imported inside, each failure being an
# answer.
# ruff: noqa: PLC0415

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # as the type checker finds it; run, this script imports it from beside it
    from wheelsmith.resources.modeling_source import LAZY, Need, fast_path_types, needs_in
else:
    from modeling_source import LAZY, Need, fast_path_types, needs_in

# --- the stand-ins ----------------------------------------------------------------------------

class Reached(BaseException):
    """Stops an exercised call where it went: the package's kernel, or transformers' torch
    code."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


def _stand_in(real: Any) -> Any:
    """A callable that takes the place of `real` (same signature, same name) and stops the call
    that reaches it; None where `real` cannot be stood in for."""
    if inspect.isclass(real):
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: ARG001
            raise Reached("kernel")
        try:
            return type(real.__name__, (real,), {"__init__": __init__,
                                                 "__module__": real.__module__,
                                                 "__qualname__": real.__qualname__})
        except TypeError:
            return None  # a final class: the trace still sees its package's code run
    if not callable(real):
        return None

    @functools.wraps(real)
    def stand_in(*args: Any, **kwargs: Any) -> Any:  # noqa: ARG001
        raise Reached("kernel")
    return stand_in


def _package_modules(package: str) -> list[ModuleType]:
    return [m for name, m in list(sys.modules.items())
            if (name == package or name.startswith(package + ".")) and isinstance(m, ModuleType)]


def _internal_paths() -> dict[str, str]:
    """Where transformers looks for a function inside its package (fla keeps them in ops.*)."""
    try:
        from transformers.integrations import hub_kernels
    except Exception:
        return {}
    found = getattr(hub_kernels, "_KERNELS_INTERNAL_PATH_MAPPINGS", None)
    return dict(found) if isinstance(found, dict) else {}


def stand_in_for(needs: list[Need]) -> None:
    """Import each need's package (and the module it is read from) and put a stand-in in place
    of the function, in every loaded module of the package that holds it. A package that does
    not import gets none: transformers will not find it either."""
    internal = _internal_paths()
    for need in needs:
        modules = [need.package]
        if need.kind != "lazy" and need.path:
            modules.append(need.path)
        if need.function in internal:
            modules.append(f"{need.package}.{internal[need.function]}")
        try:
            for name in modules:
                importlib.import_module(name)
        except Exception:  # noqa: S112 - why_not() tells why, after the dispatch is seen
            continue
        _replace(need)


def _replace(need: Need) -> None:
    made: dict[int, Any] = {}  # one stand-in per real object, shared by the modules that hold it
    for module in _package_modules(need.package):
        real = vars(module).get(need.function)
        if real is None and module.__name__ == need.package:
            real = getattr(module, need.function, None)  # a package's lazy __getattr__
        if real is None or getattr(real, "__wheelsmith_stand_in__", False):
            continue
        if id(real) not in made:
            made[id(real)] = _stand_in(real)
            if made[id(real)] is not None:
                made[id(real)].__wheelsmith_stand_in__ = True
        if made[id(real)] is not None:
            setattr(module, need.function, made[id(real)])


# --- exercising the dispatch ------------------------------------------------------------------

@dataclass
class Device:
    """Where the entry points' inputs live: `gpu` (a visible GPU), `fake-cuda` (CUDA tensors
    without storage: no GPU needed) or `no-device` (plain objects, when neither can be made)."""

    how: str
    mode: Any = None

    def tensor(self) -> Any:
        import torch
        if self.how == "no-device":
            return object()
        return torch.zeros(1, 1, 1, 1, device="cuda")

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        if self.mode is None:
            yield
        else:
            with self.mode:
                yield


def device() -> Device:
    try:
        import torch
        if torch.cuda.is_available():
            return Device("gpu")
        from torch._subclasses.fake_tensor import FakeTensorMode
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            torch.zeros(1, device="cuda")
        return Device("fake-cuda", mode)
    except Exception:
        return Device("no-device")


def _tracer(package_dirs: tuple[str, ...], torch_code: tuple[str, str] | None
            ) -> Callable[[FrameType, str, Any], None]:
    def trace(frame: FrameType, event: str, arg: Any) -> None:  # noqa: ARG001
        if event != "call":
            return
        code = frame.f_code
        if torch_code is not None and (code.co_filename, code.co_name) == torch_code:
            raise Reached("torch")
        if package_dirs and code.co_filename.startswith(package_dirs):
            raise Reached("kernel")
    return trace


def _package_dirs(package: str) -> tuple[str, ...]:
    module = sys.modules.get(package)
    paths = list(getattr(module, "__path__", []) or [])
    if not paths and getattr(module, "__file__", None):
        paths = [str(Path(module.__file__).parent)]  # type: ignore[union-attr, arg-type]
    return tuple(str(Path(p)) + os.sep for p in paths)


def _entry(module: ModuleType, need: Need) -> Any:
    if need.kind == "lazy":
        load = getattr(module, LAZY, None)
        kernel = load(need.path) if callable(load) else None
        return getattr(kernel, need.function, None) if kernel is not None else None
    return getattr(module, need.entry, None)


def _arity_of(entry: Any, need: Need) -> int:
    if need.arity is not None:
        return need.arity
    try:
        parameters = inspect.signature(entry).parameters.values()
    except (TypeError, ValueError):
        return 0
    return len([p for p in parameters if p.default is p.empty and
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])


def exercise(module: ModuleType, need: Need, where: Device) -> dict[str, Any]:
    """Call the model's entry point for `need`; say where the call went."""
    try:
        entry = _entry(module, need)
    except Exception as exc:
        return {"verdict": "undecided", "message": f"{LAZY}({need.path!r}) raised "
                f"{type(exc).__name__}: {exc}"}
    if entry is None:  # the modeling code reads None as: use the torch code
        return {"verdict": "torch"}
    torch_code = (str(module.__file__), need.entry) if need.kind == "wrapped" else None
    outcome: dict[str, Any] = {"verdict": "undecided"}
    trace = _tracer(_package_dirs(need.package), torch_code)
    try:
        with where.active():
            args = [where.tensor() for _ in range(_arity_of(entry, need))]
            sys.settrace(trace)
            try:
                entry(*args)
            finally:
                sys.settrace(None)
        outcome["message"] = f"{need.entry} returned without reaching {need.package} or torch"
    except Reached as reached:
        outcome = {"verdict": reached.where}
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        outcome["message"] = f"{need.entry} raised {type(exc).__name__}: {first}"
    return outcome


# --- why a package was not taken --------------------------------------------------------------

def why_not(package: str, function: str) -> dict[str, str]:
    """Why a package's function is unavailable: not installed, the import error, missing; or
    `usable` (it imports and has the function)."""
    try:
        root = importlib.import_module(package)
    except ModuleNotFoundError as exc:
        if exc.name == package:
            return {"reason": "not-installed", "message": f"No module named '{package}'"}
        return {"reason": "import", "message": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:
        return {"reason": "import", "message": f"{type(exc).__name__}: {exc}"}
    internal = _internal_paths().get(function)
    try:
        if internal:
            importlib.import_module(f"{package}.{internal}")
        elif not hasattr(root, function):
            return {"reason": "missing", "message": f"{package} has no {function}"}
    except Exception as exc:
        return {"reason": "import", "message": f"{type(exc).__name__}: {exc}"}
    return {"reason": "usable", "message": f"{package} imports and has {function}"}


def judged(need: Need, seen: dict[str, Any], where: Device) -> dict[str, Any]:
    """The need's answer from where its call went: the kernel (available), the torch code
    (not available, with why), or undecided. A package that imports and has the function but
    was passed over with no GPU visible is undecided: this transformers may decide by the
    device in hand (4.x imports the kernels only where CUDA is available)."""
    answer: dict[str, Any] = {"module": need.package, "function": need.function,
                              "entry": need.entry, "kind": need.kind, "device": where.how,
                              "available": None, "reason": None, "message": None}
    if seen["verdict"] == "kernel":
        return {**answer, "available": True}
    if seen["verdict"] == "undecided":
        return {**answer, "reason": "undecided", "message": seen["message"]}
    why = why_not(need.package, need.function)
    if why["reason"] == "usable" and where.how != "gpu":
        return {**answer, "reason": "undecided", "message": (
            f"transformers runs its torch code with no GPU visible, though {why['message']}; "
            "run doctor where the GPU is")}
    if why["reason"] == "usable":
        why = {"reason": "not-taken", "message": f"transformers runs its torch code though "
                                                  f"{why['message']}"}
    return {**answer, "available": False, **why}


# --- the model --------------------------------------------------------------------------------

def examine(model_type: str) -> dict[str, Any]:
    out: dict[str, Any] = {"model_type": model_type, "transformers": None, "known": None,
                           "module": None, "needs": [], "fast_path_types": [], "error": None,
                           "is_fast_path_available": None, "device": None}
    try:
        import transformers
        from transformers.models.auto import configuration_auto as auto
    except Exception as exc:
        out["error"] = {"reason": "no-transformers", "message": f"{type(exc).__name__}: {exc}"}
        return out
    out["transformers"] = transformers.__version__
    root = Path(transformers.__file__).parent
    out["known"] = model_type in auto.CONFIG_MAPPING_NAMES
    if not out["known"]:
        out["fast_path_types"] = fast_path_types(root)
        return out
    name = auto.model_type_to_module_name(model_type)
    source = root / "models" / name / f"modeling_{name}.py"
    out["module"] = f"transformers.models.{name}.modeling_{name}"
    if not source.is_file():
        return out  # a configuration-only type: no modeling code, no kernels
    needs = needs_in(source.read_text())
    stand_in_for(needs)
    try:
        module = importlib.import_module(out["module"])
    except Exception as exc:
        out["error"] = {"reason": "import", "message": f"{type(exc).__name__}: {exc}"}
        return out
    flag = getattr(module, "is_fast_path_available", None)
    out["is_fast_path_available"] = flag if isinstance(flag, bool) else None
    where = device()
    out["device"] = where.how
    out["needs"] = [judged(need, exercise(module, need, where), where) for need in needs]
    return out


def quiet() -> None:
    """What the examined Python needs before transformers is imported: no hub, no warnings."""
    warnings.simplefilter("ignore")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


if __name__ == "__main__":
    quiet()
    print("WHEELSMITH-MODEL " + json.dumps(examine(sys.argv[1])), flush=True)
