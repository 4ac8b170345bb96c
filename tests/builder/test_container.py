"""Builds inside the pinned image with real podman (Debian's podman + runc, a base image made
by debootstrap, no registry) and real docker (Debian's docker.io, dockerd started by the test
set-up, the same base moved across with podman save | docker load): offline, verified again on
the host, never leaving a container or a half-built wheel behind. Needs root, podman, runc and
debootstrap, and Debian's docker.io for docker (.ci/run installs them); skipped with the reason
otherwise."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import (
    DEFAULT_PROFILE,
    FIXTURES,
    REPO,
    Docker,
    assert_platform_tagged,
    docker_clis,
    wheelsmith,
)
from wheelsmith.builder import container
from wheelsmith.builder.container import Engine, Mounts, run_argv
from wheelsmith.builder.rebuild import differences
from wheelsmith.files import sha256_file
from wheelsmith.toolchain.profile import load_profile
from wheelsmith.untrusted.provenance import read_provenance

BASE = "localhost/wheelsmith-base:bookworm"
BASE_313 = "localhost/wheelsmith-base:trixie"  # Debian trixie's python3 is 3.13
MIRROR = Path("/opt/pypi-more/files")  # this workplace's local PyPI files (torch, nvidia-*)


def podman_problem() -> str | None:
    if os.geteuid() != 0:
        return "the base image needs debootstrap as root"
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt install podman runc debootstrap)"
    if container.detect("auto") is None:
        return "podman does not answer `podman info` here"
    return None


PROBLEM = podman_problem()
needs_podman = pytest.mark.skipif(PROBLEM is not None, reason=f"no podman build: {PROBLEM}")


def no_registry_env(config: Path) -> dict[str, str]:
    """This machine's environment with a scratch user configuration (its images.lock) and
    a registries configuration that resolves no short name: no registry answers."""
    registries = config / "registries.conf"
    registries.parent.mkdir(parents=True, exist_ok=True)
    registries.write_text("")
    return {**os.environ, "XDG_CONFIG_HOME": str(config),
            "CONTAINERS_REGISTRIES_CONF": str(registries)}


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The real image of the default profile, built once (minutes the first time) with no
    --base where no registry answers: its base is made with debootstrap and locked on first
    use (issue 13)."""
    result = image_build(tmp_path_factory.mktemp("config"))
    assert result.returncode == 0, result.stderr
    assert f"locked debian-bookworm: {BASE} (local, id " in result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="session")
def image_313() -> str:
    """The default profile's image on a Python 3.13 base (torch and the CUDA compiler for
    cp313 come from the package index: several GB the first time)."""
    subprocess.run([str(REPO / "scripts" / "make-base-image.sh"), BASE_313, "trixie"],
                   check=True, capture_output=True)
    result = wheelsmith("image", "build", "--engine", "podman", "--base", BASE_313,
                        "--python", "3.13", cwd=REPO, check=True)
    return result.stdout.strip()


@pytest.fixture
def tiny_project(tmp_path: Path) -> Path:
    home = tmp_path / "project"
    (home / "recipes").mkdir(parents=True)
    shutil.copytree(REPO / "toolchains", home / "toolchains")
    source = tmp_path / "tiny-ext"
    shutil.copytree(FIXTURES / "tiny-ext", source)
    recipe = (FIXTURES / "tiny-ext.recipe.yaml").read_text().replace("PATH", str(source))
    (home / "recipes" / "tiny-ext.yaml").write_text(recipe)
    return home


def run_in(home: Path, *args: str, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    env = dict(env or os.environ, WHEELSMITH_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "wheelsmith", *args], cwd=home, env=env,
                          capture_output=True, text=True, check=False)


def leftover_containers(engine: str = "podman") -> list[str]:
    names = subprocess.run([engine, "ps", "--all", "--format", "{{.Names}}"],
                           capture_output=True, text=True, check=True).stdout.split()
    return [n for n in names if n.startswith("wheelsmith-")]


