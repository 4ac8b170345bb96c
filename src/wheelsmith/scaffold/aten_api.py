"""Edits to a package's own C++ and CUDA sources that `recipe new` can make exactly: the ATen
spellings every toolchain's torch has removed, each with the one that replaced it.

- `AT_DISPATCH_*(x.type(), ...)`: the dispatch macros take a ScalarType, and no longer the
  DeprecatedTypeProperties `Tensor::type()` returns (auto-gptq 0.7.1: `no suitable conversion
  function from "const at::DeprecatedTypeProperties" to "c10::ScalarType"`), so the first
  argument becomes `x.scalar_type()`;
- `AT_CHECK(...)`, removed for `TORCH_CHECK(...)`, which takes the same arguments (a tree that
  defines AT_CHECK itself, as deepspeed's compat.h does, is left as it is);
- CUB's operator functors, which CUDA 13's CCCL removed (torch-lap-cuda 0.0.3: `namespace "cub"
  has no member "Max"`): `cub::Max` becomes `::cuda::maximum<>`, `cub::Sum` `::cuda::std::plus<>`
  and so on (CUB_FUNCTORS), which cub's own headers include (a tree that defines one of them
  itself is left as it is);
- the trailing `debug_synchronous` argument of CUB's device algorithms, whose overloads CCCL 3
  removed too (megablocks 0.10.0: `no instance of overloaded function
  "megablocks::cub::DeviceScan::ExclusiveSum" matches the argument list`): a last argument
  after the stream that is `true`, `false` or a name holding `debug` is dropped.

What has no exact replacement (THC, removed in torch 1.11) is named by `thc_includes`, with its
file and line, for a hand-made patch.
"""

from __future__ import annotations

import re
from pathlib import Path

from wheelsmith.recipes.patch import file_diff, lines_of, read_exactly
from wheelsmith.scaffold.owntree import own_files

SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".inl"}

DISPATCH_RE = re.compile(r"\bAT_DISPATCH_[A-Z0-9_]+\s*\(")
TYPE_CALL_RE = re.compile(r"\.\s*type\s*\(\s*\)\s*$")
AT_CHECK_RE = re.compile(r"(?<![\w#])AT_CHECK(\s*\()")
DEFINES_AT_CHECK_RE = re.compile(r"^\s*#\s*(?:define|undef)\s+AT_CHECK\b", re.MULTILINE)
# CUB's functors CCCL 3 (CUDA 13) removed, and what its own thread_operators.cuh uses instead
CUB_FUNCTORS = {"Sum": "::cuda::std::plus<>", "Max": "::cuda::maximum<>",
                "Min": "::cuda::minimum<>", "Equality": "::cuda::std::equal_to<>",
                "Inequality": "::cuda::std::not_equal_to<>", "Difference": "::cuda::std::minus<>",
                "Division": "::cuda::std::divides<>"}
CUB_FUNCTOR_RE = re.compile(r"(?<![\w:])(?:::)?cub::(" + "|".join(CUB_FUNCTORS) + r")\b(?!\s*::)")
DEFINES_CUB_FUNCTOR_RE = re.compile(r"\b(?:struct|class|using)\s+(" + "|".join(CUB_FUNCTORS)
                                    + r")\b")
# a call of a CUB device algorithm (cub::DeviceScan::ExclusiveSum, ::cub::DeviceRadixSort::
# SortPairs<K, V>), not hipcub's or another namespace's that ends in "cub"
CUB_DEVICE_CALL_RE = re.compile(r"(?<![\w])cub::Device\w+::\w+\s*(?:<[^<>();]*>\s*)?\(")
_SPACE = r"(?:\s|\\\n)*"  # with a macro's line continuations
DEBUG_ARGUMENT_RE = re.compile(rf"{_SPACE}(?:true|false|(?:[\w.]|->|::)*debug\w*){_SPACE}",
                               re.IGNORECASE)
THC_RE = re.compile(r"\s*#\s*include\s*[<\"]THC/THC\.h[>\"]")
_OPEN, _CLOSE = "([{", ")]}"


