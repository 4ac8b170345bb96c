"""doctor explains an installed extension's `undefined symbol` import error as the torch ABI
mismatch it is (doctor/abi.py): the error comes from importing a real extension, compiled
against the toolchain's libc10, with a libc10 that no longer exports one of its symbols."""

from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.builder.test_torch_range import c10_symbols, module_source, site_of, without
from tests.doctor.test_doctor_runs import DEAD_INDEX, judged, probe_info
from tests.wheels import compile_shared
from wheelsmith.doctor import abi
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.untrusted.linkage import demangle


def import_error(tmp_path: Path, toolchain: Toolchain, symbol: str) -> str:
    """What importing an extension that needs `symbol` says where libc10.so lacks it."""
    lib = site_of(toolchain) / "torch" / "lib"
    made = compile_shared(tmp_path / "so", module_source([symbol]), links=(lib / "libc10.so",),
                          flags=(f"-I{sysconfig.get_paths()['include']}",))
    made.rename(tmp_path / f"_native{sysconfig.get_config_var('EXT_SUFFIX')}")
    demoted = without(lib, tmp_path / "lib", symbol)
    said = subprocess.run(
        [str(toolchain.python), "-c", "try:\n import _native\nexcept ImportError as exc:\n"
                                      " print(f'{type(exc).__name__}: {exc}')"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
        env={**os.environ, "LD_LIBRARY_PATH": str(demoted)})
    assert f"undefined symbol: {symbol}" in said.stdout
    return said.stdout.strip()


@pytest.mark.toolchain
@pytest.mark.parametrize("seed", range(2))
def test_an_undefined_symbol_at_import_is_explained_as_the_torch_abi_mismatch(
        tmp_path: Path, toolchain: Toolchain, seed: int) -> None:
    symbol = c10_symbols(toolchain, 1, seed)[0]
    error = import_error(tmp_path, toolchain, symbol)
    shown = demangle([symbol])[symbol]
    version = "1.6.0+cu.13.0.torch.2.13.sm.120"
    info = probe_info(dists={"causal-conv1d": version}, torch="2.14.1+cu130", fast=("fla",))
    info["fast_path"]["causal_conv1d"]["error"] = error
    report = judged(info, "12.0")
    assert f"fast path: `import causal_conv1d` fails: causal-conv1d {version} does not import: "\
        f"{shown} ({symbol}) is undefined: it was built for torch 2.13, and this environment " \
        "has torch 2.14.1+cu130, whose libraries do not export it: a torch ABI mismatch. Fix: " \
        "install its wheel built for torch 2.14 (below), or rebuild it for this torch: " \
        "wheelsmith build causal-conv1d --python /env/bin/python" in report.problems
    assert report.fixes[0] == (f"pip install --index-url {DEAD_INDEX}/cu130-torch2.14/simple/ "
                               "--no-deps --force-reinstall causal-conv1d   # not checked: the "
                               "index could not be read")
    for label, built in (("1.6.0", "a torch its version does not name (it has no torch in its "
                                   "local label)"),
                         ("1.6.0+cu.13.0.torch.2.14.sm.120", "torch 2.14")):
        said = abi.explain(error, "causal-conv1d", label, "2.14.1+cu130", "/env/bin/python")
        assert said is not None
        assert f"it was built for {built}, and this environment has torch 2.14.1+cu130" in said
    assert "another build of the same torch minor (its ABI differs)" in str(abi.explain(
        error, "causal-conv1d", "1.6.0+cu.13.0.torch.2.14.sm.120", "2.14.1", "/p"))
    assert abi.explain("ImportError: libc10.so: cannot open shared object file",
                       "causal-conv1d", version, "2.14.1", "/p") is None
