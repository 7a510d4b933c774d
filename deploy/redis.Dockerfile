# Redis from Debian's package on the local base (no image is pulled).
ARG BASE_IMAGE=loopgrade-base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && install -d -o redis -g redis /var/lib/redis
USER redis
EXPOSE 6379
# Append-only file on the volume: queued messages survive a restart (the sweep covers a loss).
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/var/lib/redis", "--appendonly", "yes"]
