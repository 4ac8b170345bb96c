"""Fetch: sha256 checked before unpacking, hostile archives refused, git pinned by commit."""

from __future__ import annotations

import hashlib
import io
import re
import socket
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import Served, wheelsmith
from wheelsmith.errors import SourceError
from wheelsmith.recipes.fetch import cached_path, fetch
from wheelsmith.recipes.simple import PackageIndex, package_index, sdist_of
from wheelsmith.recipes.sources import GitSource, LocalSource, PypiSource, UrlSource
from wheelsmith.recipes.unpack import unpack


def make_sdist(path: Path, files: dict[str, str], top: str = "demo-1.0.0") -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hostile_tar(path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    with tarfile.open(path, "w:gz") as tar:
        ok = tarfile.TarInfo("demo-1.0.0/setup.py")
        ok.size = 3
        tar.addfile(ok, io.BytesIO(b"x=1"))
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data) if data else None)
    return path


def symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


def hardlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.LNKTYPE, target
    return info


def device(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (tarfile.TarInfo("/etc/evil"), "member '/etc/evil' has an absolute path or '..'"),
        (tarfile.TarInfo("demo-1.0.0/../../evil"),
         "member 'demo-1.0.0/../../evil' has an absolute path or '..'"),
        (symlink("demo-1.0.0/link", "../../etc/passwd"),
         "member 'demo-1.0.0/link' is a link pointing outside (../../etc/passwd)"),
        (symlink("demo-1.0.0/abs", "/etc/passwd"),
         "member 'demo-1.0.0/abs' is a link pointing outside (/etc/passwd)"),
        (hardlink("demo-1.0.0/hard", "../outside"),
         "member 'demo-1.0.0/hard' is a hard link pointing outside (../outside)"),
        (device("demo-1.0.0/null"), "member 'demo-1.0.0/null' is a device file or FIFO"),
    ],
    ids=["absolute", "dotdot", "symlink-out", "symlink-absolute", "hardlink-out", "device"],
)
def test_hostile_tarball_is_refused_before_anything_is_extracted(
    tmp_path: Path, member: tarfile.TarInfo, reason: str
) -> None:
    archive = hostile_tar(tmp_path / "hostile.tar.gz", member)
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(SourceError) as caught:
        unpack(archive, dest)
    assert caught.value.message == f"refusing to unpack hostile.tar.gz: {reason}"
    assert list(dest.iterdir()) == []


def test_hostile_zip_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "hostile.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("demo/../../evil.py", "x")
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(SourceError, match=r"member 'demo/\.\./\.\./evil.py' has an absolute"):
        unpack(archive, dest)
    assert list(dest.iterdir()) == []


def test_symlink_inside_the_tree_is_allowed(tmp_path: Path) -> None:
    archive = hostile_tar(tmp_path / "ok.tar.gz", symlink("demo-1.0.0/alias.py", "setup.py"))
    root = unpack(archive, tmp_path / "out")
    assert (root / "alias.py").read_text() == "x=1"


def test_url_source_with_wrong_sha256_is_refused_and_deleted(tmp_path: Path,
                                                             http_dir: Served) -> None:
    actual = make_sdist(http_dir.root / "demo-1.0.0.tar.gz", {"setup.py": "print(1)\n"})
    pinned = "ab" * 32
    source = UrlSource(url=f"{http_dir.url}/demo-1.0.0.tar.gz", sha256=pinned)
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as caught:
        fetch(source, tmp_path / "work", cache)
    assert caught.value.message == (f"sha256 mismatch for demo-1.0.0.tar.gz: the recipe pins "
                                    f"{pinned}, the download has {actual}")
    assert not list((cache / "downloads").rglob("*.tar.gz"))
    assert not cached_path(cache, pinned).exists()
    assert not list((tmp_path / "work").iterdir())


def test_download_is_cached_by_content(tmp_path: Path, http_dir: Served) -> None:
    sha = make_sdist(http_dir.root / "demo-1.0.0.tar.gz", {"setup.py": "print(1)\n"})
    source = UrlSource(url=f"{http_dir.url}/demo-1.0.0.tar.gz", sha256=sha)
    cache = tmp_path / "cache"
    root = fetch(source, tmp_path / "a", cache)
    assert (root / "setup.py").read_text() == "print(1)\n"
    assert cached_path(cache, sha).is_file()
    (http_dir.root / "demo-1.0.0.tar.gz").unlink()  # the second fetch must not need the server
    again = fetch(source, tmp_path / "b", cache)
    assert (again / "setup.py").read_text() == "print(1)\n"
    assert http_dir.requests == ["/demo-1.0.0.tar.gz"]


