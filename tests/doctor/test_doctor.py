"""`wheelsmith doctor`: kernels per installed extension for an arch, and the fast path."""

from __future__ import annotations

import _ctypes as ctypes_extension
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, serve, static_server, wheelsmith
from tests.hostile import PROBE_ANSWER, answering_python
from tests.wheels import make_wheel
from wheelsmith.arch import parse_arch
from wheelsmith.doctor.examine import examine
from wheelsmith.index.export import export
from wheelsmith.index.offers import serves
from wheelsmith.index.publish import publish
from wheelsmith.inventory import DeviceCode, coverage
from wheelsmith.toolchain.env import Toolchain


def code(sass: set[str], ptx: set[str] | frozenset[str] = frozenset()) -> DeviceCode:
    return DeviceCode("x.so", frozenset(sass), frozenset(ptx))


@pytest.mark.parametrize(
    ("sass", "ptx", "target", "expected"),
    [
        ({"sm_120"}, set(), "12.0", "sass"),
        ({"sm_120"}, set(), "12.1", "sass"),   # an sm_120 cubin runs on sm_121
        ({"sm_100"}, set(), "10.3", "sass"),   # and an sm_100 cubin on sm_103
        ({"sm_121"}, set(), "12.0", "none"),   # never downwards
        ({"sm_90"}, set(), "12.0", "none"),    # never across majors
        ({"sm_90"}, {"sm_90"}, "12.0", "ptx"),  # PTX JIT-compiles upwards
        ({"sm_120"}, {"sm_120"}, "10.0", "none"),  # but not downwards
        ({"sm_90a"}, set(), "9.0", "none"),    # an arch-specific cubin serves only 9.0a
        ({"sm_90a"}, set(), "9.0a", "sass"),
        ({"sm_120f"}, set(), "12.1", "sass"),  # a family cubin runs on the family: 12.x
        ({"sm_120f"}, set(), "12.0", "sass"),
        ({"sm_120f"}, set(), "10.0", "none"),
        ({"sm_121f"}, set(), "12.0", "none"),  # from its own minor up
        (set(), set(), "12.0", "none"),
    ],
)
def test_coverage_follows_cuda_compatibility(sass: set[str], ptx: set[str], target: str,
                                             expected: str) -> None:
    assert coverage(code(sass, ptx), parse_arch(target)) == expected


def probe_info(packages: list[dict[str, object]], *, fast: bool) -> dict[str, object]:
    modules = {"fla": "flash-linear-attention fla-core", "causal_conv1d": "causal-conv1d",
               "mamba_ssm": "mamba-ssm", "flash_attn": "flash-attn"}
    return {"python": "3.11", "executable": "/venv/bin/python", "torch": "2.14.1",
            "torch_full": "2.14.1+cu130", "torch_cuda": "13.0", "glibc": "2.36",
            "machine": "x86_64", "gpu": None, "packages": packages,
            "fast_path": {m: {"dist": d, "ok": fast, "error": None if fast else
                              f"ModuleNotFoundError: No module named '{m}'"}
                          for m, d in modules.items()}}


