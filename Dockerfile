# One image for every role: `swarm bootstrap`, `swarm node`, `swarm doctor`, `swarm local`.
# CPU by default; the GPU profile of docker-compose.yml builds with TORCH_INDEX=cu128 and EXTRAS=[vllm].
# No HF_HUB_OFFLINE here: the CPU services set it (built-in models), a hub model must be downloadable.
FROM python:3.11-slim
ARG TORCH_INDEX=cpu
ARG EXTRAS=""
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 SWARM_CACHE_DIR=/cache HF_HOME=/cache/hf
WORKDIR /app
# torch first, from the index matching the device (a bare requirement would pull a CUDA build)
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/${TORCH_INDEX}
COPY pyproject.toml README.md ./
COPY protocols protocols
COPY swarm swarm
COPY node node
COPY losses losses
RUN pip install ".${EXTRAS}"
COPY examples examples
VOLUME ["/cache", "/runs", "/shared"]
EXPOSE 31337 9100
ENTRYPOINT ["swarm"]
