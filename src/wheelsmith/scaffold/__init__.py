"""`wheelsmith recipe new`: a first recipe for a package, read from its sdist on the index.

The role of conda-forge's grayskull and `spack create`: pick the sdist (sdist.py), read its
setup.py without running it (setup_py.py: what the build needs, each finding with its line),
write the recipe and the standard patches it can write itself (render.py, patches.py), and
run the new recipe's configure-only build when that is cheap (check.py).
"""