@needs_podman
@pytest.mark.container
def test_tiny_extension_builds_in_the_image_offline(image: str, tiny_project: Path) -> None:
    built_and_verified_in(image, tiny_project, "podman")
    # another arch: the build inside gets the first one's times (from the host's work
    # directory: the container's own is fresh each run) and compiles longest first
    other = run_in(tiny_project, "build", "tiny-ext", "--arch", "9.0", "--runner", "podman",
                   "--json")
    assert other.returncode == 0, other.stderr
    log = Path(json.loads(other.stdout)["log"]).read_text()
    assert re.search(r"compile: plan from _C's build.ninja: 1 CUDA \+ 1 C\+\+ file\(s\): .*; "
                     r"longest first by an earlier run \(2 of 2 objects timed\); about 1 min on "
                     r"\d+ jobs by those times$", log,
                     re.MULTILINE), log[-3000:]


def built_and_verified_in(image: str, tiny_project: Path, engine: str,
                          env: dict[str, str] | None = None) -> None:
    """The tiny CUDA extension built for 12.0 in `image` by `engine`, offline; verified again
    on the host; no container left; a second build finds it up to date (same content key)."""
    result = run_in(tiny_project, "build", "tiny-ext", "--arch", "12.0", "--runner", engine,
                    "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert f"runner: {engine} (" in result.stderr
    assert f"in {engine}, --network=none" in result.stderr
    data = json.loads(result.stdout)
    provenance = data["provenance"]
    run = data["run"]
    assert run["runner"]["engine"] == engine
    assert run["runner"]["image"] == image
    assert run["runner"]["image_id"]
    assert provenance["device_code"][0]["sass"] == ["sm_120"]
    assert run["smoke"][0] == "imported tiny_ext"
    # the objects' times come from the host's tree that the image built in
    assert sorted(run["build"]["object_seconds"]) == ["csrc/add.o", "csrc/add_kernel.o"]
    assert "verify: again on the host" in result.stderr
    wheel = Path(data["wheel"])
    # tagged in the image by its auditwheel: bookworm's g++ 12 needs GLIBC_2.32 -> 2.34
    assert_platform_tagged(wheel, provenance, "tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120")
    assert provenance["platform"]["glibc_floor"] == "2.34"
    assert wheel.parent == tiny_project / "wheelhouse"
    assert wheelsmith("verify", str(wheel), "--arch", "12.0", cwd=REPO).returncode == 0
    assert leftover_containers(engine) == []
    again = run_in(tiny_project, "build", "tiny-ext", "--arch", "12.0", "--runner", engine,
                   "--json", env=env)  # host and image compute the same content key
    assert json.loads(again.stdout)["up_to_date"] is True, again.stderr


@pytest.mark.slow  # a second image (Python 3.13): 6 min
@needs_podman
@pytest.mark.container
def test_a_cp313_wheel_is_built_and_imported_in_the_python_313_image(
        image_313: str, tiny_project: Path) -> None:
    result = run_in(tiny_project, "build", "tiny-ext", "--arch", "12.0", "--runner", "podman",
                    "--python", "3.13", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert Path(data["wheel"]).name.startswith("tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120-"
                                               "cp313-cp313-")
    provenance = data["provenance"]
    assert data["run"]["runner"]["image"] == image_313
    assert provenance["toolchain"]["python"] == "3.13"
    assert data["run"]["smoke"][0] == "imported tiny_ext"  # by the image's Python 3.13
    assert leftover_containers() == []


@needs_podman
@pytest.mark.container
def test_a_python_without_an_image_is_refused_by_name(tiny_project: Path) -> None:
    result = run_in(tiny_project, "build", "tiny-ext", "--runner", "podman", "--python", "3.12")
    assert result.returncode == 4
    assert result.stderr.splitlines()[-2:] == [
        "error: no build image for Python 3.12: images exist for 3.11 (Debian bookworm), 3.13 "
        "(Debian trixie), 3.14 (Debian forky), 3.15 (Debian forky)",
        "hint: build on the host with that Python instead: --runner host --python "
        "/path/to/python"]


@pytest.mark.slow  # a nightly in the image: the host nightly tests cover the flow
@needs_podman
@pytest.mark.container
def test_nightly_builds_cells_in_the_image_and_never_for_another_python(
        image: str, tiny_project: Path) -> None:
    """`nightly --runner podman`: the key is the image's (no toolchain on the host), the wheel
    is built in there, and a cell for a Python no image has fails instead of quietly
    becoming a cp311 wheel."""
    (tiny_project / "matrix.yaml").write_text('pythons: ["3.11", "3.12"]\npackages:\n'
                                              '  - recipe: tiny-ext\n    archs: ["12.0"]\n')
    first = run_in(tiny_project, "nightly", "--runner", "podman", "--no-publish", "--report", "r1")
    assert first.returncode == 17, first.stderr
    cells = {c["python"]: c for c in
             json.loads((tiny_project / "r1" / "nightly.json").read_text())["cells"]}
    assert cells["3.11"]["status"] == "built", cells["3.11"]["reason"]
    assert read_provenance(tiny_project / "wheelhouse" / cells["3.11"]["wheel"]) is not None
    runs = [json.loads(p.read_text()) for p in tiny_project.rglob("run.json")]
    assert image in [r.get("runner", {}).get("image") for r in runs]
    assert cells["3.12"]["reason"] == (
        "exit 4: no build image for Python 3.12: images exist for 3.11 (Debian "
        "bookworm), 3.13 (Debian trixie), 3.14 (Debian forky), 3.15 (Debian forky) (hint: build "
        "on the host with that Python instead: --runner host --python /path/to/python)")
    again = run_in(tiny_project, "nightly", "--python", "3.11", "--runner", "podman",
                   "--no-publish", "--report", "r2")
    assert again.returncode == 0, again.stderr
    assert json.loads((tiny_project / "r2" / "nightly.json").read_text())["summary"] == {
        "built": 0, "skipped": 1, "partial": 0, "failed": 0, "total": 1}


@needs_podman
@pytest.mark.container
def test_changed_pins_refuse_the_old_image(image: str, tiny_project: Path) -> None:
    profile = tiny_project / "toolchains" / "cu130-torch2.14.yaml"
    profile.write_text(profile.read_text().replace("ninja==1.13.2", "ninja==1.13.1"))
    result = run_in(tiny_project, "build", "tiny-ext", "--runner", "podman")
    assert result.returncode == 7
    assert "error: no podman image localhost/wheelsmith:cu130-torch2.14-" in result.stderr
    assert "hint: build it: wheelsmith image build --toolchain cu130-torch2.14 --engine podman" \
           in result.stderr


def image_build(config: Path, *args: str, home: Path = REPO) -> subprocess.CompletedProcess[str]:
    """`wheelsmith image build` with podman, from the project `home`, with no registry."""
    mirror = ["--pip-mirror", str(MIRROR)] if MIRROR.is_dir() else []
    return subprocess.run([sys.executable, "-m", "wheelsmith", "image", "build", "--engine",
                           "podman", *mirror, *args], cwd=home, capture_output=True, text=True,
                          env={**no_registry_env(config), "WHEELSMITH_HOME": str(home)},
                          check=False)


@needs_podman
@pytest.mark.container
def test_an_image_whose_venv_has_the_same_pins_is_reused_under_a_new_key(
        image: str, tiny_project: Path) -> None:
    """A new key with the same pins for this Python (issue 20 changed the key's format; here a
    copy of the profile under another name and with an index) names a new image: it is made
    from the older image with those pins, one link and a label on top, in seconds instead of
    a rebuild (minutes, ~14 GB at its peak); the older tag goes, other Pythons' images stay."""
    podman = Engine("podman", "podman")
    shipped = tiny_project / "toolchains" / "cu130-torch2.14.yaml"
    (tiny_project / "toolchains" / "cu999-torch2.14.yaml").write_text(
        shipped.read_text().replace("name: cu130-torch2.14", "name: cu999-torch2.14")
        + "index: http://127.0.0.1:9/simple\n")
    older = "localhost/wheelsmith:cu999-torch2.14-000000000000"  # an older key's name
    other_python = "localhost/wheelsmith:cu999-torch2.14-py3.99-000000000000"
    subprocess.run(["podman", "tag", image, older], check=True)
    subprocess.run(["podman", "tag", BASE, other_python], check=True)
    made_ref = ""
    try:
        result = image_build(tiny_project / "config", "--base", BASE, "--toolchain",
                             "cu999-torch2.14", home=tiny_project)
        made_ref = result.stdout.strip()
        assert result.returncode == 0, result.stderr
        made = container.inspect(podman, made_ref) or {}
        key = container.labels_of(made)[container.LABEL_KEY]
        assert made_ref == f"localhost/wheelsmith:cu999-torch2.14-{key[:12]}"
        layers = (container.inspect(podman, image) or {})["RootFS"]["Layers"]
        assert made["RootFS"]["Layers"][:-1] == layers  # one layer on top: not rebuilt
        venv = f"/opt/wheelsmith/cache/toolchains/cu999-torch2.14-py3.11-{key}"
        linked = subprocess.run(["podman", "run", "--rm", *podman.common(), "--network=none",
                                 "--entrypoint", "readlink", made_ref, venv],
                                capture_output=True, text=True, check=True)
        assert linked.stdout.startswith("cu130-torch2.14-py3.11-")
        assert container.inspect(podman, older) is None  # the older key's tag is gone
        assert container.inspect(podman, other_python) is not None
        assert container.inspect(podman, image) is not None  # other profiles' stay
    finally:
        for ref in (made_ref, older, other_python):
            if ref:
                subprocess.run(["podman", "rmi", ref], capture_output=True, check=False)


@needs_podman
@pytest.mark.container
def test_interrupted_build_leaves_no_container_and_no_wheel(image: str,
                                                            tiny_project: Path) -> None:
    interrupted_in(tiny_project, "podman")


def interrupted_in(tiny_project: Path, engine: str, env: dict[str, str] | None = None) -> None:
    """SIGTERM while the build container runs: exit 130, no container left (docker keeps
    running a container whose `docker run` client is gone: it must be removed), no wheel."""
    setup = next(tiny_project.parent.glob("tiny-ext/setup.py"))
    setup.write_text("import time\ntime.sleep(120)\n" + setup.read_text())
    env = dict(env or os.environ, WHEELSMITH_HOME=str(tiny_project))
    proc = subprocess.Popen([sys.executable, "-m", "wheelsmith", "build", "tiny-ext", "--runner",
                             engine], cwd=tiny_project, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600  # its setup.py sleeps 120 s once it runs
    while not leftover_containers(engine):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no build container started in 600 s"
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert ("interrupted: nothing reached --out wheelhouse; a build keeps the objects it "
            "finished in build/wheelsmith, and the same command resumes from them") in err
    assert leftover_containers(engine) == []
    assert not list((tiny_project / "wheelhouse").glob("*.whl")) if (
        tiny_project / "wheelhouse").exists() else True


@pytest.mark.parametrize("engine", [Engine("podman", "podman"), Engine("docker", "docker")],
                         ids=["podman", "docker"])
def test_run_command_is_offline_with_only_the_named_mounts(engine: Engine, tmp_path: Path) -> None:
    mounts = Mounts(project=tmp_path / "p", source=tmp_path / "s", out=tmp_path / "o",
                    work=tmp_path / "w", ccache=None, recipes=(tmp_path / "r1", tmp_path / "r2"))
    argv = run_argv(engine, "img", mounts, ["tiny-ext"], env={"K": "V"}, keep=False, name="n")
    assert argv[:4] == [engine.exe, "run", "--rm", "--name"]
    assert "--network=none" in argv
    volumes = [argv[i + 1] for i, word in enumerate(argv) if word == "--volume"]
    assert [v.split(":")[1] for v in volumes] == [
        "/opt/wheelsmith/current/wheelsmith", "/project", "/work/src", "/work/out", "/work/build",
        str(tmp_path / "r1"), str(tmp_path / "r2")]  # user recipe repositories: same paths
    assert volumes[-1] == f"{tmp_path / 'r2'}:{tmp_path / 'r2'}:ro"
    env = [argv[i + 1] for i, word in enumerate(argv) if word == "--env"]
    assert env == ["WHEELSMITH_HOME=/project", "PYTHONPATH=/opt/wheelsmith/current",
                   f"WHEELSMITH_RECIPES={tmp_path / 'r1'}:{tmp_path / 'r2'}", "K=V"]
    assert ("--runtime" in argv) == (engine.name == "podman" and shutil.which("runc") is not None)


@pytest.fixture(scope="session")
def docker_image(docker: Docker, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The default profile's image built by docker (BuildKit) from the same Dockerfile, with no
    --base where no registry answers: on the base podman locked, moved into docker (podman
    save | docker load) where docker lacks it; without podman, on a base docker locks itself."""
    if docker.cli is None:
        pytest.skip("no docker image build: no docker CLI here has BuildKit (the Dockerfile's "
                    "RUN --mount): " + ", ".join(docker_clis()))
    env = {**no_registry_env(tmp_path_factory.mktemp("config")), "PATH": docker.env["PATH"]}
    if PROBLEM is None:  # podman locks the base; docker builds on that same image
        locked = subprocess.run([sys.executable, "-m", "wheelsmith", "image", "base",
                                 "--engine", "podman"], cwd=REPO, env=env, capture_output=True,
                                text=True, check=False)
        assert locked.returncode == 0, locked.stderr
    built = subprocess.run([sys.executable, "-m", "wheelsmith", "image", "build", "--engine",
                            "docker"], cwd=REPO, env=env, capture_output=True, text=True,
                           check=False)
    assert built.returncode == 0, built.stderr
    if PROBLEM is not None:
        assert "locked debian-bookworm: " in built.stderr
    return built.stdout.strip()


@pytest.mark.slow  # docker: the podman tests cover the runner; minutes
@pytest.mark.container
def test_tiny_extension_builds_in_the_docker_image_offline(
        docker: Docker, docker_image: str, tiny_project: Path) -> None:
    built_and_verified_in(docker_image, tiny_project, "docker", env=docker.env)
    info = json.loads(subprocess.run(["docker", "image", "inspect", docker_image],
                                     capture_output=True, text=True, check=True).stdout)[0]
    assert info["Config"]["Labels"]["dev.wheelsmith.profile"] == "cu130-torch2.14"


@pytest.mark.slow  # docker, as above
@pytest.mark.container
def test_interrupted_docker_build_leaves_no_container_and_no_wheel(
        docker: Docker, docker_image: str, tiny_project: Path) -> None:
    interrupted_in(tiny_project, "docker", env=docker.env)


@pytest.mark.container
def test_docker_without_buildkit_or_with_a_pip_mirror_is_refused_by_name(
        docker: Docker, tmp_path: Path) -> None:
    """The Dockerfile needs BuildKit: a docker CLI without it (a client 23+ lacking its buildx
    component, as /usr/local/bin/docker on this machine's image) is refused before anything is
    built; docker build cannot mount a pip mirror directory."""
    env = {**no_registry_env(tmp_path / "config"), "PATH": docker.env["PATH"]}
    mirror = subprocess.run([sys.executable, "-m", "wheelsmith", "image", "build", "--engine",
                             "docker", "--pip-mirror", str(tmp_path)], cwd=REPO, env=env,
                            capture_output=True, text=True, check=False)
    assert mirror.returncode == 4
    assert mirror.stderr.splitlines()[-2:] == [
        "error: --pip-mirror needs podman (docker build cannot mount a host directory)",
        "hint: drop --pip-mirror, or use --engine podman"]
    without = [c for c in docker_clis()
               if container.buildkit_problem(Engine("docker", c)) is not None]
    if not without:
        pytest.skip("every docker CLI here has BuildKit")
    cli = without[0]
    version = subprocess.run([cli, "version", "--format", "{{.Client.Version}}"],
                             capture_output=True, text=True, check=False).stdout.strip()
    env["PATH"] = f"{Path(cli).parent}{os.pathsep}{env['PATH']}"
    result = subprocess.run([sys.executable, "-m", "wheelsmith", "image", "build", "--engine",
                             "docker"], cwd=REPO, env=env, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 7
    assert result.stderr.splitlines()[-2:] == [
        "error: docker image builds need BuildKit (the Dockerfile's RUN --mount), and the "
        f"docker CLI {cli} (client {version}) has none: its buildx component is missing",
        "hint: install docker's buildx component, or use a docker CLI with BuildKit built in "
        "(Debian's docker.io), or --engine podman"]
    assert not (tmp_path / "config" / "wheelsmith" / "images.lock").exists()  # nothing locked


@pytest.mark.slow
@needs_podman
@pytest.mark.container
def test_host_and_image_builds_of_one_content_key_are_bit_identical(
        image: str, tiny_project: Path) -> None:
    """Reproducible across runners: a build here and one in the pinned image compile with the
    same flags (reproducible.python_flags) and name the same paths (the path view, here and in
    the image). The Pythons differ in their patch release (pyenv's 3.11.7 here, bookworm's
    3.11.2 in the image): with host debug info (`-g`) the `.so`'s DWARF and build-id differed
    by their headers; without it, one sha256."""
    assert_one_sha256(tiny_project, tiny_project, "tiny-ext", "--arch", "12.0")


@pytest.mark.slow
@needs_podman
@pytest.mark.container
def test_host_and_image_builds_of_causal_conv1d_are_bit_identical(image: str,
                                                                  tmp_path: Path) -> None:
    """The real package (about 15 minutes on 2 cores, two cold builds): cudafe++ names its
    anonymous namespaces after the source file's real path, which the path view makes one
    (/tmp/wheelsmith-view/source) on both runners."""
    assert_one_sha256(REPO, tmp_path, "causal-conv1d", "--arch", "12.0")


def assert_one_sha256(home: Path, scratch: Path, *build: str) -> None:
    """`build` from the project `home` with --runner host and --runner podman (compile cache
    off, work and output directories of their own in `scratch`) gives one wheel, byte for
    byte."""
    wheels = []
    for runner in ("host", "podman"):
        result = run_in(home, "build", *build, "--runner", runner, "--compile-cache", "off",
                        "--work-dir", str(scratch / f"work-{runner}"),
                        "--out", str(scratch / f"out-{runner}"), "--json")
        assert result.returncode == 0, result.stderr
        wheels.append(Path(json.loads(result.stdout)["wheel"]))
    assert wheels[0].name == wheels[1].name
    assert differences(wheels[0], wheels[1]) == []
    assert sha256_file(wheels[0]) == sha256_file(wheels[1])


def test_an_image_of_an_older_toolchain_layout_is_stale_and_says_why() -> None:
    """An image made before the toolchain's file times were fixed has the profile's pins but
    other device code than a host build: a build refuses it with the command that rebuilds
    it, and `image build` makes a new one."""
    profile = load_profile(DEFAULT_PROFILE)
    labels = {container.LABEL_KEY: profile.key("3.11")}
    assert container.staleness({"Config": {"Labels": labels}}, profile, "3.11") == (
        "its toolchain is of layout 1, wheelsmith now makes 2 (one fixed time on the "
        "toolchain's files, so its device code is a host build's)")
    labels[container.LABEL_LAYOUT] = container.LAYOUT
    assert container.staleness({"Config": {"Labels": labels}}, profile, "3.11") == ""
    labels[container.LABEL_KEY] = "0" * 16
    assert container.staleness({"Config": {"Labels": labels}}, profile, "3.11") == (
        f"it was built for pins {'0' * 16}, the profile now has {profile.key('3.11')}")
