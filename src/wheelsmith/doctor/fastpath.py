"""What the examined environment runs, as opposed to what it has installed: the fast-path ops run
on tiny inputs against plain PyTorch, and the fast-path functions a model's transformers code
needs.

Both run in the examined Python, through scripts that never import wheelsmith:
`resources/fastpath_ops.py` (one op per process, under a time limit: a crash or a hung kernel
takes no other op along) and `resources/model_needs.py` (asks the installed transformers'
modeling module itself).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from wheelsmith import cmd, locations
from wheelsmith.errors import NotRegularFileError, UntrustedDataError, UsageError
from wheelsmith.untrusted import Bounds, Node, clip, local, parse_json

log = logging.getLogger(__name__)

RESOURCES = locations.RESOURCES
OPS_SCRIPT = RESOURCES / "fastpath_ops.py"
NEEDS_SCRIPT = RESOURCES / "model_needs.py"
OP_TIMEOUT_S = 300  # a cold Triton cache compiles fla's kernels (and autotunes) on first use
KILL_GRACE_S = 5
NEEDS_TIMEOUT_S = 600  # transformers and a model's modeling module import in seconds, rarely more
ANSWER_MAX_BYTES = 16 << 20


def _number(node: Node) -> float:
    if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
        raise node.fail("expected a number")
    return float(node.value)


# what judge.py reads of an op's result, when present (an answer is data the examined Python
# wrote: its shape is checked before anything reads it)
_RESULT_FIELDS: dict[str, Callable[[Node], object]] = {
    "status": Node.text, "phase": Node.text, "kind": Node.text, "error": Node.text,
    "worst": Node.text, "max_error": _number, "tolerance": _number, "seconds": _number}
TIMED_OUT = (124, 137)  # coreutils timeout: the limit passed (137: it had to SIGKILL)

# op -> the module that provides it, in the order they run
OPS = {"causal_conv1d_fn": "causal_conv1d", "causal_conv1d_update": "causal_conv1d",
       "chunk_gated_delta_rule": "fla", "fused_recurrent_gated_delta_rule": "fla",
       "selective_scan_fn": "mamba_ssm", "flash_attn_func": "flash_attn"}

# Without --model-type/--model: the fast-path packages installed, judged by imports and runs.
DEFAULT_MODEL = "the installed fast-path packages"

# Model types whose transformers (5.24) modeling code uses a fast-path package: one of these
# unknown to the installed transformers means that transformers is too old for it.
FAST_PATH_MODEL_TYPES = (
    "bailing_hybrid", "bamba", "falcon_h1", "falcon_mamba", "glm5_next", "granitemoehybrid",
    "inkling", "inkling2", "inkling2_loop", "jamba", "kimi_linear", "lara_mini", "lfm2",
    "lfm2_moe", "lfm3", "mamba", "mamba2", "nemotron_h", "olmo_hybrid", "qwen3_5",
    "qwen3_5_moe", "qwen3_next", "qwen4_exp", "zamba", "zamba2")

# problems with the model input (the user's to fix: exit 4) vs. with the environment
INPUT_ERRORS = frozenset({"config-missing", "config-unreadable", "no-model-type", "unknown"})


@dataclass(frozen=True, slots=True)
class Need:
    module: str
    function: str
    # True: transformers' dispatch reached the package's kernel; False: its torch code; None:
    # not asked (the default set is judged by imports and runs) or undecided (reason says)
    available: bool | None
    reason: str | None = None  # not-installed | import | missing | not-taken | undecided
    message: str | None = None


@dataclass(slots=True)
class ModelView:
    """Which fast-path functions a model needs, and whether transformers found them."""

    source: str  # "default" | "--model-type" | "--model"
    model_type: str | None
    needs: list[Need] = field(default_factory=list)
    transformers: str | None = None
    error: str | None = None  # INPUT_ERRORS, no-transformers, too-old, import, failed
    message: str | None = None
    known_types: list[str] = field(default_factory=list)
    config: str | None = None  # --model: the config.json read
    device: str | None = None  # the dispatch's inputs: gpu | fake-cuda | no-device

    @property
    def input_error(self) -> bool:
        return self.error in INPUT_ERRORS

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.module for n in self.needs))

    def unavailable(self) -> dict[str, list[Need]]:
        """module -> the needs transformers will run with its torch code instead."""
        return self._by_module(lambda need: need.available is False)

    def undecided(self) -> dict[str, list[Need]]:
        """module -> the needs whose dispatch could not be seen to go either way."""
        return self._by_module(lambda need: need.reason == "undecided")

    def taken(self) -> tuple[str, ...]:
        """The modules whose kernels transformers' dispatch was seen to reach."""
        return tuple(dict.fromkeys(n.module for n in self.needs if n.available is True))

    def _by_module(self, which: Callable[[Need], bool]) -> dict[str, list[Need]]:
        found: dict[str, list[Need]] = {}
        for need in self.needs:
            if which(need):
                found.setdefault(need.module, []).append(need)
        return found

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_view(installed: Sequence[str] = ()) -> ModelView:
    """No model given: the ops of the fast-path packages that are installed."""
    return ModelView("default", DEFAULT_MODEL,
                     [Need(module, op, None) for op, module in OPS.items() if module in installed])


