"""`wheelsmith recipe new`: a first recipe for a package, read from its sdist on the index.

The role of conda-forge's grayskull and `spack create`: pick the sdist (pinned by the sha256 the
index lists), unpack it (checked like every download) and read its setup.py without running it:
the package's force-build variable, the hard-coded `-gencode` family, the sources its
extensions compile and whether the sdist holds them, and which of the standard patches the
package needs. The recipe is written into the user's recipe repository, its findings beside it.
"""

from __future__ import annotations

import ast
import email.parser
import logging
import re
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelsmith import locations
from wheelsmith.build import orchestrate
from wheelsmith.build.request import BuildRequest
from wheelsmith.errors import SourceError, UsageError, WheelsmithError
from wheelsmith.files import atomic_write_text
from wheelsmith.recipes import fetch, repos
from wheelsmith.recipes.model import PypiSource
from wheelsmith.toolchain import select
from wheelsmith.toolchain.venv import MARKER, venv_root

log = logging.getLogger(__name__)

SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
_GENCODE_RE = re.compile(r"arch=compute_(\d+[af]?),code=sm_\d+[af]?")
_FORCE_BUILD_RE = re.compile(r"""["']([A-Z][A-Z0-9_]*_FORCE_BUILD)["']""")
_ARCH_KNOB_RE = re.compile(r"""["']([A-Z][A-Z0-9_]*_CUDA_ARCHS?)["']""")  # its own knob
_DOWNLOAD_RE = re.compile(r"urlretrieve|urlopen|requests\.get")


@dataclass(frozen=True, slots=True)
class Sdist:
    project: str
    version: str
    filename: str
    sha256: str


@dataclass(frozen=True, slots=True)
class StandardPatch:
    """One of the patches wheelsmith's own recipes carry, by what it fixes."""

    stem: str  # the file name after NNNN-
    reason: str

    def example(self) -> str | None:
        """A shipped patch of this kind to start from (`patches/PKG/VERSION/NNNN-stem.patch`)."""
        root = locations.project_root()
        found = sorted(root.glob(f"patches/*/*/[0-9][0-9][0-9][0-9]-{self.stem}.patch"))
        return str(found[-1].relative_to(root)) if found else None


ARCH_PATCH = StandardPatch("honour-torch-cuda-arch-list",
                           "setup.py passes its own -gencode list and ignores "
                           "TORCH_CUDA_ARCH_LIST")
NVCC_PATCH = StandardPatch("clear-error-without-nvcc",
                           "setup.py sets bare_metal_version only when it finds nvcc and uses "
                           "it anyway (NameError without nvcc)")
DOWNLOAD_PATCH = StandardPatch("never-download-prebuilt-wheel",
                               "setup.py downloads a prebuilt wheel unless forced to build")
PSUTIL_PATCH = StandardPatch("no-psutil-at-build-time", "setup.py imports psutil to size its jobs")


@dataclass(frozen=True, slots=True)
class Findings:
    """What setup.py says about building the package (read, never run)."""

    force_build: str | None  # the package's <PKG>_FORCE_BUILD variable
    gencode: tuple[str, ...]  # the hard-coded -gencode family: compute capabilities, "90"
    reads_arch_list: bool  # setup.py reads TORCH_CUDA_ARCH_LIST itself
    arch_knob: str | None  # its own arch variable (flash-attn's FLASH_ATTN_CUDA_ARCHS)
    extensions: tuple[str, ...]  # extension module names
    sources: tuple[str, ...]  # the sources they compile, relative to setup.py
    missing: tuple[str, ...]  # of those, the ones the sdist does not hold
    patches: tuple[StandardPatch, ...]  # the standard patches it needs


@dataclass(frozen=True, slots=True)
class Metadata:
    summary: str
    homepage: str | None
    packages: tuple[str, ...]  # top-level import names


# --- the sdist -------------------------------------------------------------------------------


def parse_request(text: str) -> tuple[str, str | None]:
    """NAME[==VERSION] as the user typed it."""
    name, _, version = text.partition("==")
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", name):
        raise UsageError(f"'{text}' is not a package name (NAME or NAME==VERSION)")
    return name, version or None


