"""`wheelsmith doctor` beyond imports: the runtime rules and the model's view judged on probe
data, and, end to end in a real environment (CPU torch + transformers from the package index),
transformers asked what a model needs and the op runner run against plain PyTorch."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPO
from tests.doctor import envs
from tests.doctor.envs import STAND_INS, site
from wheelsmith import locations
from wheelsmith.arch import parse_arch
from wheelsmith.cli import doctor_view
from wheelsmith.doctor import fastpath, judge
from wheelsmith.doctor.abi import built_for_torch
from wheelsmith.doctor.examine import examine
from wheelsmith.doctor.fastpath import ModelView, Need, model_type_of
from wheelsmith.doctor.judge import Knowledge, knowledge
from wheelsmith.doctor.report import PackageReport, Report
from wheelsmith.errors import RecipeError, UsageError
from wheelsmith.recipes.knownbad import load, load_runtime
from wheelsmith.toolchain.target import Target
from wheelsmith.untrusted.text import CONTROLS

DEAD_INDEX = "http://127.0.0.1:9"  # nothing listens: fixes are printed, marked unchecked
FLA_HOPPER = (
    "fla-core 0.6.0 with Triton 3.6.0 on Hopper (sm_90): Triton 3.4.0 up to 3.7.1 miscompiles "
    "fla's gated chunk_bwd_dqkwg on Hopper (wrong dk, db and dg in the GatedDeltaNet "
    "backward); fla refuses to run it, so the first training step fails while forward passes "
    "work. (https://github.com/fla-org/flash-linear-attention/issues/640)")


def probe_info(*, dists: dict[str, str], torch: str = "2.11.0+cu130", cuda: str | None = "13.0",
               fast: tuple[str, ...] = ("fla", "causal_conv1d")) -> dict[str, Any]:
    modules = {"fla": "flash-linear-attention fla-core", "causal_conv1d": "causal-conv1d",
               "mamba_ssm": "mamba-ssm", "flash_attn": "flash-attn"}
    return {"python": "3.12", "executable": "/env/bin/python", "torch": torch.partition("+")[0],
            "torch_full": torch, "torch_cuda": cuda, "glibc": "2.39", "machine": "x86_64",
            "gpu": None, "packages": [], "dists": dists,
            "fast_path": {m: {"dist": d, "ok": m in fast, "error": None if m in fast else
                              f"ModuleNotFoundError: No module named '{m}'"}
                          for m, d in modules.items()}}


def judged(info: dict[str, Any], arch: str, **kwargs: Any) -> Report:
    return examine(info, parse_arch(arch), "--arch", Path("/no/cuobjdump"),
                   index_url=DEAD_INDEX, knowledge=knowledge(), **kwargs)


# --- runtime rules, on probe data ----------------------------------------------------------


def test_fla_with_triton_3_6_on_hopper_is_refused_with_the_torch_that_brings_a_good_triton(
) -> None:
    report = judged(probe_info(dists={"fla-core": "0.6.0", "triton": "3.6.0"}), "9.0")
    assert report.problems == [FLA_HOPPER]
    assert report.fixes == [
        "pip install torch==2.12.1   # brings Triton 3.7.1 (toolchains/cu130-torch2.12.yaml)",
        "or: pip install tilelang   # fla then runs this backward with TileLang (needs nvcc)"]


@pytest.mark.parametrize(
    ("dists", "arch"),
    [
        ({"fla-core": "0.6.0", "triton": "3.7.1"}, "9.0"),   # Triton fixed it
        ({"fla-core": "0.6.0", "triton": "3.3.1"}, "9.0"),   # before the regression
        ({"fla-core": "0.6.0", "triton": "3.6.0", "tilelang": "0.1.9"}, "9.0"),  # the way out
        ({"fla-core": "0.6.0", "triton": "3.6.0"}, "12.0"),  # not Hopper
    ],
)
def test_fla_rule_spares_a_good_triton_tilelang_and_other_gpus(dists: dict[str, str],
                                                                  arch: str) -> None:
    assert judged(probe_info(dists=dists), arch).problems == []


def test_fla_trouble_is_a_note_for_a_model_that_does_not_use_fla() -> None:
    lfm2 = ModelView("--model-type", "lfm2", [Need("causal_conv1d", "causal_conv1d_fn", True)],
                     transformers="5.24.0")
    report = judged(probe_info(dists={"fla-core": "0.6.0", "triton": "3.6.0"}), "9.0",
                    model=lfm2)
    assert (report.healthy, report.notes) == (True, [f"{FLA_HOPPER} — not needed by lfm2"])


def test_triton_too_old_for_sm_120_names_the_torch_release_of_the_same_cuda_major() -> None:
    report = judged(probe_info(dists={"triton": "3.2.0"}, torch="2.6.0+cu126", cuda="12.6",
                               fast=()), "12.0", need=())
    assert report.problems[-1] == (
        "triton 3.2.0 on Blackwell (sm_120): Triton before 3.3.0 cannot compile for sm_120 "
        "(\"'sm_120' is not a recognized processor for this target\"): every Triton kernel "
        "(fla, mamba's SSD scans, torch.compile) fails there. "
        "(https://github.com/triton-lang/triton/issues/5950)")
    assert report.fixes[-1] == ("pip install torch==2.9.1   # brings Triton 3.5.1 "
                                "(toolchains/cu128-torch2.9.yaml)")


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("1.7.0+cu.13.0.torch.2.14.sm.90.120", (2, 14)),  # wheelsmith's label
        ("1.4.0+cu122torch2.4cxx11abiTRUE", (2, 4)),       # upstream's release wheels
        ("1.7.0", None),                                    # built here from source: unknown
        ("0.26.0+cu130", None),
    ],
)
def test_an_extension_names_its_torch_in_its_local_label(version: str,
                                                          expected: tuple[int, int] | None
                                                          ) -> None:
    assert built_for_torch(version) == expected


def test_an_extension_built_for_another_torch_is_unhealthy_and_reinstalled_from_the_channel(
) -> None:
    info = probe_info(dists={})
    report = Report(python="/env/bin/python", python_version="3.12", torch="2.11.0+cu130",
                           torch_cuda="13.0", gpu=None, arch=parse_arch("9.0"),
                           arch_source="--arch", channel=f"{DEAD_INDEX}/cu130-torch2.11/simple/",
                           packages=[PackageReport(
                               "causal-conv1d", "1.7.0+cu.13.0.torch.2.14.sm.90", "sass", ())])
    to_install: dict[str, None] = {}
    abi = [rule for rule in knowledge().rules if rule.when == "torch-abi"]
    judge._judge_rules(report, info, Knowledge(rules=abi),
                        Target.from_probe(Path("/env/bin/python"), info), to_install)
    assert report.problems == [
        "causal-conv1d 1.7.0+cu.13.0.torch.2.14.sm.90 was built for torch 2.14, this environment "
        "has torch 2.11.0+cu130: an extension compiled against one torch minor does not load "
        "with another: the import fails with \"undefined symbol\" and transformers falls back to "
        "torch. (https://github.com/state-spaces/mamba/issues/149)"]
    assert list(to_install) == ["causal-conv1d"]


@given(low=st.integers(0, 20), width=st.integers(1, 6), here=st.integers(0, 30))
def test_an_extension_is_judged_by_its_torch_span_where_its_label_states_one(
        low: int, width: int, here: int) -> None:
    """A label's torch span (its range proved those minors) holds the environment's torch: no
    ABI problem there; outside it, the same problem as for a label without one."""
    high = low + width
    version = f"1.7.0+cu.13.0.torch.2.{high}.range.2.{low}.2.{high}.sm.90"
    report = Report(python="/env/bin/python", python_version="3.12", torch=f"2.{here}.1+cu130",
                    torch_cuda="13.0", gpu=None, arch=parse_arch("9.0"), arch_source="--arch",
                    channel=f"{DEAD_INDEX}/cu130-torch2.{here}/simple/",
                    packages=[PackageReport("causal-conv1d", version, "sass", ())])
    to_install: dict[str, None] = {}
    abi = [rule for rule in knowledge().rules if rule.when == "torch-abi"]
    info = probe_info(dists={}, torch=f"2.{here}.1+cu130")
    judge._judge_rules(report, info, Knowledge(rules=abi),
                       Target.from_probe(Path("/env/bin/python"), info), to_install)
    if low <= here <= high:
        assert (report.problems, to_install) == ([], {})
    else:
        assert [p.split(":")[0] for p in report.problems] == [
            f"causal-conv1d {version} was built for torch 2.{high}, this environment has "
            f"torch 2.{here}.1+cu130"]


def test_runtime_rules_are_kept_apart_from_the_build_rules(tmp_path: Path) -> None:
    table = tmp_path / "known-bad.yaml"
    table.write_text("- stage: runtime\n  package: fla-core\n  triton: '>=3.4.0,<'\n"
                     "  action: refuse\n  reason: r\n  link: https://example.org/1\n")
    with pytest.raises(RecipeError, match="1 problem") as raised:
        load_runtime(table)
    assert [p.render() for p in raised.value.problems] == [
        f"{table}:3:11: '[0].triton' is not a version specifier: '>=3.4.0,<'\n"
        "    hint: write e.g. '>=1.5.3,<1.8'"]
    shipped = REPO / "known-bad.yaml"
    assert all(rule.package != "fla-core" for rule in load(shipped))
    assert [r.package for r in load_runtime(shipped)] == [
        "fla-core", "flash-linear-attention", "triton", "*"]


# --- the model's view and the ops, on probe data -------------------------------------------


def test_the_model_verdict_names_the_package_and_the_functions_transformers_lacks() -> None:
    qwen = ModelView("--model-type", "qwen3_5", [
        Need("causal_conv1d", "causal_conv1d_fn", True),
        Need("fla", "chunk_gated_delta_rule", False, "not-installed", "No module named 'fla'"),
        Need("fla", "fused_recurrent_gated_delta_rule", False, "not-installed", "")],
        transformers="5.24.0")
    report = judged(probe_info(dists={}, fast=("causal_conv1d",)), "9.0", model=qwen)
    assert report.problems == [
        "qwen3_5: transformers will fall back to torch — fla (chunk_gated_delta_rule, "
        "fused_recurrent_gated_delta_rule) is not installed"]
    assert report.fixes == [f"pip install --index-url {DEAD_INDEX}/cu130-torch2.11/simple/ "
                            "--no-deps --force-reinstall flash-linear-attention fla-core   "
                            "# not checked: the index could not be read"]


def test_ops_are_judged_by_what_the_model_needs() -> None:
    ops = [
        {"op": "causal_conv1d_fn", "module": "causal_conv1d", "status": "wrong", "phase": None,
         "max_error": 0.4, "worst": "dx", "tolerance": 0.001, "error": None, "kind": None,
         "seconds": 1.0},
        {"op": "chunk_gated_delta_rule", "module": "fla", "status": "error", "phase": "backward",
         "max_error": None, "worst": None, "tolerance": None, "kind": None, "seconds": 9.0,
         "error": "RuntimeError: Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect "
                  "results\nsecond line"},
        {"op": "flash_attn_func", "module": "flash_attn", "status": "timeout", "phase": None,
         "max_error": None, "worst": None, "tolerance": None, "kind": None, "seconds": 300,
         "error": "did not finish in 300 s"}]
    report = judged(probe_info(dists={}), "9.0", ops=ops)
    assert report.problems == [
        "causal_conv1d_fn (causal_conv1d) computes wrong results: max error 0.4 in dx "
        "(tolerance 0.001)",
        "chunk_gated_delta_rule (fla) fails in backward: RuntimeError: Triton >= 3.4.0 and < "
        "3.7.1 on Hopper GPUs produces incorrect results"]
    assert report.notes == [
        "flash_attn_func (flash_attn) did not finish in 300 s (hung?); a longer --op-timeout "
        f"helps if it was still compiling — not needed by {fastpath.DEFAULT_MODEL}"]


@pytest.mark.parametrize(
    ("kind", "error", "said"),
    [
        ("oom", "AcceleratorError: CUDA error: out of memory\nmore",
         "the GPU is out of memory (AcceleratorError: CUDA error: out of memory)"),
        ("busy", "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
         "the GPU is busy or unavailable (RuntimeError: CUDA error: CUDA-capable device(s) "
         "is/are busy or unavailable)"),
    ],
)
def test_a_gpu_that_cannot_be_used_is_said_once(kind: str, error: str, said: str) -> None:
    setup = {"status": "error", "phase": "setup", "kind": kind, "max_error": None,
             "error": error, "seconds": 0.2}
    ops = [{**setup, "op": "chunk_gated_delta_rule", "module": "fla"},
           {**setup, "status": "not-run", "op": "fused_recurrent_gated_delta_rule",
            "module": "fla"}]
    assert judged(probe_info(dists={}), "9.0", ops=ops).problems == [
        f"the fast-path ops could not run: {said}"]


def test_model_type_and_model_directory_together_are_refused(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "wheelsmith", "doctor", "--model-type",
                             "qwen3_5", "--model", str(tmp_path)], capture_output=True,
                            text=True, cwd=REPO, check=False)
    assert (result.returncode, result.stderr) == (
        4, "error: give --model-type or --model, not both\n")


SHELL = st.lists(st.sampled_from(["$(", ")", "`", ";", "|", "&&", ">", "<", "{", "}", '"', "'",
                                   " ", "\n", "~", "*", "rm -rf", "echo", '{"a": 1}']),
                 min_size=1, max_size=6).map("".join)
NOT_A_TYPE = st.one_of(st.text(max_size=30), SHELL, st.builds("qwen3_5{}".format, SHELL)
                       ).filter(lambda t: not fastpath.MODEL_TYPE_RE.fullmatch(t))


def _refusal(value: str) -> str:
    shown = value.encode("unicode_escape").decode("ascii")
    shown = shown if len(shown) <= 60 else shown[:59] + "…"
    return (f"error: --model-type: '{shown}' is not a model type; a model type is "
            "transformers' name for it, as in a checkpoint's config.json: ASCII letters, "
            "digits and _ . - (qwen3_5, mamba2, falcon_h1)\n")


@given(NOT_A_TYPE)
def test_a_model_type_that_is_no_name_is_refused_in_one_line_naming_the_option(
        value: str) -> None:
    """Shell text as --model-type reached transformers' check and came back as "expected a
    string, found an object"."""
    with pytest.raises(UsageError) as caught:
        fastpath.model_type_given(value)
    assert (f"error: {caught.value.message}\n", caught.value.hint) == (_refusal(value), None)


