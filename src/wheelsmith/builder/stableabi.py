"""Stable-ABI builds (a recipe's `build.stable_abi`, recipes/stableabi.py): what the build is
told, and the audit that proves the wheel keeps to the stable ABI.

The build: `-DTORCH_TARGET_VERSION=0x0MMmm000000000000` for the host compiler (CPPFLAGS, which
setuptools appends to every compile and CMake builds get in CFLAGS and CXXFLAGS) and for nvcc
(NVCC_APPEND_FLAGS, which the compile cache hashes), and the wheel tagged `cp3X-abi3` for the
toolchain's Python: setuptools' `bdist_wheel --py-limited-api=cp3X` (through the PEP 517
config setting `--build-option`), scikit-build-core's `wheel.py-api`. The package's own
setup.py says `py_limited_api=True` on its extension (torch's cpp_extension then leaves
libtorch_python out and defines Py_LIMITED_API).

The audit, of each shared object:
- what it takes from torch must be of the stable C ABI: unmangled C shim functions
  (`aoti_torch_*`, `torch_*`; counted from the symbols only torch's libraries give it,
  torchrange.torch_needs). A C++ symbol of torch's namespaces (c10::, at::, torch::, caffe2::)
  is refused, named demangled, wherever it would resolve;
- it must not link libtorch_python (torch's Python bindings have no stable ABI);
- the wheel must be tagged abi3, and every symbol it takes from the Python must be in the
  limited API of the Python its tag names: the interpreter's own headers, preprocessed with
  Py_LIMITED_API set to that version, declare exactly that API (where there are no headers or
  no C compiler, only CPython's private `_Py` prefix is checked, and the audit says so).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelsmith import cmd
from wheelsmith.builder.cmakebuild import backend
from wheelsmith.builder.linking import TorchEnv, python_exports
from wheelsmith.builder.torchrange import torch_needs
from wheelsmith.errors import CommandError, VerifyError
from wheelsmith.inventory import shared_objects
from wheelsmith.recipes.stableabi import StableAbi
from wheelsmith.untrusted import tool_bounds
from wheelsmith.untrusted.linkage import demangle, linkage
from wheelsmith.wheelfile import WheelName

TORCH_NAMESPACES = ("c10::", "at::", "torch::", "caffe2::")
TORCH_PYTHON = re.compile(r"libtorch_python\.so")
API_MARK = "LIMITED_API_DECLARED"
DECLARED = re.compile(API_MARK + r"[\s*(]*([A-Za-z_][A-Za-z0-9_]*)")
# CPython's own symbols its limited-API headers use (Py_INCREF, Py_None, ...): stable_abi's
# `abi_only` entries, the only `_Py` names an abi3 object may take when there are no headers
ABI_ONLY = frozenset({"_Py_Dealloc", "_Py_IncRef", "_Py_DecRef", "_Py_NoneStruct",
                      "_Py_TrueStruct", "_Py_FalseStruct", "_Py_NotImplementedStruct",
                      "_Py_EllipsisObject", "_PyObject_New", "_PyObject_NewVar",
                      "_PyObject_GC_New", "_PyObject_GC_NewVar", "_PyObject_GC_Resize",
                      "_PyErr_BadInternalCall", "_Py_BuildValue_SizeT",
                      "_PyObject_CallFunction_SizeT", "_PyObject_CallMethod_SizeT",
                      "_PyWeakref_RefType", "_PyWeakref_ProxyType",
                      "_PyWeakref_CallableProxyType"})
HINT = ("a stable-ABI wheel may take from torch only its stable C shim (torch/csrc/stable, "
        "aoti_torch_*) and from Python only its limited API: replace the call with its "
        "torch::stable counterpart, or drop build.stable_abi from the recipe")


def build_flags(stable: StableAbi | None, env: Mapping[str, str]) -> dict[str, str]:
    """TORCH_TARGET_VERSION for the host compiler and nvcc, before what `env` has (nothing
    where `stable` is None: not a stable-ABI build)."""
    if stable is None:
        return {}
    define = stable.define()
    return {"CPPFLAGS": " ".join(filter(None, [define, env.get("CPPFLAGS", "")])),
            "NVCC_APPEND_FLAGS": " ".join(filter(None, [env.get("NVCC_APPEND_FLAGS", ""),
                                                       define]))}


def config_settings(source: Path, python_version: str) -> dict[str, str | list[str]]:
    """The PEP 517 config settings that tag the wheel abi3 for `python_version` ("3.11")."""
    tag = "cp" + python_version.replace(".", "")
    if (backend(source) or "").startswith("scikit_build_core"):
        return {"wheel.py-api": tag}
    return {"--build-option": [f"--py-limited-api={tag}"]}


@dataclass(frozen=True, slots=True)
class StableAudit:
    """What the stable-ABI audit of one wheel found."""

    objects: int  # the shared objects read
    shim: int  # the torch C shim symbols they take
    python: str  # how their Python symbols were checked
    findings: tuple[str, ...]  # each: an object and what it takes that is not stable

    def describe(self) -> str:
        if self.findings:
            return f"stable ABI: {len(self.findings)} unstable use(s): {self.findings[0]}"
        return (f"stable ABI: clean ({self.objects} object(s) take {self.shim} torch C shim "
                f"symbol(s) and no C++ torch symbol; Python: {self.python})")

    def as_dict(self) -> dict[str, Any]:
        return {"objects": self.objects, "shim_symbols": self.shim, "python": self.python,
                "findings": list(self.findings), "clean": not self.findings}


def limited_api(python: Path | None, version: tuple[int, int]) -> tuple[frozenset[str], str]:
    """The names CPython's limited API of `version` declares, read from `python`'s headers
    preprocessed with Py_LIMITED_API, and where from; empty with why where that cannot be."""
    shown = f"{version[0]}.{version[1]}"
    compiler = shutil.which("cc") or shutil.which("gcc")
    include = _include_dir(python) if python is not None else None
    if include is None or compiler is None:
        lacking = "Python.h" if include is None else "C compiler"
        return frozenset(), (f"only the private _Py prefix checked (no {lacking} to read "
                             f"CPython {shown}'s limited API from)")
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch) / "limited.c"
        probe.write_text("#include <Python.h>\n")
        try:
            said = cmd.run([compiler, "-E", "-P", f"-DPy_LIMITED_API=0x{version[0]:02x}"
                            f"{version[1]:02x}0000", f"-DPyAPI_FUNC(T)=T {API_MARK}",
                            f"-DPyAPI_DATA(T)=extern T {API_MARK}", f"-I{include}", probe],
                           stream=False, what="the limited API of Python.h",
                           bounds=tool_bounds())
        except CommandError as exc:
            return frozenset(), f"only the private _Py prefix checked ({exc.message})"
    names = frozenset(n for n in DECLARED.findall(said.stdout) if not n.startswith("__"))
    return names, f"the limited API of CPython {shown} ({len(names)} names, {include}/Python.h)"


def _include_dir(python: Path) -> Path | None:
    try:
        said = cmd.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                       stream=False, what="the Python's include directory", bounds=tool_bounds())
    except CommandError:
        return None
    found = Path((said.stdout.strip().splitlines() or [""])[-1])
    return found if (found / "Python.h").is_file() else None


def labelled_stable(filename: str) -> bool:
    """Whether a wheel's local label says it is a stable-ABI build (`+cu.13.0.stable.2.10...`)."""
    local = WheelName.parse(filename).version.local or ""
    return "stable" in local.split(".")


