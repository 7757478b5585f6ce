"""Embedding models through Lancet's model API (`/v1/model/...`), against a reference computed
here by Python's own onnxruntime and tokenizers with the same model, tokenizer, truncation and
pooling: every vector must agree (cosine >= 0.9999). Also every bad input the registry and a
call must refuse, tenant isolation, and a server without ONNX Runtime.

The model is all-MiniLM-L6-v2 (int8) as `scripts/models.sh` fetches it."""
import hashlib
import json
import os
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np
import onnxruntime
import pytest
import tokenizers

from conftest import Lancet

MODELS = os.environ.get("LANCET_MODELS_DIR", os.path.expanduser("~/.cache/lancet/models"))
ORT = os.path.join(MODELS, "libonnxruntime.so.1.31.1")
ONNX = os.path.join(MODELS, "minilm", "model.onnx")
TOKENIZER = os.path.join(MODELS, "minilm", "tokenizer.json")
MAX_TOKENS = 256

TEXTS = [
    "A cat sits on the mat.",
    "A kitten is resting on a rug.",
    "The stock market fell sharply today.",
    "Lance is a columnar format for machine learning data.",
    "Ünïcödé, emoji 🚀 and 中文 mixed together.",
    "",
    "one",
    "word " * 600,  # cut to MAX_TOKENS
    "Short.",
    "How do I create a table, add a column and search it by vector?",
]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def sha(data):
    return hashlib.sha256(data).hexdigest()


def manifest(onnx=None, tokenizer=None, **over):
    m = {
        "files": {"model.onnx": sha(onnx or read(ONNX)), "tokenizer.json": sha(tokenizer or read(TOKENIZER))},
        "dimension": 384,
        "max_tokens": MAX_TOKENS,
        "pooling": "mean",
        "normalize": True,
        "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                   "token_type_ids": "token_type_ids"},
        "output": "last_hidden_state",
    }
    m.update(over)
    return m


def reference(texts):
    """What sentence-transformers computes, with onnxruntime and tokenizers directly."""
    tok = tokenizers.Tokenizer.from_file(TOKENIZER)
    tok.no_padding()
    tok.enable_truncation(MAX_TOKENS)
    session = onnxruntime.InferenceSession(ONNX, providers=["CPUExecutionProvider"])
    out = []
    for text in texts:
        enc = tok.encode(text)
        feed = {
            "input_ids": np.array([enc.ids], dtype=np.int64),
            "attention_mask": np.array([enc.attention_mask], dtype=np.int64),
            "token_type_ids": np.array([enc.type_ids], dtype=np.int64),
        }
        hidden = session.run(["last_hidden_state"], feed)[0][0]
        mask = feed["attention_mask"][0][:, None].astype(np.float32)
        v = (hidden * mask).sum(0) / mask.sum()
        out.append(v / np.linalg.norm(v))
    return np.array(out)


