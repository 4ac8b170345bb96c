# The runner image for running .github/workflows/nightly.yml under act (scripts/act-nightly.sh):
# the debootstrap'd Debian base (scripts/make-base-image.sh), with what GitHub's hosted image
# has and the workflow uses: git, a C++ compiler, python3 with venv, node for the JavaScript
# actions (the host's, copied in), and a tool cache where actions/setup-python finds its Python
# (the interpreter the host's toolchain venvs were made from, mounted at run time).
ARG BASE=localhost/wheelsmith-base:bookworm
FROM ${BASE}
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      git ca-certificates python3 python3-venv g++ make ccache patchelf zstd \
 && rm -rf /var/lib/apt/lists/*
COPY node /usr/local/bin/node
ARG TOOLCACHE_PYTHON=3.11.7
ARG TOOLCACHE_TARGET=/root/.pyenv/versions/3.11.7
RUN mkdir -p /opt/hostedtoolcache/Python/${TOOLCACHE_PYTHON} \
 && ln -s ${TOOLCACHE_TARGET} /opt/hostedtoolcache/Python/${TOOLCACHE_PYTHON}/x64 \
 && touch /opt/hostedtoolcache/Python/${TOOLCACHE_PYTHON}/x64.complete
ENV RUNNER_TOOL_CACHE=/opt/hostedtoolcache AGENT_TOOLSDIRECTORY=/opt/hostedtoolcache
