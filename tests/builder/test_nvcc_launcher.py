"""The compile cache's nvcc launcher: each option nvcc passes on to another tool is joined to
its value, which ccache 4.7 otherwise moves (cuda-float-compress 0.2.3's `-Xptxas -Werror
-Xptxas --warn-on-spills` reached nvcc as `-Werror -Xptxas`: "Value '-Xptxas' is not defined
for option 'Werror'"). Generated command lines through the real script; a real compile through
ccache with the toolchain's nvcc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wheelsmith.builder import compilecache
from wheelsmith.toolchain.env import Toolchain

# words as build files write them: flags, values with spaces, quotes, `=` and shell specials
WORDS = st.one_of(
    st.sampled_from(compilecache.PASS_THROUGH),
    st.sampled_from(["-Werror", "--warn-on-spills", "-DX=1", "-fPIC", "-o", "k.o", "-c",
                     "-gencode", "arch=compute_120,code=sm_120", "-Wall,-Wextra", "", "a b",
                     "$HOME", "'q'", '"dq"', "*", "-Xcompilerish", "--", "=", "\\"]),
    st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=8))


def joined(words: list[str]) -> list[str]:
    """What nvcc should get: each pass-through option with the word after it, as one word."""
    out: list[str] = []
    held: str | None = None
    for word in words:
        if held is not None:
            out.append(f"{held}={word}")
            held = None
        elif word in compilecache.PASS_THROUGH:
            held = word
        else:
            out.append(word)
    return [*out, held] if held is not None else out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The launcher in front of a program that writes the words it got, in place of ccache."""
    where = tmp_path_factory.mktemp("launcher")
    recorder = where / "record"
    recorder.write_text(f"#!{sys.executable}\nimport json, sys\n"
                        "print(json.dumps(sys.argv[1:]))\n")
    recorder.chmod(0o755)
    launcher = where / compilecache.NVCC_LAUNCHER
    launcher.write_text(compilecache.nvcc_launcher(str(recorder)))
    launcher.chmod(0o755)
    return launcher


@settings(max_examples=60, deadline=None)
@given(words=st.lists(WORDS, max_size=12))
def test_each_pass_through_option_reaches_the_cache_joined_to_its_value(
        recorded: Path, words: list[str]) -> None:
    done = subprocess.run([str(recorded), "nvcc", *words], capture_output=True, check=True,
                          env={"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8"})
    assert json.loads(done.stdout) == ["nvcc", *joined(words)]


@pytest.mark.toolchain
def test_the_build_names_the_launcher_as_torchs_nvcc(tmp_path: Path, toolchain: Toolchain
                                                     ) -> None:
    cache = compilecache.CompileCache("/usr/bin/ccache", tmp_path / "ccache")
    launcher = tmp_path / compilecache.LAUNCHER_DIR / compilecache.NVCC_LAUNCHER
    assert cache.env(toolchain, tmp_path)["PYTORCH_NVCC"] == f"{launcher} {toolchain.nvcc}"
    assert "exec /usr/bin/ccache \"$@\"" in cache.launchers()[compilecache.NVCC_LAUNCHER]


@pytest.mark.toolchain
@pytest.mark.skipif(shutil.which("ccache") is None, reason="needs Debian's ccache (.ci/run "
                    "installs it)")
def test_ptxas_and_host_options_in_two_words_compile_through_ccache_and_hit(
        tmp_path: Path, toolchain: Toolchain) -> None:
    """cuda-float-compress's flags, and a host define given through -Xcompiler that the host
    code checks: compiled twice through the launcher and ccache, the second time a hit."""
    source = tmp_path / "k.cu"
    source.write_text("#if !defined(__CUDA_ARCH__) && WS_HOST != 7\n#error no WS_HOST\n#endif\n"
                      "__global__ void k(float* a) { a[threadIdx.x] = 1.0f; }\n")
    cache = compilecache.CompileCache(shutil.which("ccache") or "ccache", tmp_path / "cc")
    launcher = tmp_path / compilecache.NVCC_LAUNCHER
    launcher.write_text(cache.launchers()[compilecache.NVCC_LAUNCHER])
    launcher.chmod(0o755)
    env = {**os.environ, "CCACHE_DIR": str(tmp_path / "cc"), "CCACHE_BASEDIR": ""}
    argv = [str(launcher), str(toolchain.nvcc), "-gencode", "arch=compute_120,code=sm_120",
            "-Xptxas", "-Werror", "-Xptxas", "--warn-on-spills", "-Xcompiler", "-DWS_HOST=7",
            "-c", str(source), "-o", str(tmp_path / "k.o")]
    for _ in range(2):
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stderr
    stats = subprocess.run([cache.ccache, "--print-stats"], env=env, capture_output=True,
                           text=True, check=True).stdout
    counts = dict(line.split("\t") for line in stats.splitlines() if "\t" in line)
    assert int(counts["direct_cache_hit"]) + int(counts["preprocessed_cache_hit"]) == 1
