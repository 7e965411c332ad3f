# syntax=docker/dockerfile:1.7
# One image per operator: docker buildx bake <operator>  (see docker-bake.hcl)
#   docker build --build-arg OPERATOR=service-dns -t flotilla-service-dns .
#
# The builder runs the same release build command that `cargo xtask test`
# runs and checks (xtask/src/dist.rs): what is tested is what ships.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM docker.io/library/rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
ARG OPERATOR
RUN test -n "${OPERATOR}" || (echo "build arg OPERATOR is required (e.g. service-dns)" >&2; exit 1)
WORKDIR /src
COPY . .
# Registry and target caches survive between builds (BuildKit cache mounts).
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --package "${OPERATOR}" --bin "${OPERATOR}" \
    && install -D -m 0755 "target/release/${OPERATOR}" "/out/${OPERATOR}"

# glibc, libgcc and CA certificates; no shell, no package manager; UID 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
ARG OPERATOR
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="flotilla-${OPERATOR}" \
      org.opencontainers.image.description="Flotilla operator ${OPERATOR}" \
      org.opencontainers.image.source="https://github.com/flotilla-dev/flotilla" \
      org.opencontainers.image.url="https://github.com/flotilla-dev/flotilla" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="Flotilla"
COPY --from=builder "/out/${OPERATOR}" /usr/local/bin/operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/operator"]
