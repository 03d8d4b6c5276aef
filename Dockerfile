# The storybus image: the single static storybus binary (operator, bus and
# producer tools) on distroless, as the non-root user 65532.
#
#   docker build -t ghcr.io/storybus/storybus:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg COMMIT=$(git rev-parse HEAD) .
#
# VERSION and COMMIT are stamped into the binary as `make build` stamps them
# (`storybus version`, the storybus_build_info metric).
#
# Without a Docker engine, `make image` builds an equivalent image from scratch
# (internal/image) as bin/storybus-image.tar.
#
# The binary is /usr/local/bin/storybus, on the image's PATH: the operator's
# Deployment (charts/storybus) and the bus pods it makes both run the command
# `storybus` (`storybus operator …`, `storybus serve …`), and any image given
# as --bus-image or a Tenant's spec.image must keep it there. Without
# arguments the image prints the subcommands.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION
ARG COMMIT
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -o /out/storybus ./cmd/storybus \
      -ldflags="-s -w -X github.com/storybus/storybus/internal/buildinfo.version=${VERSION} -X github.com/storybus/storybus/internal/buildinfo.commit=${COMMIT}"

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/storybus /usr/local/bin/storybus
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/storybus"]
CMD ["--help"]