def call(server, path, body=None, data=None, key=None):
    """(status, JSON answer) of a POST, errors included."""
    try:
        if data is not None:
            return 200, server.post(path, data=data, content_type="application/octet-stream", key=key)
        return 200, server.post(path, body, key=key)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def get(server, path, key=None):
    req = urllib.request.Request(server.base + path, headers={"authorization": f"Bearer {key or server.key}"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def upload(server, data, key=None):
    status, answer = call(server, "/v1/model/file", data=data, key=key)
    assert status == 200, answer
    assert (answer["sha256"], answer["size"]) == (sha(data), len(data))
    return answer["sha256"]


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory() as d:
        s = Lancet(d, args=["--onnxruntime", ORT])
        try:
            upload(s, read(ONNX))
            upload(s, read(TOKENIZER))
            status, answer = call(s, "/v1/model/minilm/create", manifest())
            assert status == 200, answer
            yield s
        finally:
            s.stop()


def test_register_describe_list(server):
    described = server.post("/v1/model/minilm/describe")
    assert described["name"] == "minilm"
    assert described["manifest"]["files"]["model.onnx"] == sha(read(ONNX))
    assert len(described["digest"]) == 64
    listed = get(server, "/v1/model/list")["models"]
    assert [m["name"] for m in listed] == ["minilm"]
    assert listed[0]["digest"] == described["digest"]
    # Registering the same name again is refused; the first stays.
    status, answer = call(server, "/v1/model/minilm/create", manifest())
    assert status == 409 and "already exists" in answer["error"], answer


def test_vectors_equal_the_reference(server):
    answer = server.post("/v1/model/minilm/embed", {"texts": TEXTS})
    got = np.array(answer["vectors"], dtype=np.float32)
    assert got.shape == (len(TEXTS), 384)
    assert answer["dimension"] == 384
    want = reference(TEXTS)
    cosines = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cosines.min() >= 0.9999, list(zip(TEXTS, cosines))
    # Meaning, not just equality to a reference: cat ~ kitten, far from the stock market.
    assert got[0] @ got[1] > got[0] @ got[2] + 0.3
    # The long text was cut to MAX_TOKENS tokens.
    one_long = server.post("/v1/model/minilm/embed", {"texts": [TEXTS[7]]})
    assert one_long["tokens"] == MAX_TOKENS


def test_bad_calls_are_400s_naming_the_problem(server):
    cases = [
        ({"texts": []}, "at least one text"),
        ({"texts": ["x" * (2 << 20)]}, "more than the 65536 allowed"),
        ({"texts": ["ok"] * 1025}, "1025 texts"),
        ({"text": ["a"]}, "text"),
    ]
    for body, words in cases:
        status, answer = call(server, "/v1/model/minilm/embed", body)
        assert status == 400 and words in answer["error"], (body if len(str(body)) < 100 else words, answer)
    status, answer = call(server, "/v1/model/nope/embed", {"texts": ["a"]})
    assert status == 404 and "not registered" in answer["error"], answer


def test_bad_models_are_refused_and_nothing_is_stored(server):
    onnx, tok = read(ONNX), read(TOKENIZER)
    not_a_model = b"this is not an onnx graph at all"
    truncated = onnx[: len(onnx) // 3]
    upload(server, not_a_model)
    upload(server, truncated)
    cases = [
        # A file never uploaded (or a sha256 that does not match the bytes uploaded).
        ("a", manifest(onnx=onnx + b"x"), "no uploaded file has the sha256"),
        ("b", manifest(onnx=not_a_model), "not a model ONNX Runtime can load"),
        ("c", manifest(onnx=truncated), "not a model ONNX Runtime can load"),
        ("d", manifest(output="sentence_embedding"), "no output 'sentence_embedding'"),
        ("e", manifest(inputs={"input_ids": "ids", "attention_mask": "attention_mask"}),
         "names input 'ids'"),
        ("f", manifest(dimension=768), "has shape"),
        ("g", manifest(pooling="max"), "pooling must be"),
        ("h", manifest(files={"model.onnx": sha(onnx)}), "tokenizer.json"),
        ("i", manifest(extra=1), "extra"),
        ("j", manifest(tokenizer=not_a_model), "not a tokenizers file"),
    ]
    for name, body, words in cases:
        got, answer = call(server, f"/v1/model/{name}/create", body)
        assert got == 400 and words in answer["error"], (name, answer)
    status, answer = call(server, "/v1/model/a%2F..%2Fx/create", manifest())
    assert status in (400, 404), answer
    names = [m["name"] for m in get(server, "/v1/model/list")["models"]]
    assert names == ["minilm"], names


def test_manifest_name_in_body_must_match_path(server):
    status, answer = call(server, "/v1/model/other/create", {**manifest(), "name": "minilm"})
    assert status == 400 and "differs" in answer["error"], answer


def test_tenants_do_not_see_each_others_models(server):
    key = server.new_key("other-tenant", "write")
    assert get(server, "/v1/model/list", key=key)["models"] == []
    status, answer = call(server, "/v1/model/minilm/embed", {"texts": ["a"]}, key=key)
    assert status == 404, answer
    # Its own registration of the same files works, and is its own.
    upload(server, read(ONNX), key=key)
    upload(server, read(TOKENIZER), key=key)
    status, answer = call(server, "/v1/model/mine/create", manifest(), key=key)
    assert status == 200, answer
    assert [m["name"] for m in get(server, "/v1/model/list", key=key)["models"]] == ["mine"]
    assert [m["name"] for m in get(server, "/v1/model/list")["models"]] == ["minilm"]
    # A read-only key may embed but not register.
    reader = server.new_key("other-tenant", "read")
    v = server.post("/v1/model/mine/embed", {"texts": ["a"]}, key=reader)["vectors"]
    assert len(v[0]) == 384
    status, _ = call(server, "/v1/model/x/create", manifest(), key=reader)
    assert status == 403


def test_drop_removes_the_model_and_its_unshared_files(server):
    upload(server, read(ONNX))
    upload(server, read(TOKENIZER))
    status, answer = call(server, "/v1/model/temp/create", manifest(max_tokens=128))
    assert status == 200, answer
    assert server.post("/v1/model/temp/drop")["dropped"] == "temp"
    status, _ = call(server, "/v1/model/temp/describe")
    assert status == 404
    # minilm names the same files: they stay, and it still embeds.
    assert len(server.post("/v1/model/minilm/embed", {"texts": ["still here"]})["vectors"]) == 1
    status, _ = call(server, "/v1/model/temp/drop")
    assert status == 404


def test_a_server_without_onnx_runtime_says_so():
    with tempfile.TemporaryDirectory() as d:
        s = Lancet(d, args=["--onnxruntime", os.path.join(d, "missing.so")])
        try:
            upload(s, read(ONNX))
            upload(s, read(TOKENIZER))
            status, answer = call(s, "/v1/model/m/create", manifest())
            assert status == 400 and "ONNX Runtime" in answer["error"], answer
            # Everything else still works.
            assert s.post("/v1/namespace/$/exists") is not None
        finally:
            s.stop()


def test_a_tenants_model_files_are_bounded_and_stale_uploads_collected():
    # An allowance of 24 MiB: the model's two files (~23.4 MB) and one more MB fit, not two.
    with tempfile.TemporaryDirectory() as d:
        s = Lancet(d, args=["--onnxruntime", ORT, "--tenant-model-storage-mb", "24",
                            "--model-upload-grace-s", "2"])
        try:
            upload(s, read(ONNX))
            upload(s, read(TOKENIZER))
            status, answer = call(s, "/v1/model/m/create", manifest())
            assert status == 200, answer
            extra, more = os.urandom(1_000_000), os.urandom(1_000_000)
            upload(s, extra)
            status, answer = call(s, "/v1/model/file", data=more)
            assert status == 413 and "allowance of 25165824 bytes" in answer["error"], answer
            upload(s, extra)  # bytes already stored take nothing more
            # Once the grace period has passed, an upload no model names is deleted at the
            # tenant's next upload; the registered model's files stay.
            time.sleep(2.5)
            upload(s, more)
            status, answer = call(s, "/v1/model/other/create", manifest(onnx=extra))
            assert status == 400 and "no uploaded file has the sha256" in answer["error"], answer
            assert len(s.post("/v1/model/m/embed", {"texts": ["still here"]})["vectors"]) == 1
        finally:
            s.stop()
