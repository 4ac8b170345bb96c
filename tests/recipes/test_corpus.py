"""`recipe new` right the first time, measured as users live it, on a corpus of real
CUDA-extension sdists from the index pip uses that wheelsmith does not ship (issues 22 and 33):
`recipe new NAME==VERSION` with no edit, whose check configures the build (setup.py or CMake up
to build.ninja, the pre-build arch check) and compiles its cheapest host and CUDA object of
each extension for real, exactly the recipe's default arch; then, for the ones that fit on 2
cores, `build` to the end and `wheelsmith verify` of the wheel with no flags. Both rates
(configures; builds to a verified wheel) and each failure's one-line reason are written to
docs/corpus.md by the slow test; the fast test keeps that page and the tables here in step."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from wheelsmith.toolchain.env import Toolchain

CONFIGURED = "configured"
VERIFIED = "verified wheel"
NOT_BUILT = "not built here"
DOC = REPO / "docs" / "corpus.md"
STEP_SECONDS = 2400  # one recipe new (its check) or one build

# NAME==VERSION -> CONFIGURED, or the start of the one line that says why not
CORPUS = {
    # issue 22's corpus: torch extensions built by setup.py
    "torch-scatter==2.1.2": CONFIGURED,
    "torch-sparse==0.6.18": CONFIGURED,
    "torch-cluster==1.6.3": CONFIGURED,
    "torch-spline-conv==1.2.2": CONFIGURED,
    "grouped_gemm==0.3.0": CONFIGURED,
    "torchsort==0.1.10": CONFIGURED,
    "gsplat==1.5.3": CONFIGURED,
    "megablocks==0.10.0": CONFIGURED,
    "exllamav2==0.0.4": CONFIGURED,
    "pytorch-fast-transformers==0.4.0": CONFIGURED,
    "torch-points-kernels==0.7.0": CONFIGURED,
    "chamferdist==1.0.3": CONFIGURED,
    "spatial-correlation-sampler==0.5.0": CONFIGURED,
    "torch-harmonics==0.8.1": CONFIGURED,
    "auto-gptq==0.7.1": "the sdist lacks what its extensions compile",
    "fast-hadamard-transform==1.1.0": "the sdist lacks what its extensions compile",
    "deepspeed==0.19.8": "JIT",
    # issue 33: sdists not used before, CMake builds among them
    "natten==0.21.7": CONFIGURED,
    "llama-cpp-python==0.3.36": CONFIGURED,
    "bitsandbytes==0.42.0": CONFIGURED,
    "xformers==0.0.35": CONFIGURED,
    "vllm==0.34.0": CONFIGURED,
    "DCNv4==1.0.0.post2": CONFIGURED,
    "nerfacc==0.5.3": CONFIGURED,
    "mmcv==2.2.0": CONFIGURED,
    "flashinfer-python==0.7.4": CONFIGURED,
    "transformer-engine-torch==2.20.2": CONFIGURED,
    "warp-rnnt==0.7.0": CONFIGURED,
    "torch-kdtree==1.0": CONFIGURED,
    "hqq==0.2.8.post1": CONFIGURED,
    "torch-linear-assignment==0.1.0": CONFIGURED,
    "pytorch-block-sparse==0.1.2": CONFIGURED,
    "marlin-kernels==0.3.7": CONFIGURED,
}
# built to the end here (they fit on 2 cores): NAME==VERSION -> VERIFIED, or the start of the
# one line that says why not; the others are configured and their sample compiled only
BUILT = {
    "torchsort==0.1.10": VERIFIED,
    "chamferdist==1.0.3": VERIFIED,
    "warp-rnnt==0.7.0": VERIFIED,
    "torch-linear-assignment==0.1.0": VERIFIED,
}


@dataclass(frozen=True, slots=True)
class Outcome:
    spec: str
    check: str  # CONFIGURED, or the one-line reason
    build: str  # VERIFIED, NOT_BUILT, or the one-line reason
    detail: str  # what the check found (targets, samples), or the hint of the failure
    seconds: float


def run(*args: str, cwd: Path) -> tuple[int, str, str]:
    try:
        done = subprocess.run([sys.executable, "-m", "wheelsmith", *args], cwd=cwd,
                              capture_output=True, text=True, check=False,
                              timeout=STEP_SECONDS)
    except subprocess.TimeoutExpired:
        return 124, "", f"error: timed out after {STEP_SECONDS} s"
    return done.returncode, done.stdout, done.stderr


def reason(stderr: str) -> str:
    """The one line that says why (wheelsmith's `error:` line)."""
    return next((line.removeprefix("error: ") for line in stderr.splitlines()
                 if line.startswith("error: ")), stderr.strip().splitlines()[-1]
                if stderr.strip() else "no output")


def checked(project: Path, spec: str) -> tuple[str, str]:
    """`recipe new` with its check: (CONFIGURED or why not, what the check found)."""
    code, out, err = run("recipe", "new", spec, "--recipes", "repo", cwd=project)
    if code != 0:
        why = reason(err).removeprefix("the check of the new recipe failed: ")
        hint = next((line for line in err.splitlines() if line.startswith("hint: ")), "")
        return why, hint
    lacks = next((line for line in out.splitlines() if line.startswith("the sdist lacks")),
                 None)
    if lacks:
        return lacks, ""
    found = [line.removeprefix("check: ") for line in out.splitlines()
             if line.startswith("check: ")]
    if not found:
        return "not checked: the toolchain is not created here", ""
    if found[0].startswith("no build.ninja"):
        return "JIT: setup.py generated no build.ninja with CUDA rules (ops compile at first " \
               "use)", ""
    return CONFIGURED, "; ".join(found)


def built(project: Path, spec: str) -> str:
    """`build` with the recipe as written (its default arch) and `verify` with no flags."""
    name = spec.partition("==")[0]
    code, out, err = run("build", name, "--recipes", "repo", "--json", "--work-dir", "work",
                         "--out", "out", cwd=project)
    if code != 0:
        return reason(err)
    wheel = json.loads(out)["wheel"]
    code, out, err = run("verify", wheel, cwd=project)
    return VERIFIED if code == 0 else reason(err)


def measure(project: Path, spec: str) -> Outcome:
    started = time.monotonic()
    work = project / re.sub(r"\W", "-", spec)
    work.mkdir(parents=True)
    check, detail = checked(work, spec)
    build = built(work, spec) if spec in BUILT and check == CONFIGURED else NOT_BUILT
    return Outcome(spec, check, build, detail, round(time.monotonic() - started))


def rates(outcomes: list[Outcome]) -> tuple[str, str]:
    configured = sum(o.check == CONFIGURED for o in outcomes)
    verified = sum(o.build == VERIFIED for o in outcomes)
    tried = sum(o.spec in BUILT for o in outcomes)
    return (f"**{configured} of {len(outcomes)}** configure and compile their sample",
            f"**{verified} of {len(outcomes)}** build to a verified wheel ({verified} of the "
            f"{tried} built to the end here)")


def render(outcomes: list[Outcome], when: str) -> str:
    configures, builds = rates(outcomes)
    rows = [f"| `{o.spec}` | {'✅' if o.check == CONFIGURED else '❌ ' + o.check} | "
            f"{'✅' if o.build == VERIFIED else '—' if o.build == NOT_BUILT else '❌ ' + o.build} "
            f"| {o.seconds} s |" for o in outcomes]
    return "\n".join([
        "# `recipe new`, right the first time",
        "",
        "Generated by `tests/recipes/test_corpus.py` (slow) from a real run: each real "
        "CUDA-extension sdist of the corpus through `wheelsmith recipe new NAME==VERSION` with "
        "no edit, whose check configures the build (setup.py or CMake up to build.ninja, the "
        "pre-build arch check) and compiles the cheapest host and CUDA object of each "
        "extension for real, exactly the recipe's default arch (12.0; 12.0a where the package "
        "builds Blackwell's arch-specific variant itself); then, for those that fit on 2 cores, "
        "`wheelsmith build` to the end and `wheelsmith verify` of the wheel with no flags.",
        "",
        f"Run: {when}.",
        "",
        f"- {configures}.",
        f"- {builds}; the others are not built to the end here (too big for 2 cores).",
        "",
        "| sdist | recipe new + its check | build to a verified wheel | time |",
        "|---|---|---|---|",
        *rows,
        ""])


@pytest.mark.slow
@pytest.mark.toolchain
def test_the_corpus_as_users_live_it(tmp_path: Path, toolchain: Toolchain,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WHEELSMITH_RECIPES", raising=False)
    outcomes = [measure(tmp_path, spec) for spec in CORPUS]
    DOC.write_text(render(outcomes, time.strftime("%Y-%m-%d", time.gmtime())
                          + ", a 2-core x86-64 machine without a GPU, this test"))
    for found in outcomes:
        assert found.check.startswith(CORPUS[found.spec]), (found.spec, found.check)
        if found.spec in BUILT:
            assert found.build.startswith(BUILT[found.spec]), (found.spec, found.build)


ROW_RE = re.compile(r"^\| `([^`]+)` \| (✅|❌[^|]*) \| (✅|—|❌[^|]*) \|", re.MULTILINE)


def test_the_corpus_page_states_what_the_tables_here_say() -> None:
    """docs/corpus.md (written by the slow test) and the tables agree: every sdist, its
    outcome, and the two rates."""
    if not DOC.exists():
        pytest.skip("docs/corpus.md is written by make test-slow's corpus run "
                    "(tests/recipes/test_corpus.py, many GB and hours on 2 cores), not yet run "
                    "on this tree's corpus")
    text = DOC.read_text()
    rows = {spec: (check.strip(), build.strip()) for spec, check, build in ROW_RE.findall(text)}
    assert sorted(rows) == sorted(CORPUS)
    outcomes = []
    for spec, (check, build) in rows.items():
        assert check == "✅" if CORPUS[spec] == CONFIGURED else \
            check.removeprefix("❌ ").startswith(CORPUS[spec]), (spec, check)
        if spec in BUILT:
            assert build == "✅" if BUILT[spec] == VERIFIED else \
                build.removeprefix("❌ ").startswith(BUILT[spec]), (spec, build)
        outcomes.append(Outcome(spec, CONFIGURED if check == "✅" else check,
                                VERIFIED if build == "✅" else NOT_BUILT if build == "—" else
                                build, "", 0))
    configures, builds = rates(outcomes)
    assert f"- {configures}." in text
    assert f"- {builds};" in text