def test_corrupt_cache_entry_is_downloaded_again(tmp_path: Path, http_dir: Served) -> None:
    sha = make_sdist(http_dir.root / "demo-1.0.0.tar.gz", {"setup.py": "print(1)\n"})
    source = UrlSource(url=f"{http_dir.url}/demo-1.0.0.tar.gz", sha256=sha)
    cache = tmp_path / "cache"
    fetch(source, tmp_path / "a", cache)
    cached_path(cache, sha).write_bytes(b"bit rot")
    root = fetch(source, tmp_path / "b", cache)
    assert (root / "setup.py").read_text() == "print(1)\n"
    assert http_dir.requests == ["/demo-1.0.0.tar.gz", "/demo-1.0.0.tar.gz"]


def test_pypi_source_is_found_by_sha256_on_a_pep_503_index(
    tmp_path: Path, http_dir: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain static server of PEP 503 HTML pages (http.server answers `…/demo-pkg/` with
    its index.html as text/html whatever the Accept header asks for)."""
    files = http_dir.root / "files"
    files.mkdir()
    sha = make_sdist(files / "demo_pkg-1.0.0.tar.gz", {"setup.py": "print(2)\n"},
                     top="demo_pkg-1.0.0")
    page = http_dir.root / "simple" / "demo-pkg"
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        "<!DOCTYPE html><html><body><h1>Links for demo-pkg</h1>\n"
        f'<a href="../../files/demo_pkg-1.0.0.tar.gz#sha256={sha}" '
        'data-requires-python="&gt;=3.8">demo_pkg-1.0.0.tar.gz</a><br>\n</body></html>\n')
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", f"{http_dir.url}/simple")
    root = fetch(PypiSource(project="demo_pkg", version="1.0.0", sha256=sha), tmp_path / "w",
                 tmp_path / "cache")
    assert (root / "setup.py").read_text() == "print(2)\n"

    with pytest.raises(SourceError) as caught:
        fetch(PypiSource(project="demo-pkg", version="1.0.0", sha256="cd" * 32), tmp_path / "x",
              tmp_path / "cache")
    assert caught.value.message == (f"no sdist of demo-pkg 1.0.0 on {http_dir.url}/simple has "
                                    f"sha256 {'cd' * 32}")
    assert caught.value.hint == f"sdists there: demo_pkg-1.0.0.tar.gz sha256={sha}"


def git(*args: str, cwd: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def repo_with_two_commits(repo: Path) -> tuple[str, str]:
    """A local repository whose setup.py says version 1, then 2; tag v1.0 on the first."""
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "setup.py").write_text("version = 1\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "v1", cwd=repo)
    git("tag", "v1.0", cwd=repo)
    first = git("rev-parse", "HEAD", cwd=repo)
    (repo / "setup.py").write_text("version = 2\n")
    git("commit", "-qam", "v2", cwd=repo)
    return first, git("rev-parse", "HEAD", cwd=repo)


def test_git_source_is_checked_out_at_the_pinned_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    pinned, _ = repo_with_two_commits(repo)

    root = fetch(GitSource(url=str(repo), commit=pinned), tmp_path / "work", tmp_path / "cache")
    assert (root / "setup.py").read_text() == "version = 1\n"

    missing = "0123456789" * 4
    with pytest.raises(SourceError) as caught:
        fetch(GitSource(url=str(repo), commit=missing), tmp_path / "work2", tmp_path / "cache")
    assert caught.value.message == f"commit {missing} is not in {repo}"


def test_local_source_is_copied_without_build_leftovers(tmp_path: Path) -> None:
    src = tmp_path / "pkg"
    (src / "build").mkdir(parents=True)
    (src / "setup.py").write_text("x\n")
    (src / "build" / "stale.o").write_text("o")
    root = fetch(LocalSource(path=src), tmp_path / "work", tmp_path / "cache")
    assert (root / "setup.py").read_text() == "x\n"
    assert not (root / "build").exists()
    (root / "setup.py").write_text("patched\n")
    assert (src / "setup.py").read_text() == "x\n"


def test_git_tag_must_name_the_pinned_commit_and_a_moved_tag_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    first, second = repo_with_two_commits(repo)
    cache = tmp_path / "cache"

    root = fetch(GitSource(url=str(repo), commit=first, tag="v1.0"), tmp_path / "w1", cache)
    assert (root / "setup.py").read_text() == "version = 1\n"

    git("tag", "-f", "v1.0", cwd=repo)  # moved upstream after the mirror was made
    with pytest.raises(SourceError) as moved:
        fetch(GitSource(url=str(repo), commit=first, tag="v1.0"), tmp_path / "w2", cache)
    assert moved.value.message == (f"tag v1.0 of {repo} is commit {second}, but the recipe pins "
                                   f"{first}")
    assert moved.value.hint == ("the tag was moved upstream: review the new commit before you "
                                "pin it (its patches may no longer apply)")
    assert not (tmp_path / "w2" / "src").exists()  # nothing checked out

    with pytest.raises(SourceError) as missing:
        fetch(GitSource(url=str(repo), commit=first, tag="v9"), tmp_path / "w3", cache)
    assert missing.value.message == f"tag v9 is not in {repo}"


def pip_default_index() -> str:
    """pip's own default index, as its help text states it."""
    text = subprocess.run([sys.executable, "-m", "pip", "download", "--help"],
                          capture_output=True, text=True, check=True).stdout
    found = re.search(r"--index-url <url>\s+Base URL of the Python Package Index\s+\(default\s+"
                      r"(\S+)\)", text)
    assert found is not None, text
    return found[1]


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


@pytest.fixture
def pip_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Only this test's pip configuration file (the machine's are left out)."""
    for name in ("WHEELSMITH_INDEX_URL", "PIP_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "pip.conf"
    config.write_text("")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    return config


def test_the_default_index_is_pip_s_own(pip_config: Path) -> None:
    assert package_index() == PackageIndex(pip_default_index().rstrip("/"), "pip's default")


def test_the_index_follows_pip_s_configuration_and_pip_index_url(
        pip_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pip_config.write_text("[global]\nindex-url = http://mirror.invalid/pypi/simple/\n")
    assert package_index() == PackageIndex("http://mirror.invalid/pypi/simple",
                                           "pip's configuration")
    monkeypatch.setenv("PIP_INDEX_URL", "http://other.invalid/simple")
    assert package_index() == PackageIndex("http://other.invalid/simple", "PIP_INDEX_URL")
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", "http://own.invalid/simple/")
    assert package_index() == PackageIndex("http://own.invalid/simple", "WHEELSMITH_INDEX_URL")


def test_a_configured_index_that_does_not_answer_is_one_line_with_the_fix(
        tmp_path: Path, pip_config: Path) -> None:
    url = closed_port_url()
    pip_config.write_text(f"[global]\nindex-url = {url}\n")
    result = wheelsmith("outdated", cwd=tmp_path)
    assert result.returncode == 5
    assert result.stderr.splitlines() == [
        f"error: the package index {url} (from pip's configuration) does not answer: [Errno "
        "111] Connection refused",
        "hint: fix index-url in pip's configuration (`pip config list` shows it), or set "
        "WHEELSMITH_INDEX_URL to a simple index (PEP 503 or PEP 691) that answers"]


@pytest.mark.parametrize(("filename", "expected"), [
    ("torch_scatter-2.1.2.tar.gz", True),
    ("torch-scatter-2.1.2.tar.gz", True),  # the spelling before PEP 625 (issue 22's corpus)
    ("Torch.Scatter-2.1.2.zip", True),
    ("torch_scatter-2.1.20.tar.gz", False),
    ("torch_scatter_extra-2.1.2.tar.gz", False),
    ("torch_scatter-2.1.2-cp311-cp311-linux_x86_64.whl", False),
])
def test_an_sdist_is_found_under_either_spelling_of_its_project(filename: str,
                                                                 expected: bool) -> None:
    assert sdist_of(filename, "torch-scatter", "2.1.2") is expected