def abi3_version(wheel: Path) -> tuple[int, int] | None:
    """The Python (3, 11) an abi3 wheel's tag names (`cp311-abi3`); None: it is not abi3."""
    python, abi, _ = WheelName.parse(wheel.name).tags.split("-")
    match = re.fullmatch(r"cp(\d)(\d+)", python.split(".")[0])
    return (int(match[1]), int(match[2])) if "abi3" in abi.split(".") and match else None


def audit_stable(wheel: Path, env: TorchEnv | None) -> StableAudit:
    """The stable-ABI audit of `wheel`, its imports told apart with `env` (torch's and the
    Python's exports) where there is one."""
    version = abi3_version(wheel)
    findings = [] if version is not None else [
        f"{wheel.name} is tagged {WheelName.parse(wheel.name).tags}, not abi3: the build did "
        "not take py_limited_api"]
    python = env.python if env is not None else None
    limited, how = limited_api(python, version) if version else (frozenset(), "not abi3")
    given = python_exports(python) if python is not None else frozenset()
    with shared_objects(wheel) as objects:
        needs = {n.object: n.symbols for n in torch_needs(objects, env)}
        shim = 0
        for member, path in objects:
            linked = linkage(path)
            if linked is None:
                continue
            findings += [f"{member} links {lib} (torch's Python bindings have no stable ABI)"
                         for lib in linked.needed if TORCH_PYTHON.match(lib)]
            taken = {i.name for i in linked.imports if not i.weak and i.version is None}
            unstable = _unstable(taken)
            shim += sum(not s.startswith("_Z") for s in needs.get(member, ()))
            findings += [f"{member} takes {shown} ({name}) from torch" for name, shown in
                         unstable.items()]
            findings += [f"{member} takes {name} from Python, outside its limited API"
                         for name in sorted(taken & given if given else _python_like(taken))
                         if not _limited(name, limited)]
    return StableAudit(len(objects), shim, how, tuple(findings))


def _unstable(taken: set[str]) -> dict[str, str]:
    """The C++ symbols of `taken` in a torch namespace (c10::, at::, torch::, caffe2::), each
    demangled. Other C++ symbols torch's libraries happen to export (libstdc++'s
    std::basic_stringstream, bound to torch's copy at link time) are the C++ runtime's."""
    mangled = sorted(s for s in taken if s.startswith("_Z"))
    shown = demangle(mangled)
    return {s: shown.get(s, s) for s in mangled if _in_torch(shown.get(s, s))}


def _in_torch(demangled: str) -> bool:
    """Whether a demangled name is of a torch namespace: its own name, the last word once
    parameters, template arguments and qualifiers are set aside (std::vector<c10::IValue>::
    ~vector() is std's; `c10::Foo std::f<int>()`, a template's return type, too)."""
    text = re.sub(r"\([^()]*\)", " ", demangled)  # parameter lists (innermost first)
    while (bare := re.sub(r"<[^<>]*>", "", text)) != text:
        text = bare
    words = [w for w in text.split() if w not in ("const", "volatile", "&", "&&")]
    return bool(words) and words[-1].startswith(TORCH_NAMESPACES)


def _python_like(taken: set[str]) -> set[str]:
    """Without a Python to ask: the names that look like CPython's."""
    return {s for s in taken if s.startswith(("Py", "_Py"))}


def _limited(name: str, limited: frozenset[str]) -> bool:
    if limited:
        return name in limited
    return not name.startswith("_Py") or name in ABI_ONLY


def check_stable(label: str, found: StableAudit) -> None:
    """Refuse a stable-ABI wheel that uses an unstable symbol."""
    if found.findings:
        raise VerifyError(f"{label} is not stable-ABI clean: {len(found.findings)} unstable "
                          "use(s)", findings=list(found.findings), hint=HINT)
