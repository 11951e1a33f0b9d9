"""Reference vectors for embed/tests/model.rs, computed apart from toolmesh-embed.

A BERT encoder's forward pass written out in numpy (embeddings, then per
layer: self-attention, add and layer norm, GELU feed-forward, add and layer
norm), mean pooling over the attention mask and L2 normalisation, as
sentence-transformers' all-MiniLM-L6-v2 modules say, over the weights in
model.safetensors, tokenized by Hugging Face's Python `tokenizers`.

    python3 -m pip install numpy safetensors tokenizers
    python3 embed/tests/reference/reference.py "$(bash scripts/search-model.sh)" \
        > embed/tests/reference/all-minilm-l6-v2.json
"""

import json
import math
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

SENTENCES = [
    "Forecast of temperature, rain and wind for a city over the next days",
    "will it rain in Paris tomorrow",
    "Send an email message to one or more recipients",
    "Übersetze diesen Satz ins Japanische, bitte",
    "",
    "東京の天気は？ 🌧️ rain",
    # Past the model's 256 tokens: truncated.
    "weather report for the coast, " * 200,
]


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def embed(weights, config, ids):
    w = lambda name: weights[name].astype(np.float64)
    n = len(ids)
    eps = config["layer_norm_eps"]
    x = w("embeddings.word_embeddings.weight")[ids]
    x = x + w("embeddings.position_embeddings.weight")[:n]
    x = x + w("embeddings.token_type_embeddings.weight")[0]
    x = layer_norm(x, w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"), eps)
    heads = config["num_attention_heads"]
    size = config["hidden_size"] // heads
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        linear = lambda t, name: t @ w(p + name + ".weight").T + w(p + name + ".bias")
        q = linear(x, "attention.self.query").reshape(n, heads, size).transpose(1, 0, 2)
        k = linear(x, "attention.self.key").reshape(n, heads, size).transpose(1, 0, 2)
        v = linear(x, "attention.self.value").reshape(n, heads, size).transpose(1, 0, 2)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores = scores / scores.sum(-1, keepdims=True)
        context = (scores @ v).transpose(1, 0, 2).reshape(n, heads * size)
        attended = linear(context, "attention.output.dense")
        x = layer_norm(attended + x, w(p + "attention.output.LayerNorm.weight"),
                       w(p + "attention.output.LayerNorm.bias"), eps)
        hidden = gelu(linear(x, "intermediate.dense"))
        out = linear(hidden, "output.dense")
        x = layer_norm(out + x, w(p + "output.LayerNorm.weight"), w(p + "output.LayerNorm.bias"), eps)
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def main(model):
    config = json.load(open(f"{model}/config.json"))
    weights = load_file(f"{model}/model.safetensors")
    weights = {k.removeprefix("bert."): v for k, v in weights.items()}
    tokenizer = Tokenizer.from_file(f"{model}/tokenizer.json")
    tokenizer.enable_truncation(256)
    tokenizer.no_padding()
    out = []
    for sentence in SENTENCES:
        ids = tokenizer.encode(sentence).ids
        vector = embed(weights, config, ids)
        out.append({"text": sentence, "tokens": len(ids),
                    "vector": [round(float(x), 7) for x in vector]})
    json.dump(out, sys.stdout, indent=0)
    print()


if __name__ == "__main__":
    main(sys.argv[1])
