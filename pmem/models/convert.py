"""Turn a BERT-family sentence-transformers folder into a GGUF that llama.cpp embeds with.

Only gguf, safetensors (numpy framework) and numpy are needed, so pmem can ship an embedding
model as a plain safetensors wheel and build the GGUF on the user's machine without PyTorch.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np

from ..errors import ModelError

PHANTOM_SPACE = "\u2581"  # llama.cpp's WPM tokenizer prefixes every word with this
_UNUSED = re.compile(r"^\[unused\d+\]$")
_SPECIALS = ("cls", "sep", "unk", "pad", "mask")


def _read_json(path: Path) -> dict:
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def _special_ids(model_dir: Path, vocab: dict[str, int]) -> dict[str, int]:
    """Ids of [CLS] [SEP] [UNK] [PAD] [MASK], from the tokenizer files where they name them."""
    names = {k: f"[{k.upper()}]" for k in _SPECIALS}
    for fname in ("special_tokens_map.json", "tokenizer_config.json"):
        for key, value in _read_json(model_dir / fname).items():
            if key.endswith("_token") and key[:-6] in names:
                token = value.get("content") if isinstance(value, dict) else value
                if isinstance(token, str):
                    names[key[:-6]] = token
    missing = [t for t in names.values() if t not in vocab]
    if missing:
        raise ModelError(f"{model_dir}: vocab.txt lacks special tokens {', '.join(missing)}")
    return {k: vocab[t] for k, t in names.items()}


def _wpm_vocab(tokens: list[str], control: set[int]):
    """Rewrite a WordPiece vocab the way llama.cpp looks tokens up.

    llama.cpp marks a word start with a phantom space ("▁word") and a continuation as the bare
    piece ("##ing" -> "ing"); special and unused "[...]" tokens keep their text.
    """
    import gguf

    out, types = [], []
    for i, tok in enumerate(tokens):
        if i in control:
            out.append(tok)
            types.append(gguf.TokenType.CONTROL)
        elif _UNUSED.match(tok):
            out.append(tok)
            types.append(gguf.TokenType.UNUSED)
        elif tok.startswith("##") and len(tok) > 2:
            out.append(tok[2:])
            types.append(gguf.TokenType.NORMAL)
        else:
            out.append(PHANTOM_SPACE + tok)
            types.append(gguf.TokenType.NORMAL)
    return out, types


def convert_bert_safetensors(model_dir: Path, out: Path, dtype: str = "f16") -> Path:
    """Write `out` (atomically) from config.json + model.safetensors + vocab.txt in `model_dir`."""
    import gguf
    from safetensors import safe_open

    model_dir, out = Path(model_dir), Path(out)
    if dtype not in ("f16", "f32"):
        raise ValueError("dtype must be 'f16' or 'f32'")
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        if not (model_dir / name).is_file():
            raise ModelError(f"{model_dir}: missing {name}")
    cfg = _read_json(model_dir / "config.json")
    if cfg.get("model_type", "bert") != "bert":
        raise ModelError(f"{model_dir}: model_type {cfg.get('model_type')!r} is not bert")
    tok_cfg = _read_json(model_dir / "tokenizer_config.json")
    pool_cfg = _read_json(model_dir / "1_Pooling" / "config.json")

    tokens = (model_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    vocab = {t: i for i, t in enumerate(tokens)}
    ids = _special_ids(model_dir, vocab)
    wpm_tokens, wpm_types = _wpm_vocab(tokens, set(ids.values()))
    if len(set(wpm_tokens)) != len(wpm_tokens):
        raise ModelError(f"{model_dir}: vocab.txt has tokens that collide after rewriting")

    n_layer = int(cfg["num_hidden_layers"])
    pooling = gguf.PoolingType.CLS if pool_cfg.get("pooling_mode_cls_token") else gguf.PoolingType.MEAN
    lowercase = bool(tok_cfg.get("do_lower_case", True))
    strip_accents = tok_cfg.get("strip_accents")
    strip_accents = lowercase if strip_accents is None else bool(strip_accents)

    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        w = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
        w.add_name(model_dir.name if model_dir.name != "model" else model_dir.parent.name)
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
        w.add_context_length(int(cfg.get("max_position_embeddings", 512)))
        w.add_embedding_length(int(cfg["hidden_size"]))
        w.add_feed_forward_length(int(cfg["intermediate_size"]))
        w.add_block_count(n_layer)
        w.add_head_count(int(cfg["num_attention_heads"]))
        w.add_layer_norm_eps(float(cfg.get("layer_norm_eps", 1e-12)))
        w.add_causal_attention(False)
        w.add_pooling_type(pooling)

        w.add_tokenizer_model("bert")
        w.add_token_list(wpm_tokens)
        w.add_token_types(wpm_types)
        w.add_token_type_count(int(cfg.get("type_vocab_size", 2)))
        w.add_bos_token_id(ids["cls"])  # llama.cpp prepends BOS; for BERT that is [CLS]
        w.add_uint32("tokenizer.ggml.cls_token_id", ids["cls"])
        w.add_sep_token_id(ids["sep"])
        w.add_unk_token_id(ids["unk"])
        w.add_pad_token_id(ids["pad"])
        w.add_mask_token_id(ids["mask"])
        w.add_add_bos_token(True)
        w.add_add_sep_token(True)
        w.add_add_eos_token(False)
        w.add_bool("tokenizer.ggml.normalizer.lowercase", lowercase)
        w.add_bool("tokenizer.ggml.normalizer.strip_accents", strip_accents)

        name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layer)
        with safe_open(str(model_dir / "model.safetensors"), framework="numpy") as st:
            for key in st.keys():
                stripped = key[5:] if key.startswith("bert.") else key
                if stripped.startswith("pooler.") or stripped.endswith("position_ids"):
                    continue  # sentence-transformers pools itself; position_ids is a buffer
                new = name_map.get_name(stripped, try_suffixes=(".weight", ".bias"))
                if new is None:
                    raise ModelError(f"{model_dir}: unexpected tensor {key}")
                data = st.get_tensor(key)
                # llama.cpp adds token_types' row to the input as-is, so it must stay f32
                half = dtype == "f16" and data.ndim >= 2 and new != "token_types.weight"
                want = np.float16 if half else np.float32
                w.add_tensor(new, np.ascontiguousarray(data.astype(want)))

        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


def quantize_q8_0(src: Path, out: Path) -> Path:
    """Write `out` (atomically): the GGUF `src` with its weight matrices in llama.cpp's Q8_0 (8
    bits and a scale per 32 weights), by llama.cpp's own quantizer. MiniLM's query embedding
    costs ~25% less CPU and a memory ~15% less than from f16, its vectors at cosine >= 0.999 to
    f16's (docs/decisions/0019-second-vector-cost.md)."""
    import ctypes

    from .loading import open_gguf

    src, llama_cpp = open_gguf(src)
    out = Path(out)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    params.nthread = 1  # ~0.3 s for MiniLM; once per machine
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
        if rc != 0:
            raise ModelError(f"cannot quantize {src.name} (llama.cpp code {rc})")
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out
