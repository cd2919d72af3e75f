# The gpuplan probe image, for `gpuplan probe --emit k8s --image ...` and for Slurm under
# pyxis/enroot (`--emit slurm --image ...`). The base image brings torch, NCCL and the RDMA
# user-space libraries; this adds gpuplan, fio (storage probe), NVML bindings and the AWS
# CLI (the --results-s3 upload).
#
#   docker build -t registry.example.com/gpuplan:0.1 .
#   docker push registry.example.com/gpuplan:0.1
#   AMD:  docker build --build-arg BASE_IMAGE=rocm/pytorch:<tag with torch >= 2.5> -t ... .
#   AWS EFA: add --build-arg EFA_INSTALLER_VERSION=<version> (libfabric with the EFA
#         provider; check that the aws-ofi-nccl plugin is in /opt/amazon, else add it).
#
# torch must be >= 2.5 (gpuplan's probes extra); NGC 25.01 ships a 2.6 pre-release. torch
# is not reinstalled from PyPI: the base image's build is the one matched to its CUDA/NCCL.
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.01-py3
FROM ${BASE_IMAGE}

ARG EFA_INSTALLER_VERSION=
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends fio curl ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN if [ -n "$EFA_INSTALLER_VERSION" ]; then \
      cd /tmp \
      && curl -fsSLO "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" \
      && tar -xzf "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" \
      && cd aws-efa-installer \
      && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify \
      && cd / && rm -rf /tmp/aws-efa-installer*; \
    fi

WORKDIR /opt/gpuplan
COPY pyproject.toml README.md ./
COPY gpuplan ./gpuplan
# the package and the NVML bindings of the probes extra; torch stays the base image's
RUN python -m pip install --no-cache-dir . "nvidia-ml-py>=12.535" awscli \
 && python -c "import torch, gpuplan; v = tuple(int(x) for x in torch.__version__.split('.')[:2]); assert v >= (2, 5), f'torch {torch.__version__} < 2.5: use a newer BASE_IMAGE'" \
 && gpuplan --help >/dev/null \
 && fio --version

# results land here unless the launcher mounts something else (k8s: /results)
WORKDIR /work
CMD ["gpuplan", "probe", "--help"]
