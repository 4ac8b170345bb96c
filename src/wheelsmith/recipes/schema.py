"""The recipe JSON Schema: the structure every recipe file is checked against (with
document.py's positions), printed by `wheelsmith schema` and kept in
recipes/recipe.schema.json for editors (`make schema`)."""

from __future__ import annotations

import json
from typing import Any

from wheelsmith.untrusted import ENV_NAME_RE

SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$",
          "x-message": "must be 64 lowercase hex digits (a sha256)"}


ENV_MAP = {
    "type": "object",
    "description": "environment variables set for the package's own build",
    "patternProperties": {f"^{ENV_NAME_RE.pattern}$": {"type": "string"}},
    "additionalProperties": False,
}


SOURCE = {
    "type": "object",
    "description": "one of pypi, url, git or path",
    "additionalProperties": False,
    "dependentRequired": {"pypi": ["sha256"], "url": ["sha256"],
                          "git": ["commit"]},
    "properties": {
        "pypi": {"type": "string", "description": "sdist of this project"},
        "url": {"type": "string"},
        "git": {"type": "string", "description": "repository URL or path"},
        "path": {"type": "string", "description": "local directory "
                 "(development), relative to the recipe file"},
        "sha256": SHA256,
        "commit": {"type": "string", "pattern": "^[0-9a-f]{40}$",
                   "x-message": "must be a full 40-digit commit hash"},
        "tag": {"type": "string", "description": "the tag that must "
                "name `commit` (checked at fetch: a moved tag is an error)"},
    },
}

# what a build would download (CMake's FetchContent, a submodule the sdist lacks), carried in
CARRY = {
    "type": "array",
    "description": "sources the build would download, fetched and pinned like the main "
                   "one and placed in its tree before the patches",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["into", "source"],
        "properties": {
            "into": {"type": "string", "description": "a new directory in the source tree, "
                     "relative to its root (an empty one there is replaced)"},
            "source": SOURCE,
            "env": {"type": "string", "pattern": f"^{ENV_NAME_RE.pattern}$",
                    "description": "the variable the package reads the directory from"},
            "cmake": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                      "description": "a CMake variable (as FETCHCONTENT_SOURCE_DIR_<NAME>) "
                                     "given the directory in CMAKE_ARGS"},
        },
    },
}


# what a build needs that is no Python package: NVIDIA's wheel-packaged libraries, an archive
LIBRARIES = {
    "type": "array",
    "description": "libraries the build needs that are no Python packages (NCCL, cuDNN, a CUDA "
                   "header the compiler packages lack, HDF5): each installed or fetched before "
                   "the build, which is pointed at its include and library directories",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "wheel": {"type": "string", "description": "a wheel of the index pip uses, pinned "
                      "(NAME==VERSION, e.g. nvidia-nccl-cu13==2.28.3); NAME alone: the "
                      "toolchain's own copy (torch's NCCL, cuDNN)"},
            "archive": {"type": "object", "additionalProperties": False,
                        "required": ["url", "sha256"],
                        "description": "an archive of an install prefix (include/, lib/)",
                        "properties": {"url": {"type": "string"}, "sha256": SHA256}},
            "name": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_]*$",
                     "x-message": "must be a name of letters, digits and '_' (hdf5)",
                     "description": "an archive's library name: its variables are NAME_ROOT, "
                                    "NAME_INCLUDE_DIR, ..."},
            "cuda": {"type": "string", "pattern": "^[0-9]{1,2}$",
                     "x-message": "must be a CUDA major version, e.g. '13'",
                     "description": "only for the toolchains of this CUDA major"},
        },
    },
}


