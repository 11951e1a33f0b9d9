# The toolmesh image: the registry and the sidecar, statically linked, on
# nothing (FROM scratch). It builds offline: no base image is pulled, the
# binaries come from a cargo build on the host. From the repository root:
#
#   scripts/image.sh        # both steps; prints the image's size
#
# or by hand:
#
#   CARGO_TARGET_DIR=target/static RUSTFLAGS="-C target-feature=+crt-static" \
#   CARGO_PROFILE_RELEASE_STRIP=symbols \
#     cargo build --release --locked --target x86_64-unknown-linux-gnu \
#       --bin toolmesh-registry --bin toolmesh-sidecar
#   podman build -t localhost/toolmesh:dev .     # or: docker build -t toolmesh:dev .
#
# (--target is explicit so that only the binaries are static, not the build
# scripts and proc-macros cargo runs on the host.)
#
# The image runs the registry. A sidecar container runs the same image with
# its entrypoint replaced: `command: [/usr/local/bin/toolmesh-sidecar]` in a
# Kubernetes container, `--entrypoint /usr/local/bin/toolmesh-sidecar` for
# podman and docker.
#
# What is in it, and why nothing more:
# - the two binaries. glibc is linked in: glibc >= 2.34 resolves host names
#   from /etc/hosts and DNS without NSS modules, and the container runtime
#   provides /etc/hosts and /etc/resolv.conf. mimalloc is linked in too.
# - no CA certificates: TLS (rediss:// to Redis, https:// HTTP tool
#   backends) trusts the Mozilla roots compiled into the binaries
#   (webpki-roots); a private CA is a mounted file (--redis-ca-file).
# - no shell, no /etc/passwd: the user is numeric, 65532 (distroless'
#   "nonroot"), which Kubernetes' runAsNonRoot accepts.
# - nothing is written to the filesystem, so a read-only root filesystem
#   works.
# - no HEALTHCHECK: there is no program to run one; Kubernetes' native gRPC
#   probes ask grpc.health.v1.Health on the serving port.
FROM scratch

# Where the static binaries are, relative to the build context (the
# repository root). Another directory must be let through by .dockerignore.
ARG BIN_DIR=target/static/x86_64-unknown-linux-gnu/dist
# The workspace's version ([workspace.package] in Cargo.toml);
# scripts/image.sh passes it, charts/tests/test_image.py checks this default.
ARG VERSION=0.1.0
# The commit the binaries were built from; scripts/image.sh passes it.
ARG REVISION=unknown

LABEL org.opencontainers.image.title="toolmesh" \
      org.opencontainers.image.description="gRPC tool registry for LLM agents: the registry (entrypoint) and the sidecar (/usr/local/bin/toolmesh-sidecar)" \
      org.opencontainers.image.source="https://example.invalid/toolmesh" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"

COPY ${BIN_DIR}/toolmesh-registry ${BIN_DIR}/toolmesh-sidecar /usr/local/bin/

# In a container the registry listens on every interface (the binary's own
# default is 127.0.0.1:50051); --listen still wins over this.
ENV TOOLMESH_LISTEN=0.0.0.0:50051
EXPOSE 50051
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/toolmesh-registry"]
