# The loopgrade application image: `loopgrade serve` (api) and `loopgrade worker` (worker).
# Built by scripts/build-stack-images.sh on the local Debian base (no image is pulled): the
# context holds the source and the wheels of every dependency, downloaded on the host.
#
# Stage `build` makes the virtualenv from those wheels with no index; stage `runtime` is the
# base plus bubblewrap (the sandbox of the worker), the venv and the source, nothing else: no
# compiler, no pip, no wheel cache. It runs as the unprivileged user `loopgrade`.
ARG BASE_IMAGE=loopgrade-base:bookworm

FROM ${BASE_IMAGE} AS build
LABEL loopgrade.stage=build
COPY wheels/ /tmp/wheels/
COPY requirements.txt /tmp/requirements.txt
RUN python3 -m venv /opt/loopgrade/venv \
 && /opt/loopgrade/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels \
        --only-binary=:all: -r /tmp/requirements.txt \
 && /opt/loopgrade/venv/bin/pip uninstall -y -q pip

FROM ${BASE_IMAGE} AS runtime
# bubblewrap: learner code runs in it inside the worker (docs/deploy.md says what it needs).
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && useradd --system --uid 10001 --home-dir /var/lib/loopgrade --create-home loopgrade
COPY --from=build /opt/loopgrade/venv /opt/loopgrade/venv
COPY src/ /opt/loopgrade/src/
ENV PATH=/opt/loopgrade/venv/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONPATH=/opt/loopgrade/src \
    PYTHONDONTWRITEBYTECODE=1 \
    LANG=C.UTF-8 \
    LOOPGRADE_DATA_DIR=/var/lib/loopgrade \
    LOOPGRADE_SANDBOX=bwrap
RUN python3 -c 'import app.main, app.grading.celery_queue, torch; assert torch.__version__.endswith("+cpu")'
USER loopgrade
WORKDIR /opt/loopgrade/src
EXPOSE 8000
CMD ["python3", "-m", "app.cli", "serve", "--host", "0.0.0.0", "--port", "8000"]