_NO_MODULE = re.compile(r"No module named '([^']+)'")


def missing_module(state: Mapping[str, Any]) -> str | None:
    """The module a fast-path module's ModuleNotFoundError names (the probe's `missing`, or read
    from the error of probe data from before `missing` was kept)."""
    missing = state.get("missing")
    if missing is None and (state.get("error") or "").startswith("ModuleNotFoundError"):
        found = _NO_MODULE.search(state["error"])
        missing = found[1] if found else None
    return str(missing) if missing else None


def installed(fast_path: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    """The fast-path modules present, whether or not they import (not there: the import's
    ModuleNotFoundError names the module itself; `fla.ops` missing is an fla without fla-core,
    there but incomplete)."""
    return tuple(module for module, state in fast_path.items()
                 if state["ok"] or missing_module(state) != module)


MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a transformers config.json is a few KB


MODEL_TYPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # transformers': "qwen3_5"


def model_type_given(value: str) -> str:
    """--model-type's value, when it is a model type's name (it is shown in the report and
    handed to transformers); anything else, shell text included: one line naming the option."""
    if MODEL_TYPE_RE.fullmatch(value):
        return value
    raise UsageError(f"--model-type: '{clip(value)}' is not a model type; a model type is "
                     "transformers' name for it, as in a checkpoint's config.json: ASCII "
                     "letters, digits and _ . - (qwen3_5, mamba2, falcon_h1)")


def model_type_of(directory: Path) -> ModelView:
    """--model DIR: the `model_type` of its config.json (nothing is downloaded)."""
    config = directory / "config.json"
    view = ModelView("--model", None, config=str(config))
    data = _config(directory, view)
    if view.error is not None:
        return view
    model_type = data.get("model_type") if isinstance(data, dict) else None
    if not isinstance(model_type, str) or not model_type:
        view.error, view.message = "no-model-type", f"{config} has no model_type"
    elif not MODEL_TYPE_RE.fullmatch(model_type):  # shown in the report, asked of transformers
        view.error, view.message = "no-model-type", (
            f"{config}: its model_type '{clip(model_type)}' is not a model type's name (ASCII "
            "letters, digits and _ . -)")
    else:
        view.model_type = model_type
    return view


def _config(directory: Path, view: ModelView) -> Any:
    """The JSON of DIR/config.json; what keeps it from being read: `view`'s error."""
    config = directory / "config.json"
    try:  # a model's config is someone else's: a regular file, bounded, parsed at any depth
        raw = local.read_at_most(config, MAX_CONFIG_BYTES)  # a FIFO, a device: never read
        if len(raw) > MAX_CONFIG_BYTES:
            raise UntrustedDataError(str(config), f"larger than {MAX_CONFIG_BYTES} bytes")
        return parse_json(raw, str(config)).value
    except FileNotFoundError:
        view.error, view.message = "config-missing", f"{directory} has no config.json"
    except NotRegularFileError as exc:
        view.error, view.message = "config-unreadable", (
            f"{config}: {exc.reason}; a checkpoint's config.json is read only as a regular "
            "file (a FIFO or a device could block or never end)")
    except OSError as exc:
        view.error, view.message = "config-unreadable", f"{config} is not readable JSON: {exc}"
    except UntrustedDataError as exc:
        view.error, view.message = "config-unreadable", \
            f"{config} is not readable JSON: {exc.problem}"
    return None


def ask_transformers(python: Path, view: ModelView) -> ModelView:
    """Fill `view` (a model type, no error yet) from the examined Python's transformers."""
    assert view.model_type is not None
    answer = _script(python, NEEDS_SCRIPT, view.model_type, "WHEELSMITH-MODEL ")
    if answer is None:
        view.error, view.message = "failed", "the transformers check did not answer"
        return view
    node = Node(answer, f"the transformers check of {python}")
    view.transformers = node.optional("transformers", Node.text)
    view.device = node.optional("device", Node.text)
    error = node.get("error")
    if error is not None:
        view.error, view.message = error["reason"].text(), error["message"].text()
    elif node.optional("known", Node.flag) is False:
        listed = [n.text() for n in node.optional("fast_path_types", Node.items) or []]
        view.known_types = listed or list(FAST_PATH_MODEL_TYPES)
        view.error = "too-old" if view.model_type in FAST_PATH_MODEL_TYPES else "unknown"
    view.needs = [Need(n["module"].text(), n["function"].text(),
                       n.optional("available", Node.flag), n.optional("reason", Node.text),
                       n.optional("message", Node.text))
                  for n in node.optional("needs", Node.items) or []]
    return view


def _script(python: Path, script: Path, argument: str, prefix: str,
            timeout_s: float | None = None) -> dict[str, Any] | None:
    argv: list[str | Path] = [python, script, argument]
    if timeout_s is not None:
        argv = ["timeout", "-k", str(KILL_GRACE_S), str(timeout_s), *argv]
    what = f"{script.name} {argument} in {python}"
    result = cmd.run(argv, stream=False, ok_returncodes=range(256), what=what,
                     bounds=Bounds(ANSWER_MAX_BYTES, (timeout_s or NEEDS_TIMEOUT_S) + 30.0))
    for line in result.stdout.splitlines():
        if line.startswith(prefix):
            answer = parse_json(line.removeprefix(prefix), what)
            for key, read in _RESULT_FIELDS.items():  # as judge.py reads them
                answer.optional(key, read)
            return {key: node.value for key, node in answer.entries().items()}
    if timeout_s is not None and result.returncode in TIMED_OUT:
        return {"status": "timeout", "error": f"did not finish in {timeout_s:g} s",
                "seconds": timeout_s}
    tail = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
    log.info("%s %s gave no answer (exit code %d): %s", script.name, argument,
             result.returncode, tail)
    if timeout_s is None:
        return None
    return {"status": "error", "phase": "crash",
            "error": f"its process ended with exit code {result.returncode}: {tail.strip()}"}


# The ops are CUDA kernels: with no GPU visible to the examined torch they are not run, --run or
# not (each would fail with "Expected x.is_cuda()"). The CPU stand-ins of the tests
# (tests/fixtures/fastpath-cpu) run on the CPU where this is set.
OPS_ON_CPU_ENV = "WHEELSMITH_DOCTOR_OPS_ON_CPU"


def should_run(run: bool | None, gpu_visible: bool, environ: Mapping[str, str]) -> bool:
    """--run/--no-run (None: not given) against whether the examined torch sees a GPU."""
    if run is False:
        return False
    return gpu_visible or environ.get(OPS_ON_CPU_ENV) == "1"


def ops_to_run(importable: set[str]) -> list[str]:
    return [op for op, module in OPS.items() if module in importable]


def run_ops(python: Path, ops: list[str], timeout_s: float) -> list[dict[str, Any]]:
    """Run each op in its own process of the examined Python, at most `timeout_s` each. When
    the device itself cannot be used (busy, no memory at all), the rest are not started."""
    results: list[dict[str, Any]] = []
    blocked: dict[str, Any] | None = None
    for op in ops:
        if blocked is not None:
            result = {"status": "not-run", "error": blocked["error"], "kind": blocked["kind"],
                      "phase": "setup"}
        else:
            result = _script(python, OPS_SCRIPT, op, "WHEELSMITH-OP ", timeout_s) or {}
            if result.get("phase") == "setup":
                blocked = result
        results.append({"max_error": None, "worst": None, "tolerance": None, "kind": None,
                        "phase": None, "error": None, "seconds": None, **result,
                        "op": op, "module": OPS[op]})
    return results