def choose_sdist(project: str, version: str | None) -> Sdist:
    """The sdist of `version` (default: the newest final release that has one) and the sha256
    the index lists for it."""
    page, data = fetch.simple_page(project, missing_ok=True)
    if data is None:
        raise UsageError(f"{fetch.index_url()} has no project '{project}'",
                         hint="check the name (the index's own spelling), or the index pip "
                              "uses (`pip config list`)")
    sdists: dict[Version, dict[str, Any]] = {}
    for file in data.get("files", []):
        found = _sdist_version(project, file["filename"])
        if found is not None and file.get("hashes", {}).get("sha256"):
            sdists.setdefault(found, file)
    if version is not None:
        chosen = next((v for v in sdists if v == _version(version)), None)
        if chosen is None:
            listed = ", ".join(str(v) for v in sorted(sdists)[-8:]) or "none"
            raise UsageError(f"{page} has no sdist of {project} {version}",
                             hint=f"versions with an sdist there: {listed}")
    else:
        finals = [v for v in sdists if not v.is_prerelease]
        if not finals:
            raise UsageError(f"{page} has no sdist of {project}",
                             hint="wheelsmith builds from sources: give a git source in the "
                                  "recipe instead")
        chosen = max(finals)
    file = sdists[chosen]
    spelled = re.sub(r"\.(tar\.gz|zip)$", "", file["filename"]).rpartition("-")[2]
    return Sdist(project, spelled, file["filename"], file["hashes"]["sha256"])


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion as exc:
        raise UsageError(f"'{text}' is not a version") from exc


def _sdist_version(project: str, filename: str) -> Version | None:
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            name, _, version = filename[: -len(suffix)].rpartition("-")
            if canonicalize_name(name) == canonicalize_name(project):
                try:
                    return Version(version)
                except InvalidVersion:
                    return None
    return None


def unpacked(sdist: Sdist, work: Path) -> Path:
    """The sdist, downloaded into the cache (sha256 checked) and unpacked into `work`."""
    source = PypiSource(project=sdist.project, version=sdist.version, sha256=sdist.sha256)
    return fetch.fetch(source, work, locations.cache_dir())


# --- reading setup.py ------------------------------------------------------------------------


def read_metadata(tree: Path) -> Metadata:
    info = tree / "PKG-INFO"
    message = email.parser.Parser().parsestr(info.read_text(errors="replace") if info.is_file()
                                             else "")
    homepage = message.get("Home-page")
    for url in message.get_all("Project-URL") or []:
        label, _, link = url.partition(",")
        if homepage is None and label.strip().lower() in ("homepage", "source", "repository"):
            homepage = link.strip()
    listed = next(tree.glob("*.egg-info/top_level.txt"), None)  # what setup.py installs
    packages = sorted(line.strip() for line in listed.read_text().splitlines() if line.strip()) \
        if listed is not None else sorted(p.parent.name for p in tree.glob("*/__init__.py"))
    return Metadata(str(message.get("Summary") or "").strip(), homepage, tuple(packages))


def analyse(tree: Path) -> Findings:
    """Read `tree`/setup.py (without running it)."""
    setup = tree / "setup.py"
    if not setup.is_file():
        held = ", ".join(sorted(p.name for p in tree.iterdir()))
        raise SourceError(f"the sdist has no setup.py (it holds {held})",
                          hint="wheelsmith's recipes build torch CUDA extensions from setup.py; "
                               "write the recipe by hand (docs/recipes.md)")
    text = setup.read_text(errors="replace")
    try:
        module = ast.parse(text)
    except SyntaxError as exc:
        raise SourceError(f"cannot read {setup.name}: {exc}") from exc
    extensions, sources = _extensions(module)
    missing = tuple(s for s in sources if not _present(tree, s))
    gencode = tuple(sorted(set(_GENCODE_RE.findall(text)), key=_cc_key))
    reads_arch_list = "TORCH_CUDA_ARCH_LIST" in text
    knob = _ARCH_KNOB_RE.search(text)
    force = _FORCE_BUILD_RE.search(text)
    patches = []
    if gencode and not reads_arch_list and knob is None:
        patches.append(ARCH_PATCH)
    if _used_unset(module, "bare_metal_version"):
        patches.append(NVCC_PATCH)
    if _DOWNLOAD_RE.search(text):
        patches.append(DOWNLOAD_PATCH)
    if re.search(r"^\s*import psutil", text, re.MULTILINE):
        patches.append(PSUTIL_PATCH)
    return Findings(force[1] if force else None, gencode, reads_arch_list,
                    knob[1] if knob else None, extensions, sources, missing, tuple(patches))


