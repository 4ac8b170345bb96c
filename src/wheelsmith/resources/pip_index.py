"""Run by wheelsmith's own Python: the index its pip uses, resolved by pip itself (PIP_INDEX_URL,
pip's configuration files, else pip's default) and where that came from.

Prints one line of JSON: {"index_url": ..., "origin": ...}. Never imports wheelsmith.
"""

from __future__ import annotations

import json
import os
import sys


def origin(index_url: str) -> str:
    from pip._internal.models.index import PyPI  # noqa: PLC0415 - pip's own default

    if os.environ.get("PIP_INDEX_URL"):
        return "PIP_INDEX_URL"
    if index_url.rstrip("/") == PyPI.simple_url.rstrip("/"):
        return "pip's default"
    return "pip's configuration"


def main() -> None:
    from pip._internal.commands import create_command  # noqa: PLC0415 - pip's own parser

    options, _ = create_command("download").parse_args([])
    url = options.index_url
    sys.stdout.write(json.dumps({"index_url": url, "origin": origin(url)}) + "\n")


if __name__ == "__main__":
    main()
