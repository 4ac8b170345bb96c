"""What builds it: profiles, their venvs, the target environment, the one choice of
toolchain for a request, pre-flight, the wheel-reading tools and `toolchain new`."""