def _cc_key(cc: str) -> tuple[int, str]:
    digits = cc.rstrip("af")
    return int(digits), cc[len(digits):]


def _dotted(cc: str) -> str:
    """A -gencode compute capability as --arch spells it: "90a" -> "9.0a"."""
    digits = cc.rstrip("af")
    return f"{int(digits) // 10}.{int(digits) % 10}{cc[len(digits):]}"


def _present(tree: Path, source: str) -> bool:
    if any(ch in source for ch in "*?["):
        return next(tree.glob(source), None) is not None
    return (tree / source).is_file()


def _extensions(module: ast.Module) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Extension names and the source files named in their `sources=` (string constants,
    os.path.join/Path parts joined, the build directory's own variable left out)."""
    names: list[str] = []
    sources: list[str] = []
    for node in ast.walk(module):
        if not (isinstance(node, ast.Call) and _callee(node).endswith("Extension")):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        name = keywords.get("name", node.args[0] if node.args else None)
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            names.append(name.value)
        given = keywords.get("sources", node.args[1] if len(node.args) > 1 else None)
        if given is not None:
            sources += [s for s in _strings(given) if s.endswith(SOURCE_SUFFIXES)]
    return tuple(dict.fromkeys(names)), tuple(dict.fromkeys(sources))


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _strings(node: ast.expr) -> list[str]:
    """The paths an expression spells out: constants, and joins of constant parts."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [s for item in node.elts for s in _strings(item)]
    if isinstance(node, ast.BinOp):
        return _strings(node.left) + _strings(node.right)
    if isinstance(node, ast.Call) and _callee(node) in ("join", "Path", "str", "glob"):
        parts = [a.value for a in node.args
                 if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        return ["/".join(parts)] if parts else []
    return []


def _used_unset(module: ast.Module, name: str) -> bool:
    """`name` is assigned only under `if CUDA_HOME is not None:` and read outside it."""
    guarded: set[int] = set()
    assigned = False
    for node in ast.walk(module):
        if isinstance(node, ast.If) and "CUDA_HOME is not None" in ast.unparse(node.test):
            for inner in ast.walk(node):
                guarded.add(id(inner))
                if isinstance(inner, ast.Name) and inner.id == name and isinstance(
                        inner.ctx, ast.Store):
                    assigned = True
    return assigned and any(
        isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
        and id(node) not in guarded for node in ast.walk(module))


# --- the recipe ------------------------------------------------------------------------------


def git_form(sdist: Sdist, homepage: str | None) -> list[str]:
    """The source block that builds from the repository instead (its commit to fill in)."""
    url = homepage if homepage and urllib.parse.urlparse(homepage).scheme else "REPOSITORY-URL"
    return [f"git: {url}",
            f"commit: COMMIT  # the full 40-digit commit of the v{sdist.version} tag",
            f"tag: v{sdist.version}"]


def render(sdist: Sdist, metadata: Metadata, findings: Findings) -> str:
    lines = [f"# Written by `wheelsmith recipe new {sdist.project}=={sdist.version}` from "
             f"{sdist.filename}.", *[f"# {line}" for line in report_lines(sdist, metadata,
                                                                          findings)],
             f"package: {canonicalize_name(sdist.project)}"]
    if metadata.summary:
        lines.append(f"summary: {_quoted(metadata.summary)}")
    if metadata.homepage:
        lines.append(f"homepage: {metadata.homepage}")
    if findings.arch_knob and findings.gencode:
        supported = [_dotted(cc) for cc in findings.gencode]
        default = "12.0" if "12.0" in supported else supported[-1]
        lines += ["arch:", f"  env: {findings.arch_knob}", "  format: numbers",
                  f'  default: ["{default}"]',
                  f"  supported: [{', '.join(f'{_quoted(a)}' for a in supported)}]"]
    elif findings.extensions:
        lines += ["arch:", "  env: TORCH_CUDA_ARCH_LIST", "  format: torch",
                  '  default: ["12.0"]']
    else:
        lines.append("kind: pure")
    if findings.force_build:
        lines += ["build:", "  env:", f'    {findings.force_build}: "TRUE"']
    imports = [*metadata.packages, *findings.extensions]
    if imports:
        lines += ["smoke:", f"  import: [{', '.join(imports)}]"]
    lines += ["versions:", f'  - version: "{sdist.version}"', "    source:",
              f"      pypi: {sdist.project}", f"      sha256: {sdist.sha256}"]
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def report_lines(sdist: Sdist, metadata: Metadata, findings: Findings) -> list[str]:
    """The findings, one sentence a line (printed, and kept as comments in the recipe)."""
    lines = [f"sdist: {sdist.filename} sha256 {sdist.sha256}"]
    if findings.force_build:
        lines.append(f"force-build variable: {findings.force_build} (set to TRUE in build.env)")
    if findings.gencode:
        listed = ", ".join(findings.gencode)
        lines.append(f"hard-coded -gencode family: {listed}" + (
            "" if not findings.reads_arch_list else " (TORCH_CUDA_ARCH_LIST is read too)"))
    if findings.arch_knob:
        lines.append(f"arch variable: {findings.arch_knob} (the package's own; arch.env, "
                     "format numbers, supported: its -gencode family)")
    if findings.missing:
        lines.append(f"the sdist lacks the sources its extensions compile: "
                     f"{', '.join(findings.missing)}; build from the repository instead:")
        lines += ["  source:", *[f"    {line}" for line in git_form(sdist, metadata.homepage)]]
    elif findings.sources:
        lines.append(f"sources: the sdist holds all {len(findings.sources)} the extensions "
                     "compile")
    elif findings.extensions:
        lines.append("sources: setup.py computes them; check the sdist holds them")
    for patch in findings.patches:
        example = patch.example()
        lines.append(f"patch needed: {patch.stem}: {patch.reason}" + (
            f" (start from {example})" if example else ""))
    if not findings.patches:
        lines.append("patches: none of the standard ones is needed")
    return lines


def write(sdist: Sdist, metadata: Metadata, findings: Findings, repo: Path) -> Path:
    """The recipe in `repo`/recipes/NAME.yaml; an existing one is never replaced."""
    file = repo / "recipes" / f"{canonicalize_name(sdist.project)}.yaml"
    if file.exists():
        raise UsageError(f"{file} exists already",
                         hint=f"add version {sdist.version} to it by hand, or remove it first")
    file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(file, render(sdist, metadata, findings))
    log.info("wrote %s", file)
    return file


# --- the configure-only check ----------------------------------------------------------------


def configure_check(sdist: Sdist, repo: Path, work: Path) -> str | None:
    """The new recipe's configure-only build (setup.py up to its build.ninja, then the pre-build
    check), run only when it is cheap: the default toolchain is already here. Its outcome in
    one line; None when it was not run."""
    profile = select.profile_named(None)
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not (venv_root(profile, python, locations.cache_dir()) / MARKER).is_file():
        log.info("configure-only check skipped: the %s toolchain is not created here", profile.name)
        return None
    repos.use_option([repo])
    request = BuildRequest(recipe=sdist.project, version=sdist.version,
                                    configure_only=True, work_dir=work / "build",
                                    out_dir=work / "out")
    try:
        result = orchestrate.build(request)
    except WheelsmithError as exc:
        return f"configure-only check: {exc.message}"
    targets = "; ".join(f"SASS {', '.join(c['sass'])}" for c in result.configured)
    return f"configure-only check: build.ninja targets {targets or 'no CUDA code'}"
