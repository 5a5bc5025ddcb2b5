# syntax=docker/dockerfile:1
# The one image behind both chart components (`daemonguard webhook`, `daemonguard controller`).
# Build: docker build --build-arg VERSION=$(git describe --tags --always) -t ghcr.io/daemonguard/daemonguard:dev .
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ... (Go cross-compiles; no emulation).

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so source edits reuse the module download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
    -ldflags "-s -w -X github.com/daemonguard/daemonguard/internal/cli.Version=${VERSION}" \
    -o /out/daemonguard ./cmd/daemonguard

# Static binary on distroless: no shell, no package manager, runs as uid 65532 (the chart's
# runAsUser), and nothing is written to the root filesystem (the chart mounts it read-only).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/daemonguard /daemonguard
USER 65532:65532
ENTRYPOINT ["/daemonguard"]
