"""What an sdist says is not trusted (recipe new): its summary, home page, module names, the
strings its setup.py compares variables with and names its extensions. Written into the recipe,
each is one YAML value that reads back as what the report shows, never YAML structure; printed
or kept as a comment, each finding is one line with nothing a terminal would obey. Inputs are
generated over all of Unicode, YAML's and the terminal's special characters weighted in."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from wheelsmith.document import yaml_string
from wheelsmith.recipes.model import load_recipe
from wheelsmith.scaffold import patches, render, report, sdist, setup_py
from wheelsmith.scaffold.findings import Findings
from wheelsmith.untrusted.text import CONTROLS, one_line

SPECIAL = list(":#[]{},&*!|>'\"%@`-?\\\n\r\t\x00\x07\x1b\x7f\x85\x9b\u2028\u202e\ufeff\ud800")
HOSTILE = st.lists(st.one_of(st.sampled_from(SPECIAL), st.characters()), max_size=40).map("".join)
WORD = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)


def kept(text: str) -> str:
    """What a file can hold of `text`: a lone surrogate (a Python string from outside may
    hold one, through an escape in setup.py) as U+FFFD."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


@given(HOSTILE)
def test_a_yaml_string_reads_back_as_exactly_its_text_on_one_line(text: str) -> None:
    written = yaml_string(text)
    assert "\n" not in written
    assert CONTROLS.search(written) is None
    assert yaml.safe_load(f"key: {written}\n") == {"key": kept(text)}


@given(HOSTILE)
def test_one_line_leaves_nothing_that_breaks_a_line_or_drives_a_terminal(text: str) -> None:
    shown = one_line(text)
    shown.encode()  # raises on a lone surrogate
    assert CONTROLS.search(shown) is None
    assert "\n" not in shown
    assert "\t" not in shown
    if not re.search(f"[\t\n\ud800-\udfff]|{CONTROLS.pattern}", text):
        assert shown == text


def sdist_tree(root: Path, *, summary: str, homepage: str, modules: list[str], variable: str,
               value: str, extension: str) -> Path:
    tree = root / "demo-1.0"
    (tree / "csrc").mkdir(parents=True)
    (tree / "csrc" / "k.cu").write_text("// kernel\n")
    (tree / "demo.egg-info").mkdir()
    (tree / "demo.egg-info" / "top_level.txt").write_text("\n".join(modules) + "\n",
                                                          errors="surrogatepass")
    (tree / "PKG-INFO").write_bytes(
        b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nSummary: "
        + summary.encode(errors="surrogatepass") + b"\nHome-page: "
        + homepage.encode(errors="surrogatepass") + b"\n\nlong description\n")
    (tree / "setup.py").write_text(
        "import os\nfrom setuptools import setup\n"
        "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"
        f"FORCE = os.getenv({variable!r}, '0') == {value!r}\n"
        f"setup(name='demo', ext_modules=[CUDAExtension({extension!r}, ['csrc/k.cu'])],\n"
        "      cmdclass={'build_ext': BuildExtension})\n", errors="surrogatepass")
    return tree


@given(summary=HOSTILE, homepage=HOSTILE, modules=st.lists(HOSTILE, max_size=3),
       variable=st.one_of(WORD.map(lambda w: f"{w}_FORCE_BUILD"), HOSTILE),
       value=HOSTILE, extension=st.one_of(WORD, HOSTILE))
def test_what_the_sdist_says_is_one_value_in_the_recipe_and_one_line_in_the_report(
        tmp_path_factory: pytest.TempPathFactory, summary: str, homepage: str,
        modules: list[str], variable: str, value: str, extension: str) -> None:
    root = tmp_path_factory.mktemp("sdist")
    tree = sdist_tree(root, summary=summary, homepage=homepage, modules=modules,
                      variable=variable, value=value, extension=extension)
    setup = setup_py.read_setup(tree)
    found = Findings(sdist.Sdist("demo", "1.0", "demo-1.0.tar.gz", "1" * 64),
                     sdist.read_metadata(tree), setup, patches.written(tree, setup, cxx20=True))
    lines = report.report_lines(found)
    assert [line for line in lines if CONTROLS.search(line) or "\n" in line] == []
    "\n".join(lines).encode()  # raises on a lone surrogate: a terminal or a file takes each
    written = render.write(found, root / "repo")[0]
    recipe = load_recipe(written)  # a value YAML took as structure: a problem, raised here
    assert (recipe.summary, recipe.homepage) == (found.metadata.summary,
                                                 found.metadata.homepage or "")
    assert recipe.smoke_imports == found.imports
    assert all(part.isidentifier() for name in found.imports for part in name.split("."))
    assert dict(recipe.env) == {var: kept(v) for var, v, _ in found.env}
    comments = [line[2:] for line in written.read_text().splitlines() if line.startswith("# ")]
    assert comments[1:] == lines  # the report, line for line, and nothing of it outside


def test_a_summary_module_and_extension_that_look_like_yaml_stay_values(tmp_path: Path
                                                                       ) -> None:
    """The red team's shape: text that closes a flow list and opens keys of its own."""
    tree = sdist_tree(tmp_path, summary='a "quoted" \\ summary \x07 bell',
                      homepage="[a, b] # c", modules=["demo", "x]: y"],
                      variable="DEMO_FORCE_BUILD", value="TRUE\nversions: []",
                      extension="demo._C, os]: [x")
    setup = setup_py.read_setup(tree)
    found = Findings(sdist.Sdist("demo", "1.0", "demo-1.0.tar.gz", "1" * 64),
                     sdist.read_metadata(tree), setup, patches.written(tree, setup, cxx20=True))
    recipe = load_recipe(render.write(found, tmp_path / "repo")[0])
    assert recipe.summary == 'a "quoted" \\ summary \\x07 bell'
    assert recipe.homepage == "[a, b] # c"
    assert recipe.smoke_imports == ("demo",)
    assert dict(recipe.env) == {"DEMO_FORCE_BUILD": "TRUE\nversions: []"}
    assert report.report_lines(found)[-2:] == [
        "smoke: x]: y is not a module name: left out of smoke.import",
        "smoke: demo._C, os]: [x is not a module name: left out of smoke.import"]
    assert json.dumps(list(recipe.smoke_imports)) == '["demo"]'
