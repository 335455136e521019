"""A BERT GGUF's layers in int8 for calls of many texts: MiniLM's English fill, as e5's import.

English memories get a second vector from all-MiniLM-L6-v2, a GGUF that llama.cpp embeds (about
13 ms a chat turn on one thread); the fill after an import spent twice the import's own time on
it. Its six layers are the same BERT layers as e5's, so they run in the same ONNX Runtime graph
(pmem.models.e5_int8.build: int8 products, each token's row its own scale), built from the GGUF's
own weights (read by read_gguf, dequantised by `gguf`, as llama.cpp reads them), measured against
llama.cpp once and kept beside the model (`.int8`). The tokens are llama.cpp's
(LlamaEmbedder.tokenize), the pooling llama.cpp's (the mean of every token's last state, [CLS] and
[SEP] included): a vector within cosine 0.998 of llama.cpp's for the same text, 0.9994 on average
(decision 0070, "MiniLM's fill"). One text, a search's, stays with llama.cpp.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from . import e5_int8
from .e5 import _layer_norm, layers_forward, packs

_PARTS = {"aln": "attn_output_norm", "oln": "layer_output_norm"}
# Input channels of each product kept in float32 (e5_int8.build's `outliers`): MiniLM's rows have
# a few channels far larger than the rest; in int8 with them, 1 - mean cosine to float32 0.00090,
# without 0.00037, for 18% more time (decision 0070, "MiniLM's fill")
OUTLIERS = 16
# The mean and least cosine to llama.cpp's vectors of e5_int8.CALIBRATION a graph must reach when
# it is built, or it is refused (cached so) and llama.cpp embeds every call: a GGUF of the user's
# own is measured before its imports run in int8 (MiniLM: 0.9993 and 0.9974, at "ok": 3 tokens)
FIDELITY = (0.999, 0.995)


def readable(path: Path) -> bool:
    """Whether `path` is a BERT GGUF with mean pooling, the kind this module runs."""
    try:
        _meta(read_gguf(path)[0])
        return True
    except Exception:  # noqa: BLE001  # not a GGUF it can read: llama.cpp alone
        return False


# GGUF's value types: struct formats of the scalars (8: string, 9: array)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Tensor(NamedTuple):
    kind: int  # ggml's type (gguf.GGMLQuantizationType)
    dims: tuple[int, ...]  # ggml's order: dims[0] the row's length
    data: np.ndarray  # its bytes, [rows, bytes a row]


def read_gguf(path: Path) -> tuple[dict, dict[str, Tensor]]:
    """A GGUF's scalar and string metadata (arrays skipped, not read: a vocabulary of 30,000 strings
    took gguf.GGUFReader 1.4 s) and its tensors over a map of the file; ValueError where the file
    is not one, or is cut short."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    buf = np.memmap(path, mode="r")
    raw = memoryview(buf)
    at = 0

    def take(fmt: str):
        nonlocal at
        out = struct.unpack_from("<" + fmt, raw, at)
        at += struct.calcsize("<" + fmt)
        return out[0] if len(out) == 1 else out

    def string() -> str:
        nonlocal at
        n = take("Q")
        if at + n > len(raw):
            raise ValueError("a string past the file's end")
        at += n
        return bytes(raw[at - n : at]).decode("utf-8")

    def value(kind: int):
        nonlocal at
        if kind == 8:
            return string()
        if kind == 9:
            inner, count = take("I"), take("Q")
            if count * (struct.calcsize(_SCALARS[inner]) if inner in _SCALARS else 8) > len(raw) - at:
                raise ValueError("an array past the file's end")  # before a loop of that many
            if inner in _SCALARS:
                at += count * struct.calcsize(_SCALARS[inner])
            else:
                for _ in range(count):
                    value(inner)
            return None
        return take(_SCALARS[kind])

    if bytes(raw[:4]) != b"GGUF" or take("4sI")[1] != 3:
        raise ValueError("not a GGUF file of version 3")
    meta, infos = {}, []
    try:
        n_tensors, n_kv = take("QQ")
        for _ in range(n_kv):
            key = string()
            meta[key] = value(take("I"))
        for _ in range(n_tensors):
            name = string()
            dims = tuple(take("Q") for _ in range(take("I")))
            infos.append((name, dims, take("I"), take("Q")))
    except (struct.error, KeyError) as exc:  # cut short, or a type GGUF does not have
        raise ValueError(f"not a GGUF file pmem can read: {exc}") from None
    align = int(meta.get("general.alignment") or 32)
    start = -(-at // align) * align
    tensors = {}
    for name, dims, kind, offset in infos:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        rows, row = int(np.prod(dims[1:], dtype=np.int64)), dims[0] // block * size
        begin = start + offset
        if begin + rows * row > len(buf):
            raise ValueError(f"{name}: past the file's end")
        tensors[name] = Tensor(kind, dims, buf[begin : begin + rows * row].reshape(rows, row))
    return meta, tensors


def _meta(meta: dict) -> tuple[int, float]:
    """A BERT GGUF's heads and layer norms' epsilon; ValueError for another kind of model."""
    arch = meta.get("general.architecture")
    if (arch, meta.get(f"{arch}.pooling_type")) != ("bert", 1):
        raise ValueError(f"not a BERT GGUF with mean pooling ({arch})")
    return int(meta["bert.attention.head_count"]), float(meta["bert.attention.layer_norm_epsilon"])


class BertInt8:
    """The GGUF's embeddings in numpy and its layers in e5_int8's graph; `tokenize` is the
    llama.cpp model's, which this reproduces (LlamaEmbedder.tokenize: specials added, cut to 512).
    Raises ValueError for another kind of GGUF (readable), or where the graph, measured against
    `reference` when built, was refused."""

    def __init__(self, path: Path | str, tokenize: Callable[[str], list[int]],
                 reference: Callable[[list[list[int]]], np.ndarray] | None = None):
        from gguf import quants

        self.path = Path(path)
        self.tokenize = tokenize
        self.reference = reference  # llama.cpp's unit vectors of token lists: what the graph is measured against
        meta, tensors = read_gguf(self.path)
        self.heads, self.eps = _meta(meta)
        self._dequant = quants.dequantize

        def f32(name: str) -> np.ndarray:
            t = tensors[name]
            return np.ascontiguousarray(quants.dequantize(t.data, t.kind), np.float32).reshape(t.dims[::-1])

        self._word = tensors["token_embd.weight"]  # dequantised a row at a time, as texts need them
        self._pos = f32("position_embd.weight")
        self._type0 = f32("token_types.weight")[0]
        self._emb_ln = (f32("token_embd_norm.weight"), f32("token_embd_norm.bias"))
        self.layers: list[dict] = []
        while f"blk.{len(self.layers)}.attn_q.weight" in tensors:
            b = f"blk.{len(self.layers)}."

            def wb(name: str, b: str = b) -> tuple[np.ndarray, np.ndarray]:
                return f32(b + name + ".weight"), f32(b + name + ".bias")

            q, k, v = wb("attn_q"), wb("attn_k"), wb("attn_v")
            self.layers.append({"qkv": (np.concatenate([q[0], k[0], v[0]]), np.concatenate([q[1], k[1], v[1]])),
                                "ao": wb("attn_output"), "aln": wb(_PARTS["aln"]), "fi": wb("ffn_up"),
                                "fo": wb("ffn_down"), "oln": wb(_PARTS["oln"])})
        self.ffn = self.layers[0]["fi"][0].shape[0]
        st = self.path.stat()
        self.graph = e5_int8.Int8Layers(self.path.with_name(self.path.name + ".int8"),
                                        struct.pack("<4sQQ", b"BERT", st.st_size, st.st_mtime_ns) + bytes([OUTLIERS]),
                                        self.model)

    def _embeddings(self, seqs: list[list[int]]) -> np.ndarray:
        ids = np.fromiter((t for s in seqs for t in s), np.int64)
        pos = np.concatenate([np.arange(len(s)) for s in seqs])
        x = np.asarray(self._dequant(self._word.data[ids], self._word.kind), np.float32).reshape(len(ids), -1)
        x = x + self._pos[pos] + self._type0
        return _layer_norm(x, *self._emb_ln, self.eps)

    def forward(self, seqs: list[list[int]], observe: Callable | None = None) -> np.ndarray:
        """The mean of each sequence's last states, in float32: the graph's calibration."""
        bounds = np.cumsum([0, *map(len, seqs)])
        x = layers_forward(self._embeddings(seqs), list(zip(bounds[:-1].tolist(), bounds[1:].tolist())),
                           self.layers, self.heads, self.ffn, self.eps, observe)
        return np.add.reduceat(x, bounds[:-1], axis=0) / np.diff(bounds).astype(np.float32)[:, None]

    def model(self) -> bytes:
        """The int8 graph: each product's input channel maxima over a float32 pass of
        e5_int8.CALIBRATION, then e5_int8.build, as e5's (E5Embedder.int8_model)."""
        seqs = [self.tokenize(text) for text in e5_int8.CALIBRATION]
        amax = e5_int8.channel_maxima(self.forward, [seqs[a:b] for a, b in packs([len(s) for s in seqs])],
                                      len(self.layers))
        model = e5_int8.build(self.layers, amax, self.heads, self.eps, wide=e5_int8.saturates(), outliers=OUTLIERS)
        if self.reference is not None:
            session = e5_int8.open_session(model)
            got = self.embed(seqs, lambda x, lengths: e5_int8.run(session, x, lengths))
            cos = (got * self.reference(seqs)).sum(axis=1)
            if float(cos.mean()) < FIDELITY[0] or float(cos.min()) < FIDELITY[1]:
                return e5_int8.REFUSED
        return model

    def embed(self, seqs: list[list[int]], run: Callable | None = None) -> np.ndarray:
        """Unit vectors of token lists (LlamaEmbedder.tokenize's), in their order; `run` the
        layers (the cached graph's by default)."""
        run = run or self.graph.run
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        ranked = [seqs[i] for i in order]
        out = np.empty((len(seqs), self.layers[0]["ao"][0].shape[0]), np.float32)
        every = [len(s) for s in ranked]
        for a, b in (cut for span in packs(every) for cut in e5_int8.unpadded(every, *span)):
            lengths = every[a:b]
            bounds = np.cumsum([0, *lengths])
            x = run(self._embeddings(ranked[a:b]), lengths)
            out[order[a:b]] = np.add.reduceat(x, bounds[:-1], axis=0) / np.asarray(lengths, np.float32)[:, None]
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out
