# PostgreSQL from Debian's package on the local base (no image is pulled).
ARG BASE_IMAGE=loopgrade-base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && install -d -o postgres -g postgres /var/lib/postgresql/data /run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/bin:/bin \
    PGDATA=/var/lib/postgresql/data
USER postgres
EXPOSE 5432
CMD ["postgres-entrypoint.sh"]
