"""The variables that switch a package's CUDA build on (deepspeed's DS_ACCELERATOR and
DS_BUILD_OPS, vllm's VLLM_TARGET_DEVICE, FORCE_CUDA, <PKG>_ENABLE_CUDA) are written into the
recipe's build.env with the value that turns it on, decided from how setup.py, or a module of
its own that it runs, reads them: generated names, defaults and comparison shapes, each with
the value it must give; a switch whose value cannot be told is said to be one, never guessed.
The real check of such a package is in tests/recipes/test_recipe_new_check.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.recipes.test_setup_py_patterns import findings, recipe_body, tree_with
from wheelsmith.recipes.model import load_recipe
from wheelsmith.scaffold import render, report, switches

WORDS = (switches.SWITCH_WORDS | switches.CUDA_WORDS | switches.OPS_WORDS
         | switches.NOT_A_SWITCH | switches.OTHER_VENDORS | switches.ACCELERATOR_WORDS
         | {"CUDA", "GPU", "TARGET", "ARCH"})
PREFIX = st.from_regex(r"[A-Z][A-Z0-9]{1,5}", fullmatch=True).filter(
    lambda p: p not in WORDS and not p.startswith(("CUDA", "TORCH", "PYTORCH", "NVCC")))
ON = st.sampled_from(["1", "true", "TRUE", "yes", "ON"])
CUDA = st.sampled_from(["cuda", "CUDA", "gpu", "nvidia"])
OTHER = st.sampled_from(["cpu", "rocm", "xpu", "npu", "hip"])
DEFAULTS = st.sampled_from(["", ', "0"', ", 0", ', ""', ', "false"'])
# names that switch CUDA on as a flag: {p} is the package's prefix
FLAG_NAMES = st.sampled_from(["{p}_ENABLE_CUDA", "{p}_FORCE_CUDA", "FORCE_CUDA", "{p}_BUILD_OPS",
                              "BUILD_{p}_KERNELS", "{p}_WITH_CUDA", "USE_{p}_CUDA_EXT"])
# how a flag is read ({v} the variable, {d} its default, {on} an on word) -> the value it needs
FLAG_READS = st.sampled_from([
    ('if os.getenv("{v}"{d}) == "{on}":\n    pass\n', "{on}", 'compared with "{on}"'),
    ('if os.environ.get("{v}"{d}).lower() in ("{on}", "yes"):\n    pass\n', "{on}",
     'compared with "{on}"'),
    ('if os.getenv("{v}"{d}) != "0":\n    pass\n', "1", 'compared with "0"'),
    ('flag = int(os.getenv("{v}"{d}))\n', "1", "read as int()"),
    ('flag = bool(int(os.environ.get("{v}"{d})))\n', "1", "read as int()"),
    ('if os.environ.get("{v}"{d}):\n    pass\n', "1", "read as a truth value"),
    ('if not os.getenv("{v}"{d}):\n    raise SystemExit\n', "1", "read as a truth value"),
    ('if "{v}" in os.environ:\n    pass\n', "1", "read as set or not"),
    ('if int(os.getenv("{v}"{d})) > 0:\n    pass\n', "1", "read as int()"),
    ('value = os.environ.get("{v}"{d})\nif value == "{on}":\n    pass\n', "{on}",
     'compared with "{on}"'),
    ('def enabled():\n    flag = os.getenv("{v}"{d})\n    return flag == "{on}"\n', "{on}",
     'compared with "{on}"')])
CHOOSER_NAMES = st.sampled_from(["{p}_ACCELERATOR", "{p}_TARGET_DEVICE", "{p}_BACKEND"])
# how an accelerator chooser is read ({cuda} a CUDA value, {other} another device's)
CHOOSER_READS = st.sampled_from([
    ('if os.getenv("{v}"{d}) == "{cuda}":\n    pass\n', 'compared with "{cuda}"'),
    ('if os.getenv("{v}"{d}) in ("{other}", "{cuda}"):\n    pass\n', 'compared with "{cuda}"'),
    ('SUPPORTED = ["{other}", "{cuda}"]\nif os.environ["{v}"] not in SUPPORTED:\n'
     '    raise ValueError\n', 'compared with "{cuda}"'),
    ('def choose():\n    if "{v}" in os.environ:\n        name = os.environ["{v}"]\n'
     '        if name == "{other}":\n            pass\n        elif name == "{cuda}":\n'
     '            pass\n', 'compared with "{cuda}"'),
    ('device = os.getenv("{v}", "{cuda}").lower()\nif device == "{other}":\n    pass\n',
     'read with the default "{cuda}"')])
UNTOLD_READS = st.sampled_from([
    ('if os.getenv("{v}"{d}) == "{other}":\n    pass\n', 'compared with "{other}"'),
    ('name = os.environ.get("{v}"{d})\nchoose(name)\n', "no value of it read turns CUDA on")])
WHERE = st.sampled_from(["setup.py", "tools/build_cfg.py", "tools/__init__.py", "helpers.py"])


def tree_reading(tmp_path: Path, code: str, where: str) -> tuple[Path, int]:
    """A package whose setup.py (or the module `where`, which setup.py imports) reads a
    variable with `code`; the line its first read is on."""
    setup = ("import os\nimport tools.build_cfg\nimport helpers\n"
             "from torch.utils.cpp_extension import CUDAExtension\n"
             "e = CUDAExtension('demo._C', ['k.cu'])\n")
    head = setup if where == "setup.py" else "import os\n"
    tree = tree_with(tmp_path, setup + code if where == "setup.py" else setup, "k.cu")
    for module in ("tools/__init__.py", "tools/build_cfg.py", "helpers.py"):
        (tree / module).parent.mkdir(exist_ok=True)
        (tree / module).write_text(head + code if module == where else "import os\n")
    first = next(n for n, line in enumerate(code.splitlines(), 1) if "os." in line)
    return tree, head.count("\n") + first


def switched(tree: Path) -> dict[str, tuple[str | None, str, str]]:
    return {s.name: (s.value, s.where, s.how) for s in switches.cuda_switches(tree)}


@given(prefix=PREFIX, name=FLAG_NAMES, read=FLAG_READS, default=DEFAULTS, on=ON, where=WHERE)
def test_a_flag_that_switches_cuda_on_is_set_to_the_value_that_does(
        tmp_path_factory: pytest.TempPathFactory, prefix: str, name: str,
        read: tuple[str, str, str], default: str, on: str, where: str) -> None:
    variable = name.format(p=prefix)
    code, value, how = (part.format(v=variable, d=default, on=on) for part in read)
    tree, line = tree_reading(tmp_path_factory.mktemp("flag"), code, where)
    assert switched(tree) == {variable: (value, f"{where}:{line}", how)}


@given(prefix=PREFIX, name=CHOOSER_NAMES, read=CHOOSER_READS, default=DEFAULTS, cuda=CUDA,
       other=OTHER, where=WHERE)
def test_an_accelerator_chooser_is_set_to_the_cuda_value_it_is_compared_with_or_defaults_to(
        tmp_path_factory: pytest.TempPathFactory, prefix: str, name: str,
        read: tuple[str, str], default: str, cuda: str, other: str, where: str) -> None:
    variable = name.format(p=prefix)
    code, how = (part.format(v=variable, d=default, cuda=cuda, other=other) for part in read)
    tree, line = tree_reading(tmp_path_factory.mktemp("chooser"), code, where)
    assert switched(tree) == {variable: (cuda, f"{where}:{line}", how)}


@given(prefix=PREFIX, name=CHOOSER_NAMES, read=UNTOLD_READS, default=DEFAULTS, other=OTHER,
       where=WHERE)
def test_a_chooser_no_reading_tells_the_cuda_value_of_is_said_to_be_one_and_not_set(
        tmp_path_factory: pytest.TempPathFactory, prefix: str, name: str,
        read: tuple[str, str], default: str, other: str, where: str) -> None:
    variable = name.format(p=prefix)
    code, how = (part.format(v=variable, d=default, other=other) for part in read)
    tree, line = tree_reading(tmp_path_factory.mktemp("untold"), code, where)
    assert switched(tree) == {variable: (None, f"{where}:{line}", how)}
    found = dataclasses.replace(findings(tree), switched=switches.cuda_switches(tree))
    assert found.env == ()
    assert f"{where}:{line}: {variable} may decide whether its CUDA build is made ({how}), but " \
           "which value turns it on cannot be told from how it is read: set it in build.env " \
           "if the check finds nothing to compile for the GPU" in report.report_lines(found)


@given(prefix=PREFIX, flag=st.tuples(FLAG_NAMES, FLAG_READS), chooser=CHOOSER_NAMES,
       cuda=CUDA, on=ON)
def test_the_switches_of_a_module_of_its_own_go_into_the_recipe_with_where_they_are_read(
        tmp_path_factory: pytest.TempPathFactory, prefix: str, flag: tuple[str, tuple[str, ...]],
        chooser: str, cuda: str, on: str) -> None:
    """deepspeed's two: the accelerator read in a module setup.py imports, the ops switch in
    setup.py; each a build.env entry whose comment names the file:line that reads it, and a
    finding; a module setup.py never imports, and tests, are not read."""
    ops, accelerator = flag[0].format(p=prefix), chooser.format(p=prefix)
    code, value, how = (part.format(v=ops, d="", on=on) for part in flag[1])
    tree = tree_with(tmp_path_factory.mktemp("both"), (
        "import os\nfrom tools.build_cfg import device\n"
        "from torch.utils.cpp_extension import CUDAExtension\n"
        "e = CUDAExtension('demo._C', ['k.cu'])\n" + code), "k.cu")
    (tree / "tools" / "tests").mkdir(parents=True)
    (tree / "tools" / "__init__.py").write_text("")
    (tree / "tools" / "build_cfg.py").write_text(
        f'import os\n\n\ndef device():\n    return os.environ.get("{accelerator}") == "{cuda}"\n')
    for unread in ("unimported.py", "tools/tests/test_cfg.py"):
        (tree / unread).write_text('import os\nX = os.getenv("OTHER_FORCE_CUDA") == "yes"\n')
    found = dataclasses.replace(findings(tree), switched=switches.cuda_switches(tree))
    line = 4 + next(n for n, text in enumerate(code.splitlines(), 1) if "os." in text)
    assert found.env == ((ops, value, f"setup.py:{line}: {how}"),
                         (accelerator, cuda, f'tools/build_cfg.py:5: compared with "{cuda}"'))
    assert f'tools/build_cfg.py:5: {accelerator} (compared with "{cuda}") turns its CUDA build ' \
           f'on: build.env {accelerator}: "{cuda}"' in report.report_lines(found)
    body = recipe_body(found)
    assert f'    {accelerator}: "{cuda}"  # tools/build_cfg.py:5: compared with "{cuda}"\n' in body
    assert f'    {ops}: "{value}"  # setup.py:{line}: {how}\n' in body
    written = load_recipe(render.write(found, tmp_path_factory.mktemp("repo"))[0])
    assert dict(written.env) == {ops: value, accelerator: cuda}


@given(off=st.sampled_from(["SKIP", "DISABLE", "NO", "CPU", "ROCM", "ONLY", "DIR", "HOME"]),
       read=FLAG_READS, on=ON)
def test_a_variable_that_turns_something_off_or_is_another_vendors_is_no_switch(
        tmp_path_factory: pytest.TempPathFactory, off: str, read: tuple[str, str, str],
        on: str) -> None:
    """DS_SKIP_CUDA_CHECK, BUILD_CPU_OPS, USE_ROCM_KERNELS: not set; a variable wheelsmith
    sets itself (MAX_JOBS, TORCH_CUDA_ARCH_LIST) is never one either."""
    code = "".join(read[0].format(v=name, d="", on=on) for name in (
        f"DS_{off}_CUDA_BUILD", f"BUILD_{off}_OPS", f"USE_{off}_KERNELS", "MAX_JOBS",
        "TORCH_CUDA_ARCH_LIST"))
    tree, _ = tree_reading(tmp_path_factory.mktemp("off"), code, "setup.py")
    assert switched(tree) == {}
