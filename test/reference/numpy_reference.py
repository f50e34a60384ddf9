#!/usr/bin/env python3
"""Independent fp64 reference for exported checkpoints: the forward loss of
GPT-2 and LLaMA written from the Hugging Face definitions in plain numpy.

Loads a .safetensors file by Hugging Face names (parsing the format directly,
and rejecting anything the format forbids), the model's config.json (a preset
in compiler/Import/presets/), and the batch weft-run trains on at a given step
(docs/runtime.md, "Data"); prints the mean next-token cross-entropy.

    numpy_reference.py --config gpt2-tiny.json --weights model.safetensors \
        --tokens tokens.bin --step 1 --batch 4 --seq-len 32
"""
import argparse
import json
import sys

import numpy as np

LLMC_MAGIC = 20240520
DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16}


def load_safetensors(path):
    """Name -> fp64 array. Checks the format's rules: header length and JSON,
    dtypes, offsets that tile the data buffer exactly (no holes or overlap),
    sizes matching shapes, and 8-byte alignment of the data."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    n = int.from_bytes(blob[:8], "little")
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} runs past the file")
    if (8 + n) % 8:
        raise ValueError(f"{path}: data starts at {8 + n}, not 8-byte aligned")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    if meta.get("format") != "pt":
        raise ValueError(f"{path}: __metadata__ {meta} lacks format 'pt'")
    data = memoryview(blob)[8 + n:]
    tensors, end = {}, 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        if t["dtype"] not in DTYPES:
            raise ValueError(f"{path}: {name}: dtype {t['dtype']}")
        begin, stop = t["data_offsets"]
        dtype = np.dtype(DTYPES[t["dtype"]]).newbyteorder("<")
        if begin != end:
            raise ValueError(f"{path}: {name} starts at {begin}, expected {end}")
        if stop - begin != int(np.prod(t["shape"])) * dtype.itemsize:
            raise ValueError(f"{path}: {name}: {stop - begin} bytes for shape "
                             f"{t['shape']}")
        tensors[name] = np.frombuffer(data[begin:stop], dtype).reshape(
            t["shape"]).astype(np.float64)
        end = stop
    if end != len(data):
        raise ValueError(f"{path}: {len(data) - end} bytes after the last tensor")
    return tensors


def global_batch(tokens_path, step, batch, seq_len):
    """weft-run's batch for 1-based `step`: sequence i is tokens
    [i*S, i*S + S + 1); 0-based step k takes sequences (k*B + j) mod N."""
    raw = np.fromfile(tokens_path, dtype="<u2")
    header = raw[:512].view("<i4")
    tokens = raw[512:512 + header[2]] if header[0] == LLMC_MAGIC else raw
    count = (len(tokens) - 1) // seq_len
    seqs = [((step - 1) * batch + j) % count for j in range(batch)]
    rows = np.stack([tokens[i * seq_len:i * seq_len + seq_len + 1]
                     for i in seqs]).astype(np.int64)
    return rows[:, :-1], rows[:, 1:]


def causal_attention(q, k, v):
    """q: [B, H, S, D]; k, v: [B, H, S, D] (already expanded for GQA)."""
    s = q.shape[2]
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    return (scores / scores.sum(-1, keepdims=True)) @ v


def heads(x, n):  # [B, S, n*D] -> [B, n, S, D]
    b, s, _ = x.shape
    return x.reshape(b, s, n, -1).transpose(0, 2, 1, 3)


def merge(x):  # [B, H, S, D] -> [B, S, H*D]
    b, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def gpt2_logits(w, cfg, ids):
    def layer_norm(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return ((x - mu) / np.sqrt(var + cfg["layer_norm_epsilon"])
                * w[name + ".weight"] + w[name + ".bias"])

    def conv1d(x, name):  # Hugging Face Conv1D: weight is [in, out]
        return x @ w[name + ".weight"] + w[name + ".bias"]

    def gelu_new(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi)
                                      * (x + 0.044715 * x ** 3)))

    n_head, e = cfg["n_head"], cfg["n_embd"]
    x = w["transformer.wte.weight"][ids] + \
        w["transformer.wpe.weight"][:ids.shape[1]]
    for layer in range(cfg["n_layer"]):
        p = f"transformer.h.{layer}."
        qkv = conv1d(layer_norm(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = (heads(qkv[..., i * e:(i + 1) * e], n_head) for i in range(3))
        x = x + conv1d(merge(causal_attention(q, k, v)), p + "attn.c_proj")
        h = gelu_new(conv1d(layer_norm(x, p + "ln_2"), p + "mlp.c_fc"))
        x = x + conv1d(h, p + "mlp.c_proj")
    # Tied head: the file holds the embedding once.
    return layer_norm(x, "transformer.ln_f") @ w["transformer.wte.weight"].T


def llama_logits(w, cfg, ids):
    def rms_norm(x, name):
        return (x / np.sqrt((x ** 2).mean(-1, keepdims=True) + cfg["rms_norm_eps"])
                * w[name])

    def linear(x, name):  # nn.Linear: weight is [out, in]
        return x @ w[name].T

    def rotate_half(x):
        half = x.shape[-1] // 2
        return np.concatenate([-x[..., half:], x[..., :half]], -1)

    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg["hidden_size"] // n_head
    inv_freq = 1.0 / cfg["rope_theta"] ** (np.arange(0, head_dim, 2) / head_dim)
    angles = np.outer(np.arange(ids.shape[1]), inv_freq)
    cos = np.cos(np.concatenate([angles, angles], -1))
    sin = np.sin(np.concatenate([angles, angles], -1))

    x = w["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, p + "input_layernorm.weight")
        q = heads(linear(h, p + "self_attn.q_proj.weight"), n_head)
        k = heads(linear(h, p + "self_attn.k_proj.weight"), n_kv)
        v = heads(linear(h, p + "self_attn.v_proj.weight"), n_kv)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # GQA: query head i reads key/value head i // (n_head / n_kv).
        k, v = (np.repeat(t, n_head // n_kv, axis=1) for t in (k, v))
        x = x + linear(merge(causal_attention(q, k, v)),
                       p + "self_attn.o_proj.weight")
        h = rms_norm(x, p + "post_attention_layernorm.weight")
        gate = linear(h, p + "mlp.gate_proj.weight")
        up = linear(h, p + "mlp.up_proj.weight")
        x = x + linear(gate / (1 + np.exp(-gate)) * up, p + "mlp.down_proj.weight")
    return linear(rms_norm(x, "model.norm.weight"), "lm_head.weight")


MODELS = {"gpt2": gpt2_logits, "llama": llama_logits}


def loss(weights, cfg, ids, labels):
    """Mean token cross-entropy, in fp64."""
    logits = MODELS[cfg["model_type"]](weights, cfg, ids)
    top = logits.max(-1, keepdims=True)
    logz = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
    picked = np.take_along_axis(logits, labels[..., None], -1)[..., 0]
    return float((logz - picked).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="config.json (a preset)")
    ap.add_argument("--weights", required=True, help=".safetensors file")
    ap.add_argument("--tokens", required=True, help="llm.c or raw uint16 file")
    ap.add_argument("--step", type=int, required=True, help="1-based step")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    args = ap.parse_args()
    cfg = json.load(open(args.config))
    if cfg["model_type"] not in MODELS:
        sys.exit(f"numpy_reference: model_type {cfg['model_type']} not covered")
    ids, labels = global_batch(args.tokens, args.step, args.batch, args.seq_len)
    print(f"{loss(load_safetensors(args.weights), cfg, ids, labels):.17g}")


if __name__ == "__main__":
    main()
