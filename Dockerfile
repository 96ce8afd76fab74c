# One image for every role: `swarm bootstrap`, `swarm node`, `swarm models fetch`, `swarm dashboard`, `swarm doctor`.
# CPU by default; docker-compose.gpu.yml builds it with TORCH_INDEX=cu128 and EXTRAS=[vllm].
# No HF_HUB_OFFLINE here: the CPU services set it (built-in models), a hub model must be downloadable.
#
# Build arguments, all optional (the defaults are the public sources):
#   BASE_IMAGE       the Python 3.11 image both stages start from (default python:3.11-slim)
#   TORCH_INDEX      the PyTorch wheel index: cpu (default), cu128, ...
#   TORCH_INDEX_URL  the whole torch index URL instead (a mirror); default https://download.pytorch.org/whl/$TORCH_INDEX
#   EXTRAS           the project's extras, e.g. [vllm]
#   PIP_ARGS         options for every pip install: a PyPI mirror ("--index-url URL --trusted-host HOST"),
#                    or wheels served over HTTP ("--no-index --find-links URL": torch comes from there too)
# The build stage compiles what is published as source only (pycosat, which reasoning-gym requires); the
# image itself carries no compiler: only the virtualenv /opt/rlswarm and examples/.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ARG TORCH_INDEX=cpu
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${TORCH_INDEX}
ARG EXTRAS=""
ARG PIP_ARGS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/rlswarm/bin:$PATH
RUN command -v cc >/dev/null || { apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*; }
RUN python3 -m venv /opt/rlswarm
# torch first, from the index matching the device (a bare requirement would pull a CUDA build)
RUN pip install ${PIP_ARGS} torch==2.13.0 --index-url "${TORCH_INDEX_URL}"
WORKDIR /src
# the dependencies first, in a layer of their own: editing the sources (or the README) does not reinstall them
COPY pyproject.toml ./
RUN touch README.md && pip install ${PIP_ARGS} ".${EXTRAS}"
COPY README.md ./
COPY protocols protocols
COPY swarm swarm
COPY node node
COPY ops ops
COPY losses losses
RUN pip install ${PIP_ARGS} --no-deps --force-reinstall .

FROM ${BASE_IMAGE}
ENV PYTHONUNBUFFERED=1 PATH=/opt/rlswarm/bin:$PATH SWARM_CACHE_DIR=/cache HF_HOME=/cache/hf
# a user of its own, never root (uid and gid 10001); the mount points are its own, so a new named volume compose
# mounts there starts owned by it (Docker copies the mount point's owner into an empty volume); /identity is its alone
RUN groupadd --system --gid 10001 rlswarm \
    && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/rlswarm rlswarm \
    && mkdir -p /cache /runs /shared /identity && chown 10001:10001 /cache /runs /shared /identity \
    && chmod 700 /identity
COPY --from=build /opt/rlswarm /opt/rlswarm
WORKDIR /app
COPY examples examples
# no VOLUME: docker-compose.yml mounts named volumes at /cache, /runs, /shared and /identity (nothing anonymous is
# left behind)
EXPOSE 31337 9100
USER 10001:10001
ENTRYPOINT ["swarm"]