@pytest.mark.toolchain
def test_doctor_reads_real_kernels_and_names_the_fix(project: Path, toolchain: Toolchain,
                                                      tmp_path: Path) -> None:
    recipe = (FIXTURES / "tiny-ext.recipe.yaml").read_text()
    (project / "recipes" / "tiny-ext.yaml").write_text(
        recipe.replace("PATH", str(FIXTURES / "tiny-ext")))
    built = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--json", cwd=project, check=True)
    wheel = json.loads(built.stdout)["wheel"]
    site = tmp_path / "site"
    subprocess.run([str(toolchain.python), "-m", "pip", "install", "-q", "--no-deps",
                    "--no-index", "--target", str(site), wheel], check=True)
    env = dict(os.environ, PYTHONPATH=str(site))

    def doctor(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wheelsmith", "doctor", "--python",
                               str(toolchain.python), *args], capture_output=True, text=True,
                              env=env, cwd=project, check=False)

    dead = "http://127.0.0.1:9"  # nothing listens: the pip line is given, marked unchecked
    alone = doctor("--arch", "12.0", "--index", dead)  # no fast-path package, none asked for
    assert alone.returncode == 0, alone.stderr
    assert ("model    not given; judging the installed fast-path packages (none installed); "
            "--model-type or --model asks transformers what your model needs\n") in alone.stdout
    assert "fast path: fla not installed, causal_conv1d not installed" in alone.stdout
    on_120 = doctor("--arch", "12.0", "--json", "--index", dead, "--need", "fla",
                    "--need", "causal_conv1d")
    report = json.loads(on_120.stdout)
    assert on_120.returncode == 15  # the fast-path packages asked for are missing
    assert [(p["name"], p["status"]) for p in report["packages"]] == [("tiny-ext", "sass")]
    assert report["problems"] == [
        "fast path: `import fla` fails (ModuleNotFoundError: No module named 'fla'): models "
        "fall back to slow PyTorch code",
        "fast path: `import causal_conv1d` fails (ModuleNotFoundError: No module named "
        "'causal_conv1d'): models fall back to slow PyTorch code"]
    assert report["fast_path"]["mamba_ssm"]["needed"] is False
    assert report["fixes"] == [
        "pip install --index-url http://127.0.0.1:9/cu130-torch2.14/simple/ --no-deps "
        "--force-reinstall flash-linear-attention fla-core causal-conv1d   # not checked: the "
        "index could not be read"]

    index = tmp_path / "index"
    wheelsmith("publish", wheel, "--index", str(index), cwd=project, check=True)
    with serve(index, tmp_path / "serve.log") as server:
        on_90 = doctor("--arch", "9.0", "--index", server.url, "--need", "mamba_ssm")
        on_121 = doctor("--arch", "12.1", "--index", server.url, "--need", "mamba_ssm", "--json")
    assert on_90.returncode == 15
    assert "tiny-ext          0.1.0+cu.13.0.torch.2.14.sm.120" in on_90.stdout
    assert on_90.stderr.endswith(
        "  tiny-ext 0.1.0+cu.13.0.torch.2.14.sm.120 has no kernel for sm_90: its ops fail or the "
        "model falls back\n"
        "  fast path: `import mamba_ssm` fails (ModuleNotFoundError: No module named 'mamba_ssm'): "
        "models fall back to slow PyTorch code\n"
        "hint: to fix:\n"
        f"      wheelsmith build tiny-ext --arch 9.0 --python {toolchain.python} --publish "
        "--index DIR   # the index has no tiny-ext wheel for Python 3.11 with sm_90 kernels; "
        f"DIR: the index directory that `wheelsmith serve` serves as {server.url}\n"
        f"      wheelsmith build mamba-ssm --arch 9.0 --python {toolchain.python} --publish "
        "--index DIR   # the index has no mamba-ssm wheel for Python 3.11 with sm_90 kernels; "
        f"DIR: the index directory that `wheelsmith serve` serves as {server.url}\n")
    assert f"channel  {server.url}/cu130-torch2.14/simple/\n" in on_90.stdout
    report_121 = json.loads(on_121.stdout)
    assert report_121["channel"] == f"{server.url}/cu130-torch2.14/simple/"
    assert report_121["fixes"] == [  # an sm_120 cubin runs on sm_121
        f"wheelsmith build mamba-ssm --arch 12.1 --python {toolchain.python} --publish --index "
        "DIR   # the index has no mamba-ssm wheel for Python 3.11 with sm_121 kernels; DIR: the "
        f"index directory that `wheelsmith serve` serves as {server.url}"]

    shared = next(site.glob("tiny_ext/_C*.so"))
    host_only = ctypes_extension.__file__  # a real shared object with no device code at all
    info = probe_info([{"name": "tiny-ext", "version": "0.1.0", "shared_objects": [str(shared)]},
                       {"name": "safetensors", "version": "0.8.0", "shared_objects": [host_only]}],
                      fast=True)
    assert toolchain.cuobjdump is not None
    healthy = examine(info, parse_arch("12.0"), "--arch", toolchain.cuobjdump,
                      index_url="http://x")
    assert (healthy.healthy, healthy.problems, healthy.fixes) == (True, [], [])
    assert [p.name for p in healthy.packages] == ["tiny-ext"]  # not a CUDA extension: not judged


