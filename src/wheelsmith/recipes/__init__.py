"""What to build: recipe files and their models, the recipe repositories, the known-bad
rules, and getting a source (fetch) into the exact state the recipe pins (patch)."""
