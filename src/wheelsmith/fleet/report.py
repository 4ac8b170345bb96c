"""Nightly reports: versioned JSON (for tools), Markdown (a CI job summary) and JUnit XML
(CI test views), written atomically into one directory. Each names where it ran (`--where`,
else this machine's CPU and cores): the support table (support.py) shows it beside each
result."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from wheelsmith import __version__
from wheelsmith.files import atomic_write_text
from wheelsmith.fleet.nightly import CellResult
from wheelsmith.fleet.support import table_cell
from wheelsmith.toolchain.platform import host_machine
from wheelsmith.untrusted.text import inert

SCHEMA = 2  # 2: `where`


def this_machine() -> str:
    """Where a report ran when --where does not say: `2-core x86_64`."""
    return f"{len(os.sched_getaffinity(0))}-core {host_machine()}"


def summary(results: list[CellResult]) -> dict[str, int]:
    counts = Counter(r.status for r in results)
    return {"built": counts["built"], "skipped": counts["skipped"], "partial": counts["partial"],
            "failed": counts["failed"], "total": len(results)}


def as_json(results: list[CellResult], *, shard: str | None, where: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "tool": f"wheelsmith {__version__}",
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "where": where,
        "shard": shard,
        "summary": summary(results),
        "cells": [{**r.cell.as_dict(), "status": r.status, "reason": r.reason,
                   "seconds": r.seconds, "wheel": r.wheel, "size": r.size,
                   "archs_found": r.archs_found, "key": r.key, "published": r.published}
                  for r in results],
    }


def as_markdown(results: list[CellResult], *, shard: str | None, where: str) -> str:
    counts = summary(results)
    icon = {"built": "✅ built", "skipped": "⏭️ skipped", "partial": "⏸️ partial",
            "failed": "❌ failed"}
    lines = [f"## wheelsmith nightly{f' (shard {shard})' if shard else ''}", "",
             f"{counts['built']} built, {counts['skipped']} skipped, {counts['partial']} partial, "
             f"{counts['failed']} failed of {counts['total']} cells, on {where}", "",
             "| cell | status | time | wheel | size | SASS | reason |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        size = f"{r.size / 1e6:.1f} MB" if r.size else ""
        lines.append(f"| `{r.cell.id}` | {icon[r.status]} | {r.seconds:.0f} s | "
                     f"{table_cell(r.wheel or '')} | {size} | {', '.join(r.archs_found)} | "
                     f"{table_cell(r.reason)} |")
    return "\n".join(lines) + "\n"


def as_junit(results: list[CellResult]) -> str:
    counts = summary(results)
    suite = ET.Element("testsuite", name="wheelsmith-nightly", tests=str(counts["total"]),
                       failures=str(counts["failed"]),
                       skipped=str(counts["skipped"] + counts["partial"]),
                       time=f"{sum(r.seconds for r in results):.1f}")
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=r.cell.recipe, name=r.cell.id,
                             time=f"{r.seconds:.1f}")
        reason = inert(r.reason)  # anyone's text; XML holds no control characters
        if r.status == "failed":
            ET.SubElement(case, "failure", message=reason[:500]).text = reason
        elif r.status in ("skipped", "partial"):
            ET.SubElement(case, "skipped", message=reason)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write(directory: Path, results: list[CellResult], *, shard: str | None,
          where: str | None = None) -> list[Path]:
    """The three reports; `where` None: this machine (this_machine)."""
    directory.mkdir(parents=True, exist_ok=True)
    where = where or this_machine()
    outputs = {
        "nightly.json": json.dumps(as_json(results, shard=shard, where=where), indent=2) + "\n",
        "nightly.md": as_markdown(results, shard=shard, where=where),
        "junit.xml": as_junit(results),
    }
    for name, text in outputs.items():
        atomic_write_text(directory / name, text)
    return [directory / name for name in outputs]
