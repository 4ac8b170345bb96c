# wheelsmith build image: a Debian base + the pinned toolchain of one profile + wheelsmith.
#
# Build it with `wheelsmith image build` (podman or docker), which passes:
#   BASE     the base image, pinned by digest in images.lock (refresh with
#            scripts/update-base-image.sh); on machines without a registry, a local base made
#            by scripts/make-base-image.sh (debootstrap + `podman import`)
#   PROFILE  the toolchain profile (toolchains/<PROFILE>.yaml): the same file the host runner
#            installs, so no pin is written twice; PROFILE_KEY is its hash, kept as a label
#   PYTHON   the Python the image builds for: the base's python${PYTHON} package (bookworm 3.11,
#            trixie 3.13, forky 3.14 and 3.15), installed by name; the build fails without it.
#            A testing suite's Release file (forky) carries a Valid-Until date that a mirror
#            frozen at a snapshot outlives: apt still checks its signature, not its age
# Networks that re-sign TLS: the build gives the host's CA bundle to the toolchain step as a
# build secret (podman and docker with BuildKit: `--secret id=host-ca`), mounted at
# /host-ca.crt for that step only and never in the image, and pip uses it. With podman a pip
# mirror directory can be mounted at /mirror.
ARG BASE
FROM ${BASE}

ARG PROFILE=cu130-torch2.14
ARG PROFILE_KEY=unknown
ARG PYTHON=3.11
ARG BASE_ID=unknown
# how the toolchain is made beyond its pins (builder/container.py: LAYOUT); the toolchain step
# names it, so a new layout is a new step for the layer cache
ARG LAYOUT=2
LABEL dev.wheelsmith.profile="${PROFILE}" \
      dev.wheelsmith.python="${PYTHON}" \
      dev.wheelsmith.profile-key="${PROFILE_KEY}" \
      dev.wheelsmith.base="${BASE_ID}" \
      dev.wheelsmith.layout="${LAYOUT}"

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    WHEELSMITH_HOME=/opt/wheelsmith/home \
    WHEELSMITH_CACHE=/opt/wheelsmith/cache

# CUDA 13's nvcc (and torch's check of the host compiler) take GCC < 16; Debian forky's g++
# is 16, so there its g++-15 comes first on PATH, under every name a build calls it by.
RUN apt-get -o Acquire::Check-Valid-Until=false update \
 && apt-get install -y --no-install-recommends "python${PYTHON}" "python${PYTHON}-venv" \
      "python${PYTHON}-dev" g++ ccache ca-certificates \
 && if [ "$(g++ -dumpversion | cut -d. -f1)" -ge 16 ]; then \
      apt-get install -y --no-install-recommends g++-15 \
      && for tool in gcc g++ x86_64-linux-gnu-gcc x86_64-linux-gnu-g++; do \
           ln -s "/usr/bin/${tool#x86_64-linux-gnu-}-15" "/usr/local/bin/$tool"; done \
      && ln -s /usr/bin/gcc-15 /usr/local/bin/cc && ln -s /usr/bin/g++-15 /usr/local/bin/c++; \
    fi \
 && rm -rf /var/lib/apt/lists/* \
 && found=$("python${PYTHON}" -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
 && if [ "$found" != "${PYTHON}" ]; then \
      echo "the base's python${PYTHON} is $found: use the base for ${PYTHON}" >&2; exit 1; fi

# A non-root user for the builds themselves.
RUN useradd --create-home --uid 1000 builder

# wheelsmith's own code is bind-mounted for this step (buildah/BuildKit `RUN --mount`) and, at
# run time, the host mounts its current code over it. podman's layer cache keys this step on
# the instruction and the layers before it (the toolchains/ files), so podman rebuilds it only
# when the pins change; BuildKit (docker) also keys it on the content of what is mounted, so
# docker rebuilds it when pyproject.toml or src/ changes (the package's README is left empty
# here so that documentation edits do not count).
COPY toolchains /opt/wheelsmith/home/toolchains
RUN --mount=type=bind,source=pyproject.toml,target=/mnt/wheelsmith-context/pyproject.toml,ro \
    --mount=type=bind,source=src,target=/mnt/wheelsmith-context/src,ro \
    --mount=type=secret,id=host-ca,target=/host-ca.crt \
    set -e; \
    if [ -s /host-ca.crt ]; then export PIP_CERT=/host-ca.crt; fi; \
    if [ -d /mirror ]; then export PIP_FIND_LINKS=/mirror; fi; \
    mkdir -p /opt/wheelsmith/home/recipes /tmp/wheelsmith-src; \
    cp -r /mnt/wheelsmith-context/pyproject.toml /mnt/wheelsmith-context/src /tmp/wheelsmith-src/; \
    : > /tmp/wheelsmith-src/README.md; \
    "python${PYTHON}" -m venv /opt/wheelsmith/venv; \
    /opt/wheelsmith/venv/bin/pip install --quiet /tmp/wheelsmith-src; \
    rm -rf /tmp/wheelsmith-src; \
    ln -s /opt/wheelsmith/venv/bin/wheelsmith /usr/local/bin/wheelsmith; \
    echo "toolchain layout ${LAYOUT}"; \
    wheelsmith toolchain ensure "${PROFILE}"; \
    chmod -R a+rX /opt/wheelsmith

USER builder
WORKDIR /work