def test_shell_text_as_model_type_is_refused_before_anything_runs(tmp_path: Path) -> None:
    for value in ("$(rm -rf ~); echo {\"a\": 1}", "qwen3_5 && true", "`id`", ""):
        result = subprocess.run(
            [sys.executable, "-m", "wheelsmith", "doctor", "--python", str(tmp_path / "none"),
             "--model-type", value], capture_output=True, text=True, cwd=REPO, check=False,
            timeout=60)
        assert (result.returncode, result.stderr, result.stdout) == (4, _refusal(value), "")


@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        (None, "config-missing", "{dir} has no config.json"),
        ("{", "config-unreadable", "{dir}/config.json is not readable JSON: not valid JSON "
                                   "(Expecting property name enclosed in double quotes: line 1 "
                                   "column 2 (char 1))"),
        ("[" * 200_000, "config-unreadable", "{dir}/config.json is not readable JSON: its JSON "
                                             "nests too deeply"),
        ('{"model_type": "a", "model_type": "b"}', "config-unreadable",
         "{dir}/config.json is not readable JSON: holds the key 'model_type' twice in one "
         "object (readers differ on which one counts)"),
        ('{"architectures": ["X"]}', "no-model-type", "{dir}/config.json has no model_type"),
        ('{"model_type": "qwen3_5\\n\\nhealthy: all good"}', "no-model-type",
         "{dir}/config.json: its model_type 'qwen3_5\\n\\nhealthy: all good' is not a model "
         "type's name (ASCII letters, digits and _ . -)"),
        ('{"model_type": "qwen3_5"}', None, None),
    ],
)
def test_a_checkpoint_directory_gives_its_model_type(tmp_path: Path, config: str | None,
                                                      error: str | None,
                                                      message: str | None) -> None:
    if config is not None:
        (tmp_path / "config.json").write_text(config)
    view = model_type_of(tmp_path)
    assert (view.error, view.message) == (error, message and message.format(dir=tmp_path))
    assert view.model_type == (None if error else "qwen3_5")



