"""The wheel's software bill of materials (PEP 770): a CycloneDX 1.6 JSON document in
`<dist-info>/sboms/<name>.cdx.json`, made from the provenance record alone.

It names the wheel (its PyPI package URL), the source it was built from (pedigree: the sdist
with its sha256, the recipe's patches with theirs), what builds it (nvcc, torch, pinned as the
toolchain pins them), what it needs at run time (torch; the CUDA runtime its objects link,
or the one linked into them; the host libraries it was built against), and what the source
carries vendored where there is evidence of it (CUTLASS's `include/cutlass/version.h`). Same
provenance, same bytes: no timestamp, no serial number, keys sorted.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from wheelsmith.wheelfile import WheelName

SPEC = "1.6"
WALK_DEPTH = 6  # directories below the source's top in which vendored trees are looked for
CUTLASS = re.compile(r"#define\s+CUTLASS_(MAJOR|MINOR|PATCH)\s+(\d+)")


def file_name(name: WheelName) -> str:
    """Where in the .dist-info the SBOM goes."""
    return f"sboms/{canonicalize_name(name.name)}.cdx.json"


def purl(project: str, version: str) -> str:
    """The package URL of a PyPI release (`+` of a local label escaped, as purl asks)."""
    return f"pkg:pypi/{canonicalize_name(project)}@{urllib.parse.quote(version, safe='.-_~')}"


def document(name: WheelName, provenance: dict[str, Any]) -> bytes:
    """The CycloneDX document of the wheel `name` built as `provenance` records."""
    root = purl(name.name, str(name.version))
    toolchain = provenance.get("toolchain") or {}
    pins: dict[str, str] = {canonicalize_name(re.split(r"[=<>!~ ]", pin)[0].split("[")[0]): pin
            for pin in toolchain.get("pins", [])}
    components = [*_build_tools(provenance, pins), *_runtime(provenance, pins),
                  *_libraries(provenance), *_vendored(provenance), *_patches(provenance)]
    data = {
        "bomFormat": "CycloneDX", "specVersion": SPEC, "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "wheelsmith",
                                      "version": str(provenance.get("tool", "")).split()[-1]
                                      if provenance.get("tool") else ""}]},
            "component": {"bom-ref": root, "type": "library", "name": name.name,
                          "version": str(name.version), "purl": root,
                          "pedigree": _pedigree(provenance)}},
        "components": components,
        "dependencies": [{"ref": root, "dependsOn": sorted(
            c["bom-ref"] for c in components if c.get("scope") == "required")}],
    }
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def _hashes(sha256: str | None) -> list[dict[str, str]]:
    return [{"alg": "SHA-256", "content": sha256}] if sha256 else []


def _pedigree(provenance: dict[str, Any]) -> dict[str, Any]:
    """The sdist (or repository) the wheel was built from, and the patches applied to it."""
    source = provenance.get("source") or {}
    recipe = provenance.get("recipe") or {}
    version = str(recipe.get("version", ""))
    if "pypi" in source:
        ancestor = {"type": "library", "name": source["pypi"], "version": version,
                    "bom-ref": purl(source["pypi"], version) + "?type=sdist",
                    "purl": purl(source["pypi"], version), "hashes": _hashes(source.get("sha256"))}
    else:
        where = source.get("url") or source.get("git") or source.get("path") or "?"
        ancestor = {"type": "library", "name": recipe.get("package", "?"), "version": version,
                    "bom-ref": f"source:{where}", "hashes": _hashes(source.get("sha256")),
                    "externalReferences": [{"type": "distribution", "url": where}]}
        if source.get("commit"):
            ancestor["properties"] = [{"name": "wheelsmith:commit", "value": source["commit"]}]
    patches = [{"type": "unofficial", "diff": {"url": f"patches/{p['file']}"}}
               for p in provenance.get("patches", [])]
    return {"ancestors": [ancestor], "patches": patches}


def _patches(provenance: dict[str, Any]) -> list[dict[str, Any]]:
    """Each patch applied to the source, with its sha256 (the pedigree names it)."""
    return [{"type": "file", "name": f"patches/{p['file']}", "bom-ref": f"patch:{p['file']}",
             "hashes": _hashes(p["sha256"]), "scope": "excluded",
             "properties": [{"name": "wheelsmith:role",
                             "value": "a patch applied to the source before the build"}]}
            for p in provenance.get("patches", [])]


def _pinned(project: str, pins: dict[str, str], fallback: str | None) -> str | None:
    """The version the toolchain pins `project` at ("==" or "==="), else `fallback`."""
    pin = pins.get(canonicalize_name(project), "")
    match = re.search(r"===?\s*([^\s;,]+)", pin)
    return match[1] if match else fallback


def _component(kind: str, project: str, version: str | None, scope: str,
               role: str) -> dict[str, Any]:
    ref = purl(project, version) if version else f"pkg:pypi/{canonicalize_name(project)}"
    return {"type": kind, "name": project, "version": version or "", "bom-ref": ref,
            "purl": ref, "scope": scope, "properties": [{"name": "wheelsmith:role",
                                                          "value": role}]}


def _build_tools(provenance: dict[str, Any], pins: dict[str, str]) -> list[dict[str, Any]]:
    nvcc = provenance.get("nvcc")
    if not nvcc:
        return []
    return [_component("application", "nvidia-cuda-nvcc",
                       _pinned("nvidia-cuda-nvcc", pins, str(nvcc)), "excluded",
                       f"the CUDA compiler (nvcc {nvcc})")]


def _runtime(provenance: dict[str, Any], pins: dict[str, str]) -> list[dict[str, Any]]:
    """torch (built against, required at run time) and the CUDA runtime its objects link."""
    toolchain = provenance.get("toolchain") or {}
    found = []
    if toolchain.get("torch"):
        found.append(_component("library", "torch", _pinned("torch", pins, toolchain["torch"]),
                                "required", "built against it; required at run time"))
    runtimes = {o.get("cuda_runtime") for o in (provenance.get("audit") or {}).get("objects", [])}
    if any(r and r != "static" for r in runtimes):
        found.append(_component("library", "nvidia-cuda-runtime",
                                _pinned("nvidia-cuda-runtime", pins, None), "required",
                                "the CUDA runtime its objects link: " + ", ".join(
                                    sorted(r for r in runtimes if r and r != "static"))))
    if "static" in runtimes:
        found.append({"type": "library", "name": "cudart_static",
                      "version": _pinned("nvidia-cuda-runtime", pins, None) or "",
                      "bom-ref": "cudart_static", "scope": "required",
                      "properties": [{"name": "wheelsmith:role",
                                      "value": "the CUDA runtime linked into its objects"}]})
    return found


def _libraries(provenance: dict[str, Any]) -> list[dict[str, Any]]:
    """The host libraries it was built against (builder/hostlibs.py): a wheel's, required at
    run time; an archive's, by its URL and sha256."""
    found = []
    for library in provenance.get("libraries", []):
        role = f"a host library the build was given ({library.get('from', '?')})"
        if library.get("project"):
            found.append(_component("library", library["project"], library.get("version"),
                                    "required", role + "; required at run time"))
            continue
        found.append({"type": "library", "name": library.get("name", "?"), "version": "",
                      "bom-ref": f"archive:{library.get('sha256', '?')}", "scope": "required",
                      "hashes": _hashes(library.get("sha256")),
                      "externalReferences": [{"type": "distribution",
                                              "url": library.get("url", "?")}],
                      "properties": [{"name": "wheelsmith:role", "value": role}]})
    return found


def _vendored(provenance: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "library", "name": v["name"], "version": v["version"],
             "bom-ref": f"vendored:{v['name']}@{v['version']}", "scope": "required",
             "properties": [{"name": "wheelsmith:evidence", "value": v["evidence"]}]}
            for v in provenance.get("vendored", [])]


def vendored(source: Path) -> list[dict[str, str]]:
    """What the source tree carries of others' code, where a file says which release it is:
    CUTLASS's include/cutlass/version.h (its path relative to the source is the evidence)."""
    found = []
    top = len(source.parts)
    for dirpath, dirnames, files in os.walk(source):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")) \
            if len(here.parts) - top < WALK_DEPTH else []
        if here.name == "cutlass" and here.parent.name == "include" and "version.h" in files:
            parts = dict(CUTLASS.findall((here / "version.h").read_text(errors="replace")))
            if len(parts) == 3:
                found.append({"name": "cutlass", "version": "{MAJOR}.{MINOR}.{PATCH}".format(
                    **parts), "evidence": str((here / "version.h").relative_to(source))})
    return sorted(found, key=lambda v: (v["name"], v["evidence"]))
