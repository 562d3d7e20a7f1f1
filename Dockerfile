# syntax=docker/dockerfile:1

# One image, three binaries: the payments API (paymentsapi, the default command),
# the payment provider simulator (providersim) and the ledger projector
# (ledger). docker-compose.yml runs all three.
#
#   docker build -t paymentsapi:dev .
#   docker run --rm -p 127.0.0.1:8080:8080 -e DATABASE_URL=postgres://... paymentsapi:dev
#
# In a container, set DATABASE_URL: dev mode's embedded PostgreSQL is for a
# developer's machine and cannot run on this static, shell-less runtime image.

# ---- build: static binaries ------------------------------------------------
FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 \
    GOFLAGS=-mod=readonly

# Dependencies first, so that this layer is cached until go.mod/go.sum change.
COPY go.mod go.sum ./
RUN go mod download

COPY . .
RUN go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/paymentsapi ./cmd/providersim ./cmd/ledger

# ---- runtime ---------------------------------------------------------------
# distroless static: CA certificates and tzdata, no shell, runs as nonroot (65532).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/paymentsapi /out/providersim /out/ledger /usr/local/bin/
WORKDIR /home/nonroot
USER nonroot:nonroot
EXPOSE 8080
CMD ["/usr/local/bin/paymentsapi"]