@given(st.text(max_size=30))
def test_a_model_type_is_a_name_or_the_checkpoint_is_refused_showing_it_escaped(
        tmp_path_factory: pytest.TempPathFactory, model_type: str) -> None:
    """config.json is someone else's: its model_type reaches the report and transformers only
    as a plain name."""
    directory = tmp_path_factory.mktemp("model")
    (directory / "config.json").write_text(json.dumps({"model_type": model_type}))
    view = model_type_of(directory)
    if model_type and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", model_type):
        assert (view.model_type, view.error) == (model_type, None)
    else:
        assert view.model_type is None
        assert view.error in ("no-model-type", "config-unreadable")  # parse_json: controls
        assert view.message is not None
        assert CONTROLS.search(view.message) is None
        assert "\n" not in view.message  # one line: no fake line of a report

# --- end to end: a real environment ----------------------------------------------------------

ON_CPU = {fastpath.OPS_ON_CPU_ENV: "1"}  # the stand-ins run on the CPU; real ops need a GPU


@pytest.fixture(scope="module")
def user_env() -> Path:
    """CPU torch 2.13.0 + transformers, without fla or causal-conv1d (cached per machine)."""
    return envs.user_env()


def run_doctor(python: Path, *args: str, path: tuple[Path, ...] = (),
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI of the wheelsmith these tests import (a worktree's, not the one installed in
    the venv), examining `python` with `path` on its PYTHONPATH."""
    environ = {**os.environ, **(env or {})}
    this = Path(locations.__file__).parents[1]  # the directory holding this wheelsmith
    environ["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*path, this))
    return subprocess.run([sys.executable, "-m", "wheelsmith", "doctor", "--python", str(python),
                           "--arch", "9.0", "--index", DEAD_INDEX, *args],
                          capture_output=True, text=True, env=environ, cwd=REPO, check=False)


def test_transformers_says_qwen3_5_falls_back_without_fla_and_not_once_fla_is_installed(
        user_env: Path) -> None:
    before = run_doctor(user_env, "--model-type", "qwen3_5", "--json")
    report = json.loads(before.stdout)
    assert before.returncode == 15
    assert report["model"]["transformers"] == "5.24.0"
    assert report["problems"][:2] == [
        "qwen3_5: transformers will fall back to torch — causal_conv1d (causal_conv1d_update, "
        "causal_conv1d_fn) is not installed",
        "qwen3_5: transformers will fall back to torch — fla (chunk_gated_delta_rule, "
        "fused_recurrent_gated_delta_rule) is not installed"]
    assert report["ops"] is None  # no GPU and no --run

    fla = site("fla-0.6.0", "fla-core==0.6.0", "flash-linear-attention==0.6.0", "einops==0.8.1",
               "triton==3.9.0")
    after = run_doctor(user_env, "--model-type", "qwen3_5", "--json", path=(fla,))
    report = json.loads(after.stdout)
    assert [n["function"] for n in report["model"]["needs"] if n["available"]] == [
        "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"]
    assert not [p for p in report["problems"] if "fla" in p]
    assert report["problems"] == [
        "qwen3_5: transformers will fall back to torch — causal_conv1d (causal_conv1d_update, "
        "causal_conv1d_fn) is not installed",
        "torch 2.13.0+cpu is a CPU-only build: no CUDA kernel runs"]


def test_an_older_transformers_is_too_old_for_qwen3_5_and_reads_qwen3_next_from_its_imports(
        user_env: Path) -> None:
    old = site("transformers-4.57.1-r", "transformers==4.57.1", "huggingface-hub==0.36.0",
               "tokenizers==0.22.1", "requests==2.34.2", "urllib3==2.8.0",
               "charset-normalizer==3.5.3", "certifi==2026.10.19.post1")
    too_old = run_doctor(user_env, "--model-type", "qwen3_5", "--no-run", path=(old,))
    assert too_old.returncode == 15
    assert ("  qwen3_5: transformers 4.57.1 does not know this model type (too old): pip "
            "install --upgrade transformers\n") in too_old.stderr
    nxt = json.loads(run_doctor(user_env, "--model-type", "qwen3_next", "--json",
                                path=(old,)).stdout)
    assert nxt["model"]["transformers"] == "4.57.1"  # `from fla... import` under a check
    assert [(n["module"], n["function"], n["available"]) for n in nxt["model"]["needs"]] == [
        ("causal_conv1d", "causal_conv1d_fn", False),
        ("causal_conv1d", "causal_conv1d_update", False), ("fla", "FusedRMSNormGated", False),
        ("fla", "chunk_gated_delta_rule", False),
        ("fla", "fused_recurrent_gated_delta_rule", False)]


def test_bad_model_input_is_one_line_and_the_report_is_still_printed(user_env: Path,
                                                                      tmp_path: Path) -> None:
    missing = run_doctor(user_env, "--model", str(tmp_path))
    assert missing.returncode == 4
    assert f"model    not examined: {tmp_path} has no config.json\n" in missing.stdout
    assert "fast path: fla MISSING" not in missing.stdout  # the report went on: imports shown
    assert "fast path: fla not installed" in missing.stdout
    assert missing.stderr == (
        f"error: {tmp_path} has no config.json\n"
        "hint: give a checkpoint directory with its config.json (--model DIR), or the model "
        "type (--model-type TYPE)\n")
    unknown = run_doctor(user_env, "--model-type", "qwen9", "--json")
    report = json.loads(unknown.stdout)
    assert unknown.returncode == 4
    assert report["model"]["error"] == "unknown"
    assert {"qwen3_5", "qwen3_next", "mamba2", "falcon_h1"} <= set(report["model"]["known_types"])
    assert "Traceback" not in unknown.stderr + missing.stderr


def test_ops_run_against_plain_pytorch_ok_with_their_max_error(user_env: Path) -> None:
    result = run_doctor(user_env, "--model-type", "lfm2", "--run", path=(STAND_INS,),
                        env=ON_CPU)
    table = result.stdout.split("op (vs plain PyTorch)")[1].splitlines()
    assert [line.split()[:3] for line in table[1:5]] == [
        ["causal_conv1d_fn", "ok", "max"], ["causal_conv1d_update", "ok", "max"],
        ["selective_scan_fn", "ok", "max"], ["flash_attn_func", "ok", "max"]]
    assert ("model    lfm2 (transformers 5.24.0): fast path through causal_conv1d (its dispatch "
            "run on CUDA inputs without storage: no GPU here)\n") in result.stdout
    assert result.stderr.endswith("  torch 2.13.0+cpu is a CPU-only build: no CUDA kernel runs\n")


@pytest.mark.parametrize(
    ("behaviour", "conv1d_fn", "note"),
    [
        ("wrong", "causal_conv1d_fn (causal_conv1d) computes wrong results: max error 0.1 in ",
         "flash_attn_func (flash_attn) computes wrong results: max error"),
        ("raise", "causal_conv1d_fn (causal_conv1d) fails in forward: RuntimeError: fixture "
                  "kernel refused: this op is broken on purpose",
         "flash_attn_func (flash_attn) fails in forward: RuntimeError: fixture kernel refused"),
        ("oom", "causal_conv1d_fn (causal_conv1d) runs out of GPU memory (OutOfMemoryError: "
                "CUDA out of memory. Tried to allocate 2.00 GiB)",
         "flash_attn_func (flash_attn) runs out of GPU memory"),
        ("hang", "causal_conv1d_fn (causal_conv1d) did not finish in 3 s (hung?); a longer "
                 "--op-timeout helps if it was still compiling",
         "flash_attn_func (flash_attn) did not finish in 3 s"),
    ],
)
def test_an_op_that_is_wrong_fails_or_hangs_is_named_and_the_rest_still_run(
        user_env: Path, behaviour: str, conv1d_fn: str, note: str) -> None:
    limit = "3" if behaviour == "hang" else "120"  # a loaded machine imports torch slowly
    result = run_doctor(user_env, "--model-type", "lfm2", "--run", "--op-timeout", limit,
                        "--json", path=(STAND_INS,),
                        env={"WHEELSMITH_FIXTURE_OPS": behaviour, **ON_CPU})
    report = json.loads(result.stdout)
    assert result.returncode == 15
    assert report["problems"][0].startswith(conv1d_fn)
    assert [o["op"] for o in report["ops"]] == ["causal_conv1d_fn", "causal_conv1d_update",
                                                "selective_scan_fn", "flash_attn_func"]
    assert any(n.startswith(note) and n.endswith("— not needed by lfm2")
               for n in report["notes"])


# --- a fast-path package installed without a dependency (issue 21) ---------------------------

NO_EINOPS = {"dist": "flash-linear-attention fla-core", "ok": False,
             "error": "ModuleNotFoundError: No module named 'einops'", "missing": "einops"}


def test_the_probe_imports_what_the_fast_path_uses_and_names_the_missing_module(
        tmp_path: Path) -> None:
    """`import fla` alone succeeds without einops (fla imports lazily); the probe imports
    fla.ops.gated_delta_rule, as the ops and transformers do."""
    ops = tmp_path / "fla" / "ops"
    ops.mkdir(parents=True)
    (tmp_path / "fla" / "__init__.py").write_text("")
    (ops / "__init__.py").write_text("")
    (ops / "gated_delta_rule.py").write_text("import einops\n")
    result = subprocess.run([sys.executable, str(locations.RESOURCES / "probe.py"), "packages"],
                            capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    info = json.loads(result.stdout.partition("WHEELSMITH-PROBE ")[2])
    assert info["fast_path"]["fla"] == NO_EINOPS
    assert info["fast_path"]["mamba_ssm"]["missing"] == "mamba_ssm"


def test_a_missing_dependency_is_said_once_and_installed_not_the_package_again() -> None:
    info = probe_info(dists={}, fast=("causal_conv1d",))
    info["fast_path"]["fla"] = NO_EINOPS
    report = judged(info, "9.0")
    assert report.problems == [
        "fast path: fla does not import: it needs einops, which is not installed "
        "(ModuleNotFoundError: No module named 'einops'): models fall back to slow PyTorch code"]
    assert report.fixes == ["pip install einops   # fla imports einops, which is not installed"]
    out = io.StringIO()
    doctor_view.render_doctor(report, out)
    assert ("fast path: fla DOES NOT IMPORT (einops is missing), causal_conv1d ok, mamba_ssm not "
            "installed, flash_attn not installed\n") in out.getvalue()
    assert "fla ok" not in out.getvalue()


def test_a_model_that_falls_back_for_a_missing_dependency_gets_the_dependency_installed() -> None:
    message = "ModuleNotFoundError: No module named 'einops'"
    qwen = ModelView("--model-type", "qwen3_5", [
        Need("causal_conv1d", "causal_conv1d_fn", True),
        Need("fla", "chunk_gated_delta_rule", False, "import", message)],
        transformers="5.24.0")
    info = probe_info(dists={}, fast=("causal_conv1d",))
    info["fast_path"]["fla"] = NO_EINOPS
    report = judged(info, "9.0", model=qwen)
    assert report.problems == [
        "qwen3_5: transformers will fall back to torch — fla (chunk_gated_delta_rule) does not "
        "import: ModuleNotFoundError: No module named 'einops'"]
    assert report.fixes == ["pip install einops   # fla imports einops, which is not installed"]


@pytest.mark.parametrize(
    ("state", "fixes"),
    [
        ({"error": "ModuleNotFoundError: No module named 'opt_einsum_x'",
          "missing": "opt_einsum_x"},
         ["pip install opt_einsum_x   # 'opt_einsum_x' is the module named by fla's import "
          "error; its distribution may have another name"]),
        ({"error": "ModuleNotFoundError: No module named 'einops'"},  # no "missing": the text
         ["pip install einops   # fla imports einops, which is not installed"]),
        ({"error": "ModuleNotFoundError: No module named 'fla.ops'", "missing": "fla.ops"},
         [f"pip install --index-url {DEAD_INDEX}/cu130-torch2.11/simple/ --no-deps "
          "--force-reinstall flash-linear-attention fla-core   # not checked: the index could "
          "not be read"]),  # fla without fla-core: the package itself is incomplete
    ],
)
def test_the_fix_for_an_import_error_depends_on_the_module_it_names(
        state: dict[str, str], fixes: list[str]) -> None:
    info = probe_info(dists={}, fast=("causal_conv1d",))
    info["fast_path"]["fla"] = {"dist": "flash-linear-attention fla-core", "ok": False, **state}
    assert judged(info, "9.0").fixes == fixes


# --- no GPU: the ops are not run (issue 21) --------------------------------------------------


@pytest.mark.parametrize(
    ("run", "gpu", "environ", "expected"),
    [
        (True, False, {}, False),   # --run without a GPU: every op would fail on is_cuda()
        (None, False, {}, False),
        (None, True, {}, True),
        (True, True, {}, True),
        (False, True, {}, False),   # --no-run
        (True, False, ON_CPU, True),  # the CPU stand-ins of the tests
        (False, False, ON_CPU, False),
    ],
)
def test_ops_run_only_where_the_examined_torch_sees_a_gpu(run: bool | None, gpu: bool,
                                                          environ: dict[str, str],
                                                          expected: bool) -> None:
    assert fastpath.should_run(run, gpu, environ) is expected


def test_run_without_a_gpu_says_once_that_the_ops_need_one_and_counts_no_failure(
        user_env: Path) -> None:
    result = run_doctor(user_env, "--model-type", "lfm2", "--run", path=(STAND_INS,))
    assert (f"ops: not run: no GPU is visible to the torch in {user_env}, and the ops need "
            "one\n") in result.stdout
    assert "ERROR" not in result.stdout
    assert "op (vs plain PyTorch)" not in result.stdout
    assert result.stderr.endswith(  # the one problem: the CPU torch, no op
        "1 problem(s)\n  torch 2.13.0+cpu is a CPU-only build: no CUDA kernel runs\n")
    report = json.loads(run_doctor(user_env, "--model-type", "lfm2", "--run", "--json",
                                   path=(STAND_INS,)).stdout)
    assert (report["ops"], report["notes"]) == (None, [])


def test_doctor_without_python_says_it_examines_wheelsmiths_own(user_env: Path) -> None:
    """After `uv tool install .`, `doctor` alone examines the tool's own venv: the report says
    so, and how to name the user's environment; given --python, it says nothing of the kind."""
    own = subprocess.run([sys.executable, "-m", "wheelsmith", "doctor", "--arch", "9.0",
                          "--index", DEAD_INDEX], capture_output=True, text=True, cwd=REPO,
                         check=False)
    assert own.stdout.splitlines()[0] == (
        f"python   {sys.executable} ({sys.version_info[0]}.{sys.version_info[1]}); wheelsmith's "
        "own: --python PATH examines your environment")
    given_one = run_doctor(user_env, "--no-run")
    assert given_one.stdout.splitlines()[0].startswith(f"python   {user_env} (")
    assert "wheelsmith's own" not in given_one.stdout