def own_sources(tree: Path) -> list[Path]:
    """The package's own C++ and CUDA files (not its third-party, test or build trees), those
    a bounded read takes."""
    return own_files(tree, lambda path: path.suffix.lower() in SUFFIXES, also_not={"build"})


def current(text: str, *, at_check: bool = True, cub: bool = True) -> str:
    """`text` with the removed spellings replaced (AT_CHECK only where `at_check`, CUB's
    functors and debug arguments only where `cub`)."""
    edits = [edit for match in DISPATCH_RE.finditer(text)
             for edit in _type_arguments(text, match.end())]
    for start, end in reversed(edits):
        text = f"{text[:start]}.scalar_type(){text[end:]}"
    text = AT_CHECK_RE.sub(r"TORCH_CHECK\1", text) if at_check else text
    if not cub:
        return text
    return CUB_FUNCTOR_RE.sub(lambda m: CUB_FUNCTORS[m[1]], _without_debug_arguments(text))


def _without_debug_arguments(text: str) -> str:
    """`text` with the trailing `debug_synchronous` argument of each CUB device algorithm's
    call dropped (with its comma): the last of at least three arguments, when it is `true`,
    `false` or a name holding `debug`."""
    drops = []
    for match in CUB_DEVICE_CALL_RE.finditer(text):
        spans = _arguments(text, match.end())
        closed = bool(spans) and text[spans[-1][1]:spans[-1][1] + 1] == ")"
        if closed and len(spans) >= 3 and DEBUG_ARGUMENT_RE.fullmatch(text[slice(*spans[-1])]):
            drops.append((spans[-2][1], spans[-1][1]))
    for start, end in reversed(drops):
        text = text[:start] + text[end:]
    return text


def _type_arguments(text: str, at: int) -> list[tuple[int, int]]:
    """The spans of `.type()` ending an argument of the dispatch macro whose arguments start
    at `at`, among those before its name (the first string literal): the scalar types of
    AT_DISPATCH_*_AND2(t1, t2, TYPE, "name", ...) too."""
    spans = []
    for start, end in _arguments(text, at):
        argument = text[start:end]
        if argument.lstrip().startswith(('"', "u8\"", "L\"")):
            break
        found = TYPE_CALL_RE.search(argument)
        if found:
            spans.append((start + found.start(), start + found.start() + len(
                found[0].rstrip())))
    return spans


def _arguments(text: str, at: int) -> list[tuple[int, int]]:
    """The top-level argument spans of the call whose "(" ends before `at` (to its ")" or the
    text's end; string and character literals skipped)."""
    spans, depth, start, i = [], 0, at, at
    while i < len(text):
        char = text[i]
        if char in "\"'":
            close = text.find(char, i + 1)
            while close != -1 and text[close - 1] == "\\" and text[close - 2] != "\\":
                close = text.find(char, close + 1)
            i = len(text) if close == -1 else close + 1
            continue
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            if depth == 0:
                spans.append((start, i))
                break
            depth -= 1
        elif char == "," and depth == 0:
            spans.append((start, i))
            start = i + 1
        i += 1
    return spans


def diff(tree: Path) -> str:
    """The diff over the package's own sources that use a removed spelling; "" when none
    does."""
    sources = {path: read_exactly(path) for path in own_sources(tree)}
    at_check = not any(DEFINES_AT_CHECK_RE.search(text) for text in sources.values())
    cub = not any(DEFINES_CUB_FUNCTOR_RE.search(text) and "namespace cub" in text
                  for text in sources.values())
    return "".join(file_diff(str(path.relative_to(tree)), text,
                             current(text, at_check=at_check, cub=cub))
                   for path, text in sources.items())


def thc_includes(tree: Path) -> tuple[tuple[str, int], ...]:
    """Where the package's own sources include THC/THC.h: (file, line)."""
    return tuple((str(path.relative_to(tree)), number) for path in own_sources(tree)
                 for number, line in enumerate(lines_of(read_exactly(path)), start=1)
                 if THC_RE.match(line))