def test_doctor_checks_its_fixes_against_an_export_on_a_plain_static_server(
        tmp_path: Path) -> None:
    """The channel's pages as `python3 -m http.server` sends an `index export` (PEP 503 HTML,
    whatever Accept asks for) are read: the wheel it has for sm_120 gets a pip line, checked;
    sm_90, which it lacks, a build line. (An index that cannot be read leaves the pip line
    marked unchecked.)"""
    make_wheel(tmp_path, "causal-conv1d", "1.7.0+cu.13.0.torch.2.14.sm.120",
               tags="cp311-cp311-manylinux_2_34_x86_64")
    publish(next(tmp_path.glob("*.whl")), tmp_path / "index", channel="cu130-torch2.14")
    export(tmp_path / "index", tmp_path / "public")
    python = answering_python(tmp_path / "env" / "python", {**PROBE_ANSWER, "fast_path": {
        "causal_conv1d": {"dist": "causal-conv1d", "ok": False, "error": "ModuleNotFoundError: x",
                          "missing": "causal_conv1d"}}})
    with static_server(tmp_path / "public", tmp_path / "http.log") as server:
        on_120, on_90 = (wheelsmith("doctor", "--python", str(python), "--index", server.url,
                                    "--json", "--need", "causal_conv1d", *arch, cwd=tmp_path)
                         for arch in ([], ["--arch", "9.0"]))
        read = server.requests()
    channel = f"{server.url}/cu130-torch2.14/simple/"
    assert (on_120.returncode, on_90.returncode) == (15, 15), on_120.stderr + on_90.stderr
    assert json.loads(on_120.stdout)["fixes"] == [
        f"pip install --index-url {channel} --no-deps --force-reinstall causal-conv1d"]
    assert json.loads(on_90.stdout)["fixes"] == [
        f"wheelsmith build causal-conv1d --arch 9.0 --python {PROBE_ANSWER['executable']} "
        "--publish --index DIR   # "
        "the index has no causal-conv1d wheel for Python 3.11 with sm_90 kernels; DIR: the index "
        f"directory that `wheelsmith serve` serves as {server.url}"]
    assert read == ["/cu130-torch2.14/simple/causal-conv1d/"] * 2


def test_doctor_without_gpu_or_arch_asks_for_one(tmp_path: Path) -> None:
    result = wheelsmith("doctor", cwd=tmp_path)
    assert result.returncode == 4
    assert result.stderr == ("error: no GPU is visible to this Python's torch, so there is no "
                             "arch to check\nhint: pass the arch of the GPU you will run on, e.g. "
                             "--arch 12.0\n")


@pytest.mark.parametrize(
    ("filename", "arch", "expected"),
    [
        ("x-1.0+cu.13.0.torch.2.14.sm.90.120-cp311-cp311-linux_x86_64.whl", "9.0", True),
        ("x-1.0+cu.13.0.torch.2.14.sm.90.120-cp311-cp311-linux_x86_64.whl", "12.1", True),
        ("x-1.0+cu.13.0.torch.2.14.sm.90.120-cp311-cp311-linux_x86_64.whl", "10.0", False),
        ("x-1.0+cu.13.0.torch.2.14.sm.90.ptx.90-cp311-cp311-linux_x86_64.whl", "12.0", False),
        ("x-1.0+cu.13.0.torch.2.14.sm.90a-cp311-cp311-linux_x86_64.whl", "9.0", False),
        ("x-1.0+cu.13.0.torch.2.14.sm.90a-cp311-cp311-linux_x86_64.whl", "9.0a", True),
        ("fla_core-0.6.0+cu.13.0.torch.2.14.pure-py3-none-any.whl", "12.0", True),
        ("x-1.0-cp311-cp311-linux_x86_64.whl", "12.0", True),  # not ours: cannot tell
    ],
)
def test_index_wheel_serves_an_arch_by_the_arch_set_in_its_label(filename: str, arch: str,
                                                                   expected: bool) -> None:
    assert serves(filename, parse_arch(arch)) is expected
