"""A model's files run on this machine as Lancet's model host runs them (models/src/model.rs):
the manifest's truncation, input names, output, pooling and normalisation."""
import json


class LocalModel:
    """An embedding model from its `model.onnx` and `tokenizer.json` and the manifest it is
    (or will be) registered with (a dict, or the path of its JSON). Needs the `local` extra:
    onnxruntime, tokenizers and numpy. Call it with a list of texts."""

    def __init__(self, onnx_path, tokenizer_path, manifest):
        import numpy
        import onnxruntime
        import tokenizers

        if isinstance(manifest, str):
            with open(manifest) as f:
                manifest = json.load(f)
        self._np = numpy
        self.manifest = manifest
        self.pooling = manifest.get("pooling", "mean")
        if self.pooling not in ("mean", "cls", "none"):
            raise ValueError(f"pooling must be mean, cls or none, not {self.pooling!r}")
        self.normalize = bool(manifest.get("normalize", False))
        self.output = manifest["output"]
        self.inputs = {"input_ids": "input_ids", "attention_mask": "attention_mask",
                       **manifest.get("inputs", {})}
        self.tokenizer = tokenizers.Tokenizer.from_file(tokenizer_path)
        # Padding is per text here (one text a run), truncation the manifest's.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(int(manifest["max_tokens"]))
        self.session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        self.dimension = int(manifest["dimension"])

    def __call__(self, texts):
        np = self._np
        out = []
        for text in texts:
            enc = self.tokenizer.encode(text)
            mask = np.array([enc.attention_mask], dtype=np.int64)
            feed = {self.inputs["input_ids"]: np.array([enc.ids], dtype=np.int64),
                    self.inputs["attention_mask"]: mask}
            if self.inputs.get("token_type_ids"):
                feed[self.inputs["token_type_ids"]] = np.array([enc.type_ids], dtype=np.int64)
            hidden = self.session.run([self.output], feed)[0][0]
            if self.pooling == "mean":
                weights = mask[0][:, None].astype(np.float32)
                v = (hidden * weights).sum(0) / max(weights.sum(), 1.0)
            elif self.pooling == "cls":
                v = hidden[0]
            else:
                v = hidden
            v = np.asarray(v, dtype=np.float32)
            if self.normalize:
                norm = float(np.linalg.norm(v))
                v = v / norm if norm > 0 else v
            if v.shape != (self.dimension,):
                raise RuntimeError(f"the model gave a vector of shape {v.shape}, not "
                                   f"({self.dimension},)")
            out.append(v.tolist())
        return out
