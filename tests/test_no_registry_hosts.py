"""No registry host name is written into the repository: where packages and images come from
is the user's pip configuration, the machine's apt sources and the container engine's registry
configuration, asked at run time (issue 13).

This test writes no host either (issue 21): it asks this machine's own clients which hosts
they use (pip, apt, npm, the container engines), and scans the tracked files for those. A
client that cannot be asked here is not checked; the test says which sources answered."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import REPO
from wheelsmith.locations import RESOURCES

# Debian names its Docker engine package like Docker's registry host. These phrases name the
# package, and only they are not counted: .ci/run's list of packages, prose and commands.
# The name is joined from parts so that this file does not write the host it may look for.
DEBIAN_DOCKER = "docker" + ".io"
PACKAGE_PHRASES = (f"{DEBIAN_DOCKER}:dockerd", f"debian's {DEBIAN_DOCKER}",
                   f"apt install {DEBIAN_DOCKER}")
URL_RE = re.compile(r"[a-z][a-z0-9+.-]*://[^\s'\"]+", re.IGNORECASE)
HOST_RE = re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)+$")
APT = Path("/etc/apt")
CONTAINERS = Path("/etc/containers")


def host_names(hosts: Iterable[str]) -> set[str]:
    """Each host and its registrable part (its last two labels): `files.` of a host is as much
    the registry as the host itself. Addresses and single labels (localhost) are no registry."""
    names = set()
    for given in hosts:
        host = given.lower().strip().strip(".")
        if HOST_RE.match(host) and not host.replace(".", "").isdigit():
            names |= {host, ".".join(host.split(".")[-2:])}
    return names


def url_hosts(text: str) -> set[str]:
    return {urlsplit(url).hostname or "" for url in URL_RE.findall(text)}


ANSWER_WITHIN_S = 300  # an engine's `info` is slow on a busy machine (podman's reads its store)


def ask(*argv: str) -> str:
    """stdout of a client, or "" when it is not installed or fails; a client that does not
    answer fails the test (a slow one is waited for: what is checked does not depend on the
    machine's load)."""
    if shutil.which(argv[0]) is None and argv[0] != sys.executable:
        return ""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=ANSWER_WITHIN_S,
                              check=False)
    except OSError:
        return ""
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(argv)} did not answer in {ANSWER_WITHIN_S} s")
    return done.stdout if done.returncode == 0 else ""


def pip_hosts() -> set[str]:
    """pip's index as the product asks for it (resources/pip_index.py), pip's own default index
    and file host, and every URL in pip's configuration."""
    answer = ask(sys.executable, str(RESOURCES / "pip_index.py"))
    default = ask(sys.executable, "-c", "from pip._internal.models.index import PyPI; "
                  "print(PyPI.url, 'https://' + PyPI.file_storage_domain)")
    config = ask(sys.executable, "-m", "pip", "config", "list")
    index = json.loads(answer)["index_url"] if answer else ""
    return url_hosts(" ".join((index, default, config)))


def apt_hosts() -> set[str]:
    """The hosts of the URIs in apt's sources (one-line .list and deb822 .sources files)."""
    files = [APT / "sources.list", *sorted((APT / "sources.list.d").glob("*.list")),
             *sorted((APT / "sources.list.d").glob("*.sources"))]
    text = "\n".join(path.read_text(encoding="utf-8", errors="replace") for path in files
                     if path.is_file())
    lines = [line for line in text.splitlines()
             if re.match(r"\s*(deb(-src)?\s|uris:)", line, re.IGNORECASE)]
    return url_hosts("\n".join(lines))


def npm_hosts() -> set[str]:
    return url_hosts(ask("npm", "config", "get", "registry"))


def registry_host(reference: str) -> str:
    """The host of an image reference or registry location (`host[:port]/path`)."""
    return reference.split("/", maxsplit=1)[0].split(":", maxsplit=1)[0]


def container_hosts() -> set[str]:
    """The engines' default and search registries (docker info, podman info) and the hosts
    in containers' registries configuration (search registries, registries, short names)."""
    hosts = url_hosts(ask("docker", "info", "--format", "{{.IndexServerAddress}}"))
    podman = ask("podman", "info", "--format", "{{json .Registries}}")
    registries = json.loads(podman) if podman.strip().startswith("{") else {}
    hosts |= {registry_host(name) for name in registries.get("search", [])}
    hosts |= {registry_host(name) for name in registries if name != "search"}
    for path in [CONTAINERS / "registries.conf",
                 *sorted((CONTAINERS / "registries.conf.d").glob("*.conf"))]:
        if path.is_file():
            hosts |= {registry_host(r) for r in configured_registries(path.read_text(
                encoding="utf-8", errors="replace"))}
    return hosts


