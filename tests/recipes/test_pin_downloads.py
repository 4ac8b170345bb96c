"""`recipe new` pins what a CMake build would download (FetchContent_Declare with a URL or a git
repository) as a carried source of the new version, from evidence only: the sha256 the
declaration states or that of the archive it downloaded once, the commit the declaration states
or the one the repository answers for its tag. A location that is computed or that cannot be
reached stays a `carry needed` finding saying why. Real HTTP on 127.0.0.1 and real git
repositories; generated declarations."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import Served, header_tarball
from tests.recipes.test_fetch import git
from wheelsmith.recipes import fetch
from wheelsmith.recipes.sources import CarriedSource, GitSource, UrlSource
from wheelsmith.scaffold import pindownloads
from wheelsmith.scaffold.pindownloads import Declared, Pin

NAME = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
SPACE = st.sampled_from([" ", "\n  ", "\t", "\n    # a comment (with parens)\n  "])
SHA = st.from_regex(r"[0-9a-f]{64}", fullmatch=True)
COMMIT = st.from_regex(r"[0-9a-f]{40}", fullmatch=True)


def quoted(value: str, quote: bool) -> str:
    return f'"{value}"' if quote else value


@given(name=NAME, space=SPACE, quote=st.booleans(), sha=SHA,
       extra=st.sampled_from(["", "DOWNLOAD_EXTRACT_TIMESTAMP TRUE", "SYSTEM",
                              "FIND_PACKAGE_ARGS 2.6 CONFIG"]))
def test_a_declared_url_with_its_stated_sha256_is_read_whole(
        name: str, space: str, quote: bool, sha: str, extra: str) -> None:
    url = f"https://host.invalid/{name}/v1.0.tar.gz"
    text = (f"include(FetchContent)\nFetchContent_Declare({space}{name}{space}URL "
            f"{quoted(url, quote)}{space}URL_HASH {quoted(f'SHA256={sha}', quote)}{space}"
            f"{extra})\nFetchContent_MakeAvailable({name})\n")
    [(offset, declaration)] = pindownloads.declared(text)
    assert text[offset:].startswith("FetchContent_Declare(")
    assert declaration == Declared(name, {"URL": url, "URL_HASH": f"SHA256={sha}"})


@given(name=NAME, url_var=NAME, hash_var=NAME, sha=SHA, quote=st.booleans(),
       case=st.sampled_from(["set", "SET", "  Set"]))
def test_a_location_the_file_sets_once_is_read_through_its_variable(
        name: str, url_var: str, hash_var: str, sha: str, quote: bool, case: str) -> None:
    """fast-rnnt's pybind11.cmake: `set(pybind11_URL "https://...")` then `URL
    ${pybind11_URL}`."""
    url_var, hash_var = f"U_{url_var}", f"H_{hash_var}"
    url = f"https://host.invalid/{name}.tar.gz"
    text = (f"{case}({url_var} {quoted(url, quote)})\n{case}({hash_var} "
            f"{quoted(f'SHA256={sha}', quote)})\nFetchContent_Declare({name}\n  URL "
            f"${{{url_var}}}\n  URL_HASH ${{{hash_var}}})\n")
    [(_, declaration)] = pindownloads.declared(text)
    assert declaration.values == {"URL": url, "URL_HASH": f"SHA256={sha}"}


@given(how=st.sampled_from(["set(V https://a.invalid/x.zip)\nset(V https://b.invalid/y.zip)\n",
                            "set(V https://a.invalid/x.zip PARENT_SCOPE)\n",
                            "set(V ${BASE}/x.zip)\n", "set(V CACHE STRING x)\n", ""]))
def test_a_variable_set_twice_computed_or_not_at_all_stays_computed(
        tmp_path_factory: pytest.TempPathFactory, how: str) -> None:
    [(_, declaration)] = pindownloads.declared(how + "FetchContent_Declare(dep URL ${V})\n")
    assert declaration.values == {"URL": "${V}"}
    assert pindownloads.pin("x:1", declaration, tmp_path_factory.mktemp("c")).why == \
        "its location is computed (${V}): pin it by hand"


@given(name=NAME, sha=SHA.map(str.upper), commit=COMMIT)
def test_what_the_declaration_states_is_pinned_without_reaching_anything(
        tmp_path_factory: pytest.TempPathFactory, name: str, sha: str, commit: str) -> None:
    """A stated sha256 or 40-digit commit is the pin: the closed port it names is never
    asked."""
    cache = tmp_path_factory.mktemp("cache")
    closed = f"http://127.0.0.1:{closed_port()}/{name}.tar.gz"
    by_url = pindownloads.pin("CMakeLists.txt:3", Declared(name, {
        "URL": closed, "URL_HASH": f"SHA256={sha}"}), cache)
    by_git = pindownloads.pin("CMakeLists.txt:9", Declared(name, {
        "GIT_REPOSITORY": closed, "GIT_TAG": commit}), cache)
    into = PurePosixPath("third_party") / name
    variable = f"FETCHCONTENT_SOURCE_DIR_{name.upper()}"
    assert by_url == Pin("CMakeLists.txt:3", CarriedSource(
        into=into, source=UrlSource(url=closed, sha256=sha.lower()), cmake=variable))
    assert by_git == Pin("CMakeLists.txt:9", CarriedSource(
        into=into, source=GitSource(url=closed, commit=commit), cmake=variable))


@given(computed=st.sampled_from(["${DEP_URL}", "https://h.invalid/${DEP_VERSION}.zip",
                                 "$ENV{DEP_MIRROR}/dep.zip"]),
       key=st.sampled_from(["URL", "GIT_REPOSITORY"]))
def test_a_computed_location_is_left_to_the_user_saying_why(
        tmp_path_factory: pytest.TempPathFactory, computed: str, key: str) -> None:
    made = pindownloads.pin("cmake/deps.cmake:12", Declared("dep", {key: computed}),
                            tmp_path_factory.mktemp("cache"))
    assert made == Pin("cmake/deps.cmake:12", None,
                       f"its location is computed ({computed}): pin it by hand")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_archive_is_downloaded_once_and_pinned_by_its_sha256(
        tmp_path: Path, http_dir: Served) -> None:
    """The pin is the archive's own sha256, and the file waits in the download cache where the
    check's build looks for it: one request."""
    tarball = header_tarball(http_dir.root, "dep", 41)
    made = pindownloads.pin("CMakeLists.txt:2", Declared("dep", {
        "URL": f"{http_dir.url}/{tarball.name}"}), tmp_path / "cache")
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert made.carried is not None
    assert made.carried.source == UrlSource(url=f"{http_dir.url}/{tarball.name}", sha256=digest)
    assert fetch.cached_path(tmp_path / "cache", digest).read_bytes() == tarball.read_bytes()
    fetch.download(UrlSource(url=f"{http_dir.url}/{tarball.name}", sha256=digest),
                   tmp_path / "cache")
    assert http_dir.requests == [f"/{tarball.name}"]


def test_an_unreachable_archive_stays_a_finding_that_says_why(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/dep.tar.gz"
    made = pindownloads.pin("CMakeLists.txt:2", Declared("dep", {"URL": url}), tmp_path)
    assert made.carried is None
    assert made.why.startswith("recipe new could not reach it: ")
    assert not list((tmp_path / "downloads").rglob("*.tar.gz"))


def served_repository(work: Path, http_dir: Served, kind: str) -> tuple[str, str, str]:
    """A repository of two commits (tag v1.0 and branch `stable` on the first) served by the
    HTTP server on 127.0.0.1 as git's dumb protocol serves one: (its URL, first, head)."""
    repo = work / "dep"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    first = ""
    for n in (1, 2):
        (repo / "v.h").write_text(f"#define V {n}\n")
        git("add", ".", cwd=repo)
        git("commit", "-qm", f"v{n}", cwd=repo)
        if n == 1:
            first = git("rev-parse", "HEAD", cwd=repo)
            git("tag", *(["-a", "-m", "one"] if kind == "annotated tag" else []), "v1.0",
                cwd=repo)
            git("branch", "stable", cwd=repo)
    bare = http_dir.root / "dep.git"
    git("clone", "-q", "--bare", str(repo), str(bare), cwd=work)
    git("update-server-info", cwd=bare)
    return f"{http_dir.url}/dep.git", first, git("rev-parse", "HEAD", cwd=repo)


@pytest.mark.parametrize("kind", ["annotated tag", "lightweight tag", "branch", "no GIT_TAG"])
def test_a_git_tag_is_pinned_to_the_commit_the_repository_answers(
        tmp_path: Path, http_dir: Served, kind: str) -> None:
    url, first, head = served_repository(tmp_path, http_dir, kind)
    tag = {"annotated tag": "v1.0", "lightweight tag": "v1.0", "branch": "stable"}.get(kind)
    made = pindownloads.pin("CMakeLists.txt:5", Declared("dep", {
        "GIT_REPOSITORY": url, **({"GIT_TAG": tag} if tag else {})}), tmp_path)
    assert made.carried is not None, made.why
    assert made.carried.source == GitSource(
        url=url, commit=head if tag is None else first,
        tag=tag if kind.endswith("tag") else None)


def test_a_tag_the_repository_lacks_stays_a_finding(tmp_path: Path, http_dir: Served) -> None:
    url, _, _ = served_repository(tmp_path, http_dir, "lightweight tag")
    made = pindownloads.pin("CMakeLists.txt:5", Declared("dep", {
        "GIT_REPOSITORY": url, "GIT_TAG": "v9.9"}), tmp_path)
    assert made == Pin("CMakeLists.txt:5", None,
                       f"recipe new could not reach it: {url} has no tag or branch v9.9")


@given(where=st.sampled_from(["file:///etc/passwd", "/home/u/deps/dep.tar.gz", "../dep",
                              "FILE:///x.zip", "C:/deps/dep.zip", "dep.tar.gz"]),
       key=st.sampled_from(["URL", "GIT_REPOSITORY"]))
def test_a_location_on_this_machine_is_not_read_on_an_sdists_word(
        tmp_path_factory: pytest.TempPathFactory, where: str, key: str) -> None:
    cache = tmp_path_factory.mktemp("cache")
    made = pindownloads.pin("CMakeLists.txt:2", Declared("dep", {key: where}), cache)
    assert made == Pin("CMakeLists.txt:2", None, f"it names a location on this machine "
                       f"({where}), which recipe new does not read on an sdist's word: carry "
                       "it by hand")
    assert not any(cache.rglob("*"))
