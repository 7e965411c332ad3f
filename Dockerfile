# syntax=docker/dockerfile:1.7
# One image per operator: docker buildx bake <operator>  (see docker-bake.hcl)
#   docker build --build-arg OPERATOR=service-dns -t flotilla-service-dns .
#
# The builder runs the same release build command that `cargo xtask test`
# runs and checks (xtask/src/dist.rs): what is tested is what ships.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# The builder runs on the build machine's own platform and cross-compiles
# for the image's (no QEMU for the Rust build: an emulated arm64 build takes
# hours). Only the final stage is of the target platform, and it runs nothing.
FROM --platform=$BUILDPLATFORM docker.io/library/rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
ARG OPERATOR
ARG TARGETARCH
RUN test -n "${OPERATOR}" || (echo "build arg OPERATOR is required (e.g. service-dns)" >&2; exit 1)
# The Rust target and, when it differs from the build machine's, the C
# cross toolchain that ring (TLS) compiles with and the linker.
RUN --mount=type=cache,id=apt-${TARGETARCH},target=/var/cache/apt,sharing=locked \
    set -eu; \
    case "${TARGETARCH}" in \
      amd64) triple=x86_64-unknown-linux-gnu; gnu=x86_64-linux-gnu; gcc=gcc-x86-64-linux-gnu; deb=amd64 ;; \
      arm64) triple=aarch64-unknown-linux-gnu; gnu=aarch64-linux-gnu; gcc=gcc-aarch64-linux-gnu; deb=arm64 ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
    esac; \
    echo "${triple}" > /rust-target; \
    rustup target add "${triple}"; \
    if [ "$(dpkg --print-architecture)" != "${deb}" ]; then \
      apt-get update && apt-get install -y --no-install-recommends "${gcc}" "libc6-dev-${deb}-cross"; \
      env_triple="$(echo "${triple}" | tr 'a-z-' 'A-Z_')"; \
      { echo "export CARGO_TARGET_${env_triple}_LINKER=${gnu}-gcc"; \
        echo "export CC_$(echo "${triple}" | tr '-' '_')=${gnu}-gcc"; \
        echo "export AR_$(echo "${triple}" | tr '-' '_')=${gnu}-ar"; } > /cross-env; \
    else \
      : > /cross-env; \
    fi
WORKDIR /src
COPY . .
# Registry and target caches survive between builds (BuildKit cache mounts;
# the target directory per platform, so amd64 and arm64 builds never share
# or lock each other's). Every image's binary is built in one invocation, as
# `cargo xtask dist` builds and checks them: one build of the dependencies
# with one feature set (per-package builds each rebuilt them with their own),
# and the next image of the same platform finds them all built.
RUN --mount=type=cache,id=cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=cargo-target-${TARGETARCH},target=/src/target,sharing=locked \
    . /cross-env && target="$(cat /rust-target)" \
    && cargo build --release --locked --package config-copier --package load-tester --package pod-alert --package pod-debugger --package service-dns --package loadgen --target "${target}" \
    && install -D -m 0755 "target/${target}/release/${OPERATOR}" "/out/${OPERATOR}"

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
