# A slim runtime image of Lancet: the stripped `lancet` binary and the Python UDF runner.
#   docker build --build-arg LANCET_COMMIT=$(git rev-parse --short=12 HEAD) -t lancet .
#   docker run -p 8080:8080 -v lancet-data:/data -e LANCET_BOOTSTRAP_KEY=change-me lancet
# Not built by the tests (the build machines run no Docker engine); it builds the same binary
# as README command 1. See docs/building.md.

FROM rust:1.95-bookworm AS build
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends protobuf-compiler python3-venv >/dev/null \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# No .git in the build context: the commit `lancet --version` prints comes from here.
ARG LANCET_COMMIT=unknown
ENV LANCET_COMMIT=${LANCET_COMMIT} CARGO_TARGET_DIR=/src/target LANCET_CACHE_DIR=/src/cache
RUN cargo build --release --locked --bin lancet \
 && cp "$(bash scripts/build-python-runner.sh)" /src/runner.wasm

# The image of the Ray nodes that run backfill tasks (deploy/kubernetes/raycluster.yaml, docs/ray.md):
#   docker build --target ray -t lancet-ray .
# Ray's own image (its Python runs the driver), plus the same `lancet` binary and runner, and
# bubblewrap for the native Python tier (docs/ray.md says what its interpreter needs; this
# image is not built by the tests: the build machines run no Docker engine).
FROM rayproject/ray:2.60.0-py311 AS ray
USER root
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends bubblewrap ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/lancet /usr/local/bin/lancet
COPY --from=build /src/runner.wasm /usr/local/lib/lancet/runner.wasm
ENV LANCET_PYTHON_RUNNER=/usr/local/lib/lancet/runner.wasm \
    LANCET_CACHE_DIR=/var/cache/lancet
USER ray

# The server's image (the default target: the last stage).
FROM debian:bookworm-slim
# ca-certificates: TLS to object stores and package indexes. Nothing else is needed at run
# time: the binary links only glibc, and Python UDFs run in the Wasm runner, not a system Python.
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 999 --home-dir /data --create-home lancet
COPY --from=build /src/target/release/lancet /usr/local/bin/lancet
COPY --from=build /src/runner.wasm /usr/local/lib/lancet/runner.wasm
ENV LANCET_PYTHON_RUNNER=/usr/local/lib/lancet/runner.wasm \
    LANCET_CACHE_DIR=/data/.cache \
    LANCET_DATA=/data/lancet-data \
    LANCET_ADDR=0.0.0.0:8080
USER lancet
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["lancet"]
CMD ["serve"]
