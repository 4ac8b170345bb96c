"""The include directories of the libraries torch's wheels bring (cuDNN, NCCL ... under
site-packages/nvidia/) go on a build's CPATH, never one that could stand in for a header of
the CUDA toolkit (CUDA 12's nvidia/cuda_runtime beside an installed toolkit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelsmith.toolchain.env import library_includes

HEADER = st.from_regex(r"[a-z][a-z_]{0,8}(\.h|\.hpp)?", fullmatch=True)


@given(toolkit=st.sets(HEADER, max_size=6),
       libraries=st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
                                 st.sets(HEADER, min_size=1, max_size=4), max_size=5),
       cuda_home_in_site=st.booleans())
def test_a_library_directory_is_on_the_path_only_where_it_adds_headers(
        tmp_path_factory: pytest.TempPathFactory, toolkit: set[str],
        libraries: dict[str, set[str]], cuda_home_in_site: bool) -> None:
    root = tmp_path_factory.mktemp("t")
    site = root / "site"
    cuda_home = site / "nvidia" / "cu13" if cuda_home_in_site else root / "cuda"
    for name in toolkit | {"cuda_runtime.h"}:
        (cuda_home / "include").mkdir(parents=True, exist_ok=True)
        (cuda_home / "include" / name).write_text("")
    libraries.pop("cu13", None)
    for library, headers in libraries.items():
        for name in headers:
            (site / "nvidia" / library / "include").mkdir(parents=True, exist_ok=True)
            (site / "nvidia" / library / "include" / name).write_text("")
    (site / "nvidia" / "nolib").mkdir(parents=True, exist_ok=True)  # no include directory
    expected = sorted(site / "nvidia" / library / "include"
                      for library, headers in libraries.items()
                      if not headers & (toolkit | {"cuda_runtime.h"}))
    assert list(library_includes(site, cuda_home)) == expected


def test_a_site_without_nvidia_libraries_adds_nothing(tmp_path: Path) -> None:
    assert library_includes(tmp_path / "site", tmp_path / "cuda") == ()