def configured_registries(conf: str) -> list[str]:
    """The registries a containers registries.conf names: unqualified-search-registries,
    each [[registry]]'s location and prefix, and the images of [aliases]. A few keys read by
    line (Python 3.10 has no TOML reader, and these values are one-line strings)."""
    found, section = [], ""
    for raw in conf.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            section = line.strip("[] ")
            continue
        key, equals, value = line.partition("=")
        key = key.strip().strip('"')
        if equals and (key in ("unqualified-search-registries", "location", "prefix")
                       or section == "aliases"):
            found += re.findall(r'"([^"]+)"', value)
    return found


SOURCES: dict[str, Callable[[], set[str]]] = {
    "pip": pip_hosts, "apt": apt_hosts, "npm": npm_hosts, "container engines": container_hosts}


@pytest.fixture(scope="module")
def registry_hosts() -> dict[str, set[str]]:
    """The host names each source answered with on this machine (empty: not checked)."""
    return {source: host_names(find()) for source, find in SOURCES.items()}


def hosts_in(root: Path, files: list[str], hosts: Iterable[str]) -> list[str]:
    """`path:line: host` for every host of `hosts` named in `files` (relative to `root`)."""
    ordered = sorted(set(hosts))
    found = []
    for name in files:
        try:
            text = (root / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # binary files, submodules, files deleted in the work tree
        for number, line in enumerate(text.splitlines(), 1):
            scanned = line.lower()
            for phrase in PACKAGE_PHRASES:
                scanned = scanned.replace(phrase, "")
            found += [f"{name}:{number}: {host}" for host in ordered
                      if re.search(rf"(?<![a-z0-9-]){re.escape(host)}(?![a-z0-9-])", scanned)]
    return found


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                            text=True, check=True).stdout
    return [name for name in listed.split("\0") if name]


def asked(registry_hosts: dict[str, set[str]]) -> str:
    return "; ".join(f"{source}: {', '.join(sorted(hosts)) or 'not checked (no answer)'}"
                     for source, hosts in registry_hosts.items())


def test_no_registry_host_is_named_in_any_tracked_file(
        registry_hosts: dict[str, set[str]]) -> None:
    hosts = set().union(*registry_hosts.values())
    print(f"hosts asked for: {asked(registry_hosts)}")
    assert hosts_in(REPO, tracked_files(), hosts) == [], asked(registry_hosts)


def pip_default_host() -> str:
    """pip's own default index host, from pip (never written here)."""
    host = urlsplit(ask(sys.executable, "-c", "from pip._internal.models.index import PyPI; "
                        "print(PyPI.url)").strip()).hostname
    assert host, "pip did not say its default index"
    return host


def test_pips_default_index_is_among_the_hosts_looked_for(
        registry_hosts: dict[str, set[str]]) -> None:
    assert pip_default_host() in registry_hosts["pip"], asked(registry_hosts)


def test_the_scan_finds_a_host_in_a_url_and_in_prose(tmp_path: Path) -> None:
    pypi = pip_default_host()
    (tmp_path / "a.py").write_text(f'INDEX = "https://{pypi}/simple"\n')
    (tmp_path / "b.md").write_text(f"ok\nimages come from {DEBIAN_DOCKER.title()} by default\n")
    (tmp_path / "c.bin").write_bytes(b"\xff\xfe " + pypi.encode())
    (tmp_path / "d.md").write_text(f"not a host: my{pypi}s, {pypi}-mirror\n")
    assert hosts_in(tmp_path, ["a.py", "b.md", "c.bin", "d.md"], {pypi, DEBIAN_DOCKER}) == [
        f"a.py:1: {pypi}", f"b.md:2: {DEBIAN_DOCKER}"]


def test_the_debian_package_docker_io_is_no_host_but_the_registry_still_is(
        tmp_path: Path) -> None:
    package = DEBIAN_DOCKER
    (tmp_path / "a.md").write_text(f"With Debian's {package} 20.10 (apt install {package})\n"
                                   f"for pkg in runc:runc {package}:dockerd; do\n"
                                   f"Debian's {package} pulls from {package} by default\n"
                                   f"the {package} package\n")
    assert hosts_in(tmp_path, ["a.md"], {package}) == [f"a.md:3: {package}",
                                                        f"a.md:4: {package}"]


def test_registries_conf_names_its_search_registries_locations_and_aliases() -> None:
    conf = ('unqualified-search-registries = ["one.example.test", "two.example.test:5000"]\n'
            "# location = \"commented.example.test\"\n"
            '[[registry]]\nlocation = "three.example.test/mirror"\ninsecure = true\n'
            '[aliases]\n  "tool" = "four.example.test/tools/tool"\n')
    assert [registry_host(r) for r in configured_registries(conf)] == [
        "one.example.test", "two.example.test", "three.example.test", "four.example.test"]


def test_a_hosts_registrable_part_is_looked_for_too_and_addresses_are_not() -> None:
    assert host_names(["Files.Example.Test.", "127.0.0.1", "localhost"]) == {
        "files.example.test", "example.test"}
