# One image for the API and the workers. GPU workers use the same image on a CUDA host with the
# NVIDIA container runtime; the harness needs only torch (+ triton on GPUs) inside it. An AMD
# Instinct worker builds it on a ROCm PyTorch image (docker-compose.yml's worker-rocm-*):
# BASE_IMAGE=rocm/pytorch:<tag>, TORCH_SPEC="" (keep the image's ROCm torch and triton),
# EXTRAS=rocm (amdsmi) and GPU_PACKAGES="amd-aiter" (the control of the FlyDSL suites).
ARG BASE_IMAGE=python:3.12-slim
FROM ${BASE_IMAGE}

# bubblewrap: every build and trial runs in its namespaces (docs/containment.md; the worker's
# container must allow unprivileged user namespaces, README "Deployment")
RUN apt-get update && apt-get install -y --no-install-recommends git build-essential curl bubblewrap \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml setup.py constraints.txt README.md alembic.ini ./
COPY perfbisect ./perfbisect
COPY cli ./cli
COPY service ./service
COPY workers ./workers
COPY kernels ./kernels
COPY migrations ./migrations
COPY dashboards ./dashboards
# TORCH_SPEC lets a GPU image install a CUDA build (e.g. TORCH_SPEC="torch==2.11.0 triton==3.6.0").
ARG TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
ARG EXTRAS=gpu
ARG GPU_PACKAGES=""
RUN if [ -n "${TORCH_SPEC}" ]; then pip install --no-cache-dir ${TORCH_SPEC}; fi \
    && pip install --no-cache-dir ".[${EXTRAS}]" \
    && if [ -n "${GPU_PACKAGES}" ]; then pip install --no-cache-dir ${GPU_PACKAGES}; fi
ENV PERFBISECT_HOME=/var/lib/perfbisect PYTHONUNBUFFERED=1
RUN useradd --create-home perfbisect && mkdir -p /var/lib/perfbisect && chown perfbisect /var/lib/perfbisect
USER perfbisect
EXPOSE 8000
CMD ["perfbisect", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-migrate"]
