"""`lancet.embed` outside the sandbox: through a Lancet server's model API, or a model
registered in this process with `use_model`."""
import json
import os
import urllib.error
import urllib.parse
import urllib.request

# The sandbox sends at most this many texts per host call (the server's default
# `--model-max-rows`); a longer list is split the same way here.
CALL_TEXTS = 1024

_models = {}
_server = {}


def connect(url, api_key=None):
    """Embeds through the Lancet server at `url` (its `POST /v1/model/{name}/embed`), with the
    tenant of `api_key`: the models that tenant registered, run by the server."""
    _server.update(url=url.rstrip("/"), api_key=api_key)


def use_model(name, model):
    """Embeds `name` with `model` in this process: a `LocalModel`, or any callable taking a
    list of texts and returning a list of vectors. Overrides the server for that name."""
    if not callable(model):
        raise TypeError("a model is a callable: texts -> vectors")
    _models[name] = model


def embed(model, texts):
    """One vector (a list of floats) per text, by the model named `model`. Raises
    RuntimeError with the server's message when it refuses, as in the sandbox."""
    if isinstance(texts, str):
        raise TypeError("lancet.embed takes a list of texts, not one string")
    texts = list(texts)
    if not all(isinstance(x, str) for x in texts):
        raise TypeError("lancet.embed takes texts (str)")
    out = []
    for i in range(0, len(texts), CALL_TEXTS):
        out.extend(_embed_call(str(model), texts[i:i + CALL_TEXTS]))
    return out


def _embed_call(model, texts):
    if model in _models:
        return [list(map(float, v)) for v in _models[model](texts)]
    url = _server.get("url") or os.environ.get("LANCET_URL")
    key = _server.get("api_key") or os.environ.get("LANCET_API_KEY")
    if not url:
        raise RuntimeError(f"no model '{model}' here: call lancet.use_model('{model}', ...) or "
                           "lancet.connect(url, api_key) (or set LANCET_URL)")
    request = urllib.request.Request(
        f"{url.rstrip('/')}/v1/model/{urllib.parse.quote(model, safe='')}/embed",
        data=json.dumps({"texts": texts}).encode(), method="POST",
        headers={"content-type": "application/json",
                 **({"authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(request) as answer:
            return json.loads(answer.read())["vectors"]
    except urllib.error.HTTPError as e:
        try:
            detail = json.loads(e.read()).get("detail") or e.reason
        except ValueError:
            detail = e.reason
        raise RuntimeError(f"embedding with '{model}': {e.code} {detail}") from None
