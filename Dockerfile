# One image for every component: koordlet, koord-manager, koord-scheduler, koord-descheduler,
# koord-device-daemon, koord-runtime-proxy (each Deployment or DaemonSet of charts/koordinator
# picks its console script as the command; the runtimeproxy extra brings gRPC for the proxy and
# the koordlet's runtime hook server, the gpu extra NVIDIA's nvidia-ml-py for GPU discovery).
#
# BASE is Debian bookworm with python3 (3.11): hack/image.sh makes it with debootstrap, since
# no image registry is reachable where this project is built; any bookworm image with
# python3 serves. The build stage compiles the C extensions (Cython, cffi) into a virtual
# environment from the pinned dependencies; the runtime stage is the base plus that
# environment.
ARG BASE=localhost/koordinator-py/debian:bookworm

FROM ${BASE} AS build
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      gcc libc6-dev libffi-dev python3-dev python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY requirements/ requirements/
COPY native/ native/
COPY koordinator/ koordinator/
COPY koordlet/ koordlet/
COPY controlplane/ controlplane/
# ca-bundle (optional build secret): the CA certificates pip trusts, for networks that
# reach PyPI through a TLS proxy; it is not kept in the image
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
 && python3 -m venv /opt/koordinator \
 && /opt/koordinator/bin/pip install --no-cache-dir -q --constraint requirements/constraints.txt pip setuptools \
 && /opt/koordinator/bin/pip install --no-cache-dir -q --constraint requirements/constraints.txt \
      --build-constraint requirements/build-constraints.txt '.[runtimeproxy,gpu]' \
 && /opt/koordinator/bin/koordlet --version

FROM ${BASE}
COPY --from=build /opt/koordinator /opt/koordinator
ENV PATH=/opt/koordinator/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# every component starts from its console script; the chart names it as the command
CMD ["koordlet", "--help"]
