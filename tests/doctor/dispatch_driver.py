"""Run by an examined Python (torch, no wheelsmith) with src/wheelsmith/resources on its path:
doctor's model check, as `model_needs.py` runs it, for the cases the tests name.

usage: dispatch_driver.py types [TYPE ...]   every given model type of the installed
                                              transformers (none given: every type whose
                                              modeling code uses a fast-path package)
       dispatch_driver.py module NAME         a module on the path, as if it were a modeling
                                              module: its needs, exercised and judged
Prints one JSON line per model type or module.
"""
# ruff: noqa: PLC0415

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import model_needs  # type: ignore[import-not-found]  # src/wheelsmith/resources, on the path


def types(names: list[str]) -> None:
    import transformers
    root = Path(transformers.__file__).parent
    for name in names or model_needs.fast_path_types(root):
        print(json.dumps(model_needs.examine(name)), flush=True)


def module(name: str) -> None:
    spec = importlib.util.find_spec(name)
    assert spec is not None, name
    assert spec.origin is not None, name
    needs = model_needs.needs_in(Path(spec.origin).read_text())
    model_needs.stand_in_for(needs)
    imported = importlib.import_module(name)
    where = model_needs.device()
    print(json.dumps({"device": where.how, "needs": [
        model_needs.judged(need, model_needs.exercise(imported, need, where), where)
        for need in needs]}), flush=True)


if __name__ == "__main__":
    model_needs.quiet()
    if sys.argv[1] == "types":
        types(sys.argv[2:])
    else:
        module(sys.argv[2])
