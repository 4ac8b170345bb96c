"""A verified wheel is the release it claims: its METADATA Name is the recipe's package and its
Version the recipe's version, compared as PEP 503 names and PEP 440 versions without local
labels (the build's own is replaced by wheelsmith's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.wheels import make_wheel
from wheelsmith.builder.verify import CARRIED_RELEASE_HINT, VERSION_HINT, Release, check_release
from wheelsmith.errors import VerifyError


@pytest.mark.parametrize(("name", "version", "release"), [
    ("tiny-ext", "0.1.0", ("tiny-ext", "0.1.0")),
    ("tiny-ext", "0.1", ("tiny-ext", "0.1.0")),
    ("tiny-ext", "1.0.0.post1", ("tiny-ext", "1.0.0-post1")),
    ("tiny-ext", "1.0.0rc1", ("tiny-ext", "1.0.0-rc.1")),
    ("tiny-ext", "0.8.0+cu130", ("tiny-ext", "0.8.0")),  # the package's own label (vllm's)
    ("tiny-ext", "0.1.0+cu.13.0.torch.2.14.sm.120", ("tiny-ext", "0.1.0")),  # stamped
    ("Tiny_Ext", "0.1.0", ("tiny-ext", "0.1.0")),
    ("tiny.ext", "0.1.0", ("Tiny-Ext", "0.1.0")),
])
def test_a_wheel_of_the_release_passes(tmp_path: Path, name: str, version: str,
                                       release: tuple[str, str]) -> None:
    check_release(make_wheel(tmp_path, name, version), Release(*release))


@pytest.mark.parametrize(("version", "release"), [
    ("0.0.0", "1.1.0"),  # nothing set the version: setuptools' own
    ("1.1.0rc1", "1.1.0"),
    ("1.1.0", "1.1.0.post1"),
    ("1!1.1.0", "1.1.0"),
    ("1.1.0.dev0", "1.1.0"),
])
def test_a_wheel_of_another_version_is_refused_naming_both(tmp_path: Path, version: str,
                                                           release: str) -> None:
    wheel = make_wheel(tmp_path, "tiny-ext", version)
    with pytest.raises(VerifyError) as caught:
        check_release(wheel, Release("tiny-ext", release))
    assert caught.value.message == (
        f"{wheel.name} is version {version}, but the recipe builds tiny-ext {release}")
    assert caught.value.hint == VERSION_HINT
    with pytest.raises(VerifyError) as recorded:
        check_release(wheel, Release("tiny-ext", release), built_here=False)
    assert recorded.value.message == (
        f"{wheel.name} is version {version}, but its provenance records tiny-ext {release}")
    assert recorded.value.hint == CARRIED_RELEASE_HINT


def test_a_wheel_of_another_project_is_refused_naming_both(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "tiny-ext-fork", "0.1.0")
    with pytest.raises(VerifyError) as caught:
        check_release(wheel, Release("tiny-ext", "0.1.0"))
    assert caught.value.message == (
        f"{wheel.name} is the wheel of tiny-ext-fork, but the recipe builds tiny-ext")
    assert caught.value.hint == "the recipe's source is another project's: check its source"

