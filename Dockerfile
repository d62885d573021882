# syntax=docker/dockerfile:1
# SPDX-License-Identifier: Apache-2.0
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 --target nr1-agent \
#   --build-arg VERSION=$(make -s version) --build-arg REVISION=$(git rev-parse HEAD) .
# Offline, `make image` builds the same images (same files, entrypoint and user, both
# platforms) from this file's final stages with deploy/local/ociimage.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X main.version=$VERSION" -o /out/ ./cmd/nr1-agent ./cmd/nr1-load
# nr1-load32: nr1-load for the 32-bit sibling of the target, whose system calls enter
# the kernel through its compat entries.
RUN case "$TARGETARCH" in amd64) a=386 ;; arm64) a=arm ;; *) echo "no 32-bit sibling of $TARGETARCH" >&2; exit 1 ;; esac && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$a GOARM=7 go build -trimpath \
      -ldflags "-s -w -X main.version=$VERSION" -o /out/nr1-load32 ./cmd/nr1-load

FROM scratch AS nr1-load
ARG VERSION=dev
ARG REVISION
LABEL org.opencontainers.image.title="nr1-load"
LABEL org.opencontainers.image.source="https://github.com/neureality-sdk/nr1-agent"
LABEL org.opencontainers.image.version="${VERSION}"
LABEL org.opencontainers.image.revision="${REVISION}"
LABEL org.opencontainers.image.licenses="Apache-2.0"
COPY LICENSE /LICENSE
COPY --from=build /out/nr1-load /nr1-load
COPY --from=build /out/nr1-load32 /nr1-load32
USER 0:0
ENTRYPOINT ["/nr1-load"]

# The agent runs privileged as root: it reads every process's /proc, loads BPF programs
# and writes cgroups.
# Its BPF programs are dual-licensed, as the kernel asks of programs using its GPL helpers.
FROM scratch AS nr1-agent
ARG VERSION=dev
ARG REVISION
LABEL org.opencontainers.image.title="nr1-agent"
LABEL org.opencontainers.image.source="https://github.com/neureality-sdk/nr1-agent"
LABEL org.opencontainers.image.version="${VERSION}"
LABEL org.opencontainers.image.revision="${REVISION}"
LABEL org.opencontainers.image.licenses="Apache-2.0 AND (GPL-2.0-only OR BSD-2-Clause)"
COPY LICENSE /LICENSE
COPY LICENSES/GPL-2.0-only.txt /LICENSES/GPL-2.0-only.txt
COPY LICENSES/BSD-2-Clause.txt /LICENSES/BSD-2-Clause.txt
COPY --from=build /out/nr1-agent /nr1-agent
USER 0:0
ENTRYPOINT ["/nr1-agent"]
