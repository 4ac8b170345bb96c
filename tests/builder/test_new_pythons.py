"""Python 3.14 and 3.15: causal-conv1d built for 12.0 in the image whose interpreter is Debian
forky's python3.14 / python3.15 (a debootstrap base, no registry), against the torch that
publishes wheels for it (cp314: torch 2.14 and 2.15; cp315: torch 2.15 only), verified by
cuobjdump in the image and again on the host, and imported by that Python in the image.

Each image holds its toolchain (~6.7 GB; torch and the CUDA compiler come from the package
index the first time) and each build takes ~5 min on 2 cores. Needs root, podman, runc and
debootstrap; skipped with the reason otherwise."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.builder.test_container import leftover_containers, needs_podman
from tests.conftest import REPO, wheelsmith
from wheelsmith.builder import container
from wheelsmith.toolchain.profile import find_profile

BASE = "localhost/wheelsmith-base:forky"  # Debian forky: python3.14 3.14.8, python3.15 3.15.0

# Seen here: an image build took ~22 GB at its peak (pip's downloads, the installed toolchain,
# then podman's copy of the layer it commits): 15 GB free was not enough, twice (2026-12-02)
PEAK_GB = 22
FREE_GB = shutil.disk_usage("/var/lib/containers" if Path("/var/lib/containers").is_dir()
                            else "/").free / 1e9

pytestmark = [pytest.mark.build, pytest.mark.slow, pytest.mark.container, needs_podman]


def image_for(profile: str, python: str) -> str:
    """The profile's image on the forky base for `python` (made once, kept by podman)."""
    engine = container.detect("podman")
    assert engine is not None
    ref = container.image_ref(find_profile(REPO / "toolchains", profile), python)
    if container.inspect(engine, ref) is None and FREE_GB < PEAK_GB:
        pytest.skip(f"{ref} is missing, and an image build needs ~{PEAK_GB} GB free at its "
                    f"peak: this disk has {FREE_GB:.1f} GB")
    subprocess.run([str(REPO / "scripts" / "make-base-image.sh"), BASE, "forky"], check=True,
                   capture_output=True)
    result = wheelsmith("image", "build", "--engine", "podman", "--base", BASE, "--toolchain",
                        profile, "--python", python, cwd=REPO, check=True)
    return result.stdout.strip()


@pytest.mark.parametrize(("python", "profile", "label"), [
    # CUDA 13.0 on forky: its venv carries CUDA 13.2's rsqrt declarations (glibc_headers.py:
    # forky's glibc 2.42 declares rsqrt/rsqrtf noexcept, CUDA 13.0's headers did not)
    ("3.14", "cu130-torch2.14", "cu.13.0.torch.2.14.sm.120"),
    ("3.14", "cu132-torch2.15", "cu.13.2.torch.2.15.sm.120"),
    ("3.15", "cu132-torch2.15", "cu.13.2.torch.2.15.sm.120"),
])
def test_causal_conv1d_builds_verifies_and_imports_on_the_newest_pythons(
        python: str, profile: str, label: str, tmp_path: Path) -> None:
    image = image_for(profile, python)
    engine = container.detect("podman")
    assert engine is not None
    marker = subprocess.run(  # forky's glibc is 2.42: CUDA 13.0 gets the backport, 13.2 not
        ["podman", "run", "--rm", *engine.common(), "--network=none", "--entrypoint", "sh",
         image, "-c", "cat /opt/wheelsmith/cache/toolchains/*/wheelsmith-toolchain.json"],
        capture_output=True, text=True, check=True).stdout
    assert json.loads(marker)["header_fixes"] == (
        ["glibc-2.42-rsqrt"] if profile == "cu130-torch2.14" else [])
    result = wheelsmith("build", "causal-conv1d", "--arch", "12.0", "--runner", "podman",
                        "--toolchain", profile, "--python", python, "--out", str(tmp_path / "out"),
                        "--work-dir", str(tmp_path / "work"), "--json", cwd=REPO)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    wheel = Path(data["wheel"])
    abi = "cp" + python.replace(".", "")
    assert wheel.name.startswith(f"causal_conv1d-1.7.0+{label}-{abi}-{abi}-manylinux_"), wheel
    provenance, run = data["provenance"], data["run"]
    assert run["runner"]["image"] == image
    assert provenance["toolchain"]["python"] == python
    assert provenance["toolchain"]["name"] == profile
    assert [c["path"] for c in provenance["device_code"]] == [
        f"causal_conv1d_cuda.cpython-{abi[2:]}-x86_64-linux-gnu.so"]
    assert [(c["sass"], c["ptx"]) for c in provenance["device_code"]] == [(["sm_120"], [])]
    assert "verify: again on the host" in result.stderr
    # imported by the image's own python3.X against its torch
    assert run["smoke"][:2] == ["imported causal_conv1d", "imported causal_conv1d_cuda"]
    assert wheelsmith("verify", str(wheel), "--arch", "12.0", cwd=REPO).returncode == 0
    assert leftover_containers() == []
