# ztserve: serve the .zt files under /models over HTTP (TCP 7070) and
# ztp/1 over QUIC (UDP 7070).
#
#   docker build -t ztserve .
#   docker run --read-only -v "$PWD/models:/models:ro" \
#       -p 7070:7070/tcp -p 7070:7070/udp ztserve
#
# Configuration: ZTSERVE_* environment variables, or a TOML file mounted
# into the container and named with --config (or ZTSERVE_CONFIG). Flags win
# over the environment, which wins over the file. deploy/README.md has the
# compose, Kubernetes and systemd variants.
#
# The base images are build arguments, and the file builds with BuildKit
# and with the classic builder alike (no syntax line, no cache mounts):
#   BUILD_IMAGE    the build stage (a Rust toolchain). An image that already
#                  holds /out/ztserve and /out/zt skips the build: the test
#                  suite feeds the binaries it built this way
#                  (tests/container.rs).
#   RUNTIME_IMAGE  the image that ships. If it has no CA certificates they
#                  are installed with apt.
ARG BUILD_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BUILD_IMAGE} AS build
# Marks the build stage's image, left behind by the classic builder, as
# disposable: docker image prune --filter label=org.ztserve.stage=build
LABEL org.ztserve.stage=build
WORKDIR /src
COPY . .
# make: the allocator of ztserve and zt (jemalloc) is built from source.
RUN if [ -x /out/ztserve ] && [ -x /out/zt ]; then \
        echo "using the ztserve and zt binaries of the build image"; \
    else \
        { command -v make >/dev/null \
          || { apt-get update && apt-get install -y --no-install-recommends make; }; } \
        && cargo build --release --locked --bin ztserve --bin zt \
        && mkdir -p /out \
        && cp target/release/ztserve target/release/zt /out/ \
        && strip /out/ztserve /out/zt; \
    fi

FROM ${RUNTIME_IMAGE}
# ca-certificates: `zt fetch` in the image verifies servers by the system roots.
RUN if [ ! -e /etc/ssl/certs/ca-certificates.crt ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --system --uid 10001 --user-group --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin ztserve \
    && mkdir -p /models /var/lib/ztserve /etc/ztserve \
    && chown 10001:10001 /var/lib/ztserve
COPY --from=build /out/ztserve /out/zt /usr/local/bin/
COPY config/ztserve.toml /etc/ztserve/ztserve.toml

# The generated QUIC certificate lives in the state directory: a volume, so
# it survives restarts and the root filesystem can stay read-only.
ENV ZTSERVE_LISTEN=0.0.0.0:7070 \
    ZTSERVE_STATE_DIR=/var/lib/ztserve \
    ZTSERVE_LOG_FORMAT=json
VOLUME ["/models", "/var/lib/ztserve"]
EXPOSE 7070/tcp
EXPOSE 7070/udp
USER 10001:10001
WORKDIR /
# A slim image has no curl; the daemon checks itself.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["ztserve", "healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["ztserve", "--root", "/models"]
