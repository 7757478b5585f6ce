#!/usr/bin/env bash
# Sourced by scripts/serve.sh and scripts/test.sh: installs what a fresh machine lacks to build
# Lancet (protoc for lance's build; the wasm32 target for the UDF plugins when $1 = plugins;
# Debian's chromium for the console's browser tests and Debian's Node.js and npm for the
# TypeScript SDK's tests when $1 = plugins, i.e. for the tests).
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v protoc >/dev/null 2>&1; then
  echo "== installing protoc (lance's build needs it)" >&2
  as_root apt-get update -qq
  as_root apt-get install -y -qq protobuf-compiler >&2
fi
if [ "${1:-}" = plugins ] && ! rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown; then
  echo "== adding the wasm32-unknown-unknown target" >&2
  rustup target add wasm32-unknown-unknown
fi
if [ "${1:-}" = plugins ] && ! command -v chromium >/dev/null 2>&1; then
  echo "== installing chromium (the console's browser tests drive it headless)" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium >&2
fi
if [ "${1:-}" = plugins ] && ! { command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; }; then
  echo "== installing Node.js and npm (the TypeScript SDK's tests run on them)" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq nodejs npm >&2
fi
