#!/usr/bin/env bash
# Installs what a fresh machine lacks, by what it is for ($1):
#   (none)    protoc, for lance's build (sourced by scripts/serve.sh and scripts/test.sh);
#   plugins   also the wasm32 target, for the UDF plugins;
#   clients   only Debian's chromium (the console's browser tests), Debian's Node.js and npm
#             (the TypeScript SDK's tests), bubblewrap and Debian's python3 (the native Python
#             tier's sandbox and interpreter): scripts/test.sh runs this while the build runs.
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if [ "${1:-}" != clients ] && ! command -v protoc >/dev/null 2>&1; then
  echo "== installing protoc (lance's build needs it)" >&2
  as_root apt-get update -qq
  as_root apt-get install -y -qq protobuf-compiler >&2
fi
if [ "${1:-}" = plugins ] && ! rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown; then
  echo "== adding the wasm32-unknown-unknown target" >&2
  rustup target add wasm32-unknown-unknown
fi
if [ "${1:-}" = clients ] && ! command -v chromium >/dev/null 2>&1; then
  echo "== installing chromium (the console's browser tests drive it headless)" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium >&2
fi
if [ "${1:-}" = clients ] && ! { command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; }; then
  echo "== installing Node.js and npm (the TypeScript SDK's tests run on them)" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq nodejs npm >&2
fi
if [ "${1:-}" = clients ] && ! { command -v bwrap >/dev/null 2>&1 && [ -x /usr/bin/python3 ]; }; then
  echo "== installing bubblewrap and python3 (the native Python tier's sandbox)" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq bubblewrap python3 >&2
fi