RECIPE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://wheelsmith.dev/schema/recipe.schema.json",
    "title": "wheelsmith recipe",
    "type": "object",
    "additionalProperties": False,
    "required": ["package", "versions"],
    "properties": {
        "package": {"type": "string", "description": "the distribution name on PyPI"},
        "kind": {"type": "string", "enum": ["extension", "pure", "cuda"],
                 "description": "extension (default): a torch CUDA extension, verified per "
                 "arch; cuda: CUDA code that links no torch (llama-cpp-python), built with the "
                 "CUDA-only profile: labelled +cu.13.0.sm..., no torch pin; pure: a pure-Python "
                 "wheel with no device code, labelled +cu.13.0.torch.2.14.pure (one per "
                 "toolchain)"},
        "summary": {"type": "string", "description": "one line shown by `wheelsmith recipes`"},
        "homepage": {"type": "string"},
        "arch": {
            "type": "object",
            "description": "how the package receives the arch list",
            "additionalProperties": False,
            "properties": {
                "env": {"type": "string", "description": "variable the package reads "
                        "(default TORCH_CUDA_ARCH_LIST; TORCH_CUDA_ARCH_LIST is always set too)"},
                "format": {"type": "string", "enum": ["torch", "numbers", "cmake"],
                           "description": "torch: '9.0;12.0+PTX'; numbers: '90;120'; cmake: "
                           "CMAKE_CUDA_ARCHITECTURES '90a-real;120' (-real: SASS alone), as "
                           "-DCMAKE_CUDA_ARCHITECTURES=... where env is CMAKE_ARGS"},
                "default": {"type": "array", "minItems": 1, "items": {"type": "string"},
                            "description": "archs built when --arch is not given"},
                "supported": {"type": "array", "minItems": 1, "items": {"type": "string"},
                              "description": "the only archs the package's knob understands "
                              "(e.g. flash-attn: 8.0, 9.0, 10.0, 12.0); others are refused"},
                "min_cuda": {"type": "object", "description": "minimum nvcc CUDA per arch, "
                             "where the package needs more than nvcc itself",
                             "patternProperties": {".*": {"type": "string"}}},
                "rewrite": {"type": "boolean", "description": "the package compiles its own "
                            "-gencode list whatever it is told: before compiling, wheelsmith "
                            "puts the requested targets in its build file in place of that "
                            "list (default false)"},
            },
        },
        "build": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "env": ENV_MAP,
                "memory_per_job_gb": {"type": "number", "description": "peak memory of one "
                                      "compile job; bounds MAX_JOBS"},
                "host_only": {"type": "array", "items": {"type": "string"},
                              "description": "globs of .so files that carry no device code"},
                "build_dir_env": {"type": "string", "pattern": f"^{ENV_NAME_RE.pattern}$",
                                  "description": "the variable the package reads its CMake "
                                  "build directory from (e.g. NATTEN_BUILD_DIR); wheelsmith "
                                  "sets it to build/cmake in the source tree"},
                "requires": {"type": "array", "items": {"type": "string"},
                             "description": "packages the build imports that the toolchain "
                             "does not hold, each pinned (NAME==VERSION), with every one they "
                             "need: installed from the index pip uses, without their "
                             "dependencies, beside the toolchain (never replacing one of its "
                             "packages)"},
                "libraries": LIBRARIES,
                "stable_abi": {"type": "string", "description": "the oldest torch minor "
                               "(\"2.10\") a package written against torch's stable ABI "
                               "targets: built once per CUDA major with TORCH_TARGET_VERSION "
                               "and tagged abi3, its audit refuses any other torch or CPython "
                               "symbol"},
            },
        },
        "smoke": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "import": {"type": "array", "items": {"type": "string"},
                           "description": "modules imported against the toolchain's torch"},
                "gpu": {"type": "string", "description": "Python run when a GPU is present"},
            },
        },
        "versions": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["version", "source"],
                "properties": {
                    "version": {"type": "string", "description": "the upstream version"},
                    "source": SOURCE,
                    "patches": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["file", "sha256"],
                            "properties": {
                                "file": {"type": "string", "description":
                                         "name under patches/<package>/<version>/"},
                                "sha256": SHA256,
                                "description": {"type": "string"},
                            },
                        },
                    },
                    "env": ENV_MAP,
                    "carry": CARRY,
                },
            },
        },
    },
}


def schema_json() -> str:
    return json.dumps(RECIPE_SCHEMA, indent=2) + "\n"

