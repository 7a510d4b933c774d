# The grading runtime: the image the docker sandbox backend runs each learner submission in.
# It holds Python 3.11 with torch (CPU build) and numpy, and nothing of loopgrade: the harness,
# the learner's code and the cases are mounted read-only into each container at run time.
#
# Build it with scripts/build-images.sh, which fetches the pinned wheels into the build context
# (docker build then needs no network) and, where no image can be pulled, first builds a local
# Debian base image to pass as BASE_IMAGE.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
# So that scripts/build-images.sh can remove this stage once the runtime image is built.
LABEL loopgrade.stage=build
COPY wheels/ /tmp/wheels/
COPY runtime-requirements.txt /tmp/runtime-requirements.txt
# --no-index: only the wheels in the context, so the build is the same with or without network.
RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
 && python3 -m venv /opt/loopgrade/venv \
 && /opt/loopgrade/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels \
        --only-binary=:all: -r /tmp/runtime-requirements.txt \
 && /opt/loopgrade/venv/bin/pip uninstall -y -q pip

FROM ${BASE_IMAGE} AS runtime
COPY --from=build /opt/loopgrade/venv /opt/loopgrade/venv
# pip compiled the modules at install: the root is read-only at run time, and nothing is
# compiled again. The check: the CPU build, and it imports.
RUN /opt/loopgrade/venv/bin/python -c 'import numpy, torch, torch.optim; assert torch.__version__.endswith("+cpu"), torch.__version__' \
 && mkdir -p /sandbox /opt/loopgrade/init
ENV PATH=/opt/loopgrade/venv/bin:/usr/local/bin:/usr/bin:/bin \
    LANG=C.UTF-8
# The sandbox overrides the user, the command and the mounts for every run; these defaults
# only make a bare `docker run IMAGE` harmless.
USER 65534:65534
WORKDIR /tmp
CMD ["python3", "-c", "import torch; print(torch.__version__)"]
