"""One wheel: request -> plan -> fetch/patch -> compile -> verify -> smoke -> stamp -> place,
on the host or in a pinned container (runner.py). orchestrate.py knows the order."""
