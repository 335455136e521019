"""e5's twelve layers as one ONNX Runtime graph, most of its products in int8: bulk embedding only.

An import or a join embeds thousands of passages, and pmem's numpy engine runs their products at
the core's float32 peak. ONNX Runtime's int8 products (VNNI/AVX-512 on x86, dot-product
instructions on ARM) run the same products 3.5-4x faster (decision 0070). This module builds
that graph from the float32 weights pmem.models.e5 already holds, with no `onnx` package: the
protobuf the runtime reads is written here (`_Proto`).

Every product takes its weight as int8 (one scale per output column) and its input quantised a
row at a time: each token's own scale, and a zero point fixed per kind of product (ZERO), which
MatMulIntegerToFloat takes as it is, the rows' scales multiplied in after. A token's row is
coarse where a few input channels run far larger than the rest (the layer norms' outputs), so the
inputs of qkv and the FFN's first product are divided per channel by
c = amax^ALPHA / wmax^(1-ALPHA) first and the weight's rows multiplied by c (SmoothQuant), the
activations' channel maxima `amax` read once from a float32 pass over CALIBRATION; for the
attention's output that division is folded into V's weights, free. The FFN's second product reads
GELU's output, whose rows differ in range more than its channels do: no smoothing. Attention runs
on padded [sequence, head, length, length] blocks (the packs sort their sequences by length
first), every product on the packed tokens.

Within the vectors' tolerance: cosine to pmem's float32 vectors >= 0.9995 on LoCoMo turns, to the
shared reference engine's >= 0.99 (tests/models/test_e5_int8.py). A single text (a search, an add),
and calls of fewer than e5.SPLIT_TOKENS tokens, stay in float32: a search loads none of this.
"""

from __future__ import annotations

import functools
import math
import struct
from pathlib import Path
from typing import Callable

import numpy as np

from .. import paths

ALPHA = 0.7  # SmoothQuant's migration strength: 0.6-0.8 agree to 5e-4 (decision 0070)
FORMAT = b"E5I8v2\0\0"  # the cache file's head: bump when the graph, CALIBRATION or ALPHA change
WIDE_FORMAT = b"E5I8v2w\0"  # the same graph with uint8 weights (saturates())
# Each product's zero point (uint8) for its rows: what its inputs' rows run below 0 against above
# (qkv's and FFN in's smoothed layer norms, about even; FFN out's GELU, never below -0.17)
ZERO = {"qkv": 96, "ao": 128, "fi": 128, "fo": 24}
SLACK = 1.2  # padded tokens a pack's attention may run, against its own (unpadded)

# Texts whose activations set the smoothing: chat turns, facts and notes in the languages pmem's
# users write, short and long. Written for this purpose; changing them changes FORMAT.
CALIBRATION = (
    "I moved to Lisbon in March and started a new job at a small design studio.",
    "Remind me that the dentist appointment is on Tuesday at 9:30.",
    "We talked about the hiking trip: Caroline wants to go in June, Melanie prefers September.",
    "The build fails on CI because the cache key ignores the lock file; fix by hashing poetry.lock.",
    "My favourite books are Dune, The Left Hand of Darkness and anything by Ted Chiang.",
    "Oh wow, that sounds amazing! How long have you been painting?",
    "Use ruff for linting and mypy --strict for the core package only.",
    "Traceback (most recent call last): File \"app.py\", line 12, in <module> KeyError: 'user_id'",
    "SELECT id, text FROM memories WHERE tier = 'core' ORDER BY created_at DESC LIMIT 10;",
    "The quarterly report is due on 2026-03-31 and needs the revenue figures from finance.",
    "Allergic to penicillin; blood type A+; prefers the window seat on long flights.",
    "Thanks! I adopted a rescue dog last weekend, her name is Pepper and she is three years old.",
    "Я переехал в Казань в прошлом году и теперь работаю удалённо программистом.",
    "Напомни мне купить подарок сестре до пятницы, она любит книги по истории.",
    "Ich arbeite seit zwei Jahren als Lehrerin an einer Grundschule in Leipzig.",
    "Morgen um acht Uhr treffe ich Jonas am Hauptbahnhof, wir fahren nach Dresden.",
    "J'ai commencé à apprendre le piano cet hiver, surtout du Chopin et du jazz.",
    "Mi hermana vive en Valencia y tiene dos hijos, Lucía y Mateo.",
    "Prefiero las reuniones por la mañana, antes de las once.",
    "Eu gosto de correr na praia aos domingos, cerca de dez quilómetros.",
    "Domani ho una riunione con il cliente di Milano per il nuovo contratto.",
    "我下个月要去东京出差，需要提前订酒店和新干线的票。",
    "我的女儿今年九岁，喜欢画画和踢足球。",
    "来週の金曜日に友達と京都へ旅行する予定です。",
    "毎朝コーヒーを二杯飲んでから仕事を始めます。",
    "다음 주 월요일에 치과 예약이 있어요.",
    "Wczoraj skończyłem czytać książkę o historii Krakowa.",
    "Yarın sabah İstanbul'a uçuyorum, toplantı saat onda.",
    "أعمل مهندسا في شركة اتصالات في عمّان منذ خمس سنوات.",
    "मैं हर शाम योग करता हूँ और रात को जल्दी सोता हूँ।",
    "Ik heb gisteren mijn fiets laten repareren bij de winkel om de hoek.",
    "Vi flyttade till Göteborg för att min fru fick jobb på universitetet.",
    "Я працюю лікарем у Львові й вільний час проводжу в горах.",
    "ok",
    "thanks, that helps",
    "Meeting notes: decided to ship the importer for Codex sessions first; Gemini next sprint; "
    "the sync format stays at version 3 until the key rotation lands. Action items: Ana writes the "
    "migration, Tom reviews the threat model, I update the docs and the changelog by Friday.",
    "Last summer we drove from Denver to Seattle over eleven days, stopping at Yellowstone, the "
    "Tetons and Glacier; the car broke down near Missoula and a mechanic named Earl fixed the "
    "alternator for ninety dollars, which we still talk about at every family dinner.",
    "Der Vertrag verlängert sich automatisch um zwölf Monate, wenn er nicht drei Monate vor Ablauf "
    "schriftlich gekündigt wird; die Kündigung muss per Einschreiben an die Zentrale gehen.",
    "В субботу мы ходили в Эрмитаж, потом ужинали в грузинском ресторане на Рубинштейна, "
    "а вечером гуляли по набережной до самого развода мостов.",
    "def retry(fn, attempts=3):\n    for i in range(attempts):\n        try:\n            return fn()\n"
    "        except TimeoutError:\n            time.sleep(2 ** i)\n    raise RuntimeError('gave up')",
)

def enabled() -> bool:
    """Whether bulk embedding can run here in int8: onnxruntime importable (a platform without its
    wheel keeps the float32 engine). The setting `embed_bulk` chooses (E5Embedder.use_int8)."""
    return runtime() is not None


@functools.lru_cache(maxsize=1)
def runtime():
    """The onnxruntime module, imported once; None where it is missing or cannot load."""
    try:
        import onnxruntime

        onnxruntime.set_default_logger_severity(3)  # its warnings are not the user's
        return onnxruntime
    except Exception:  # missing, or built for another CPU: the float32 engine stays
        return None


@functools.lru_cache(maxsize=1)
def saturates() -> bool:
    """Whether this CPU's u8 x s8 products saturate: x86 without VNNI (AVX2, or AVX-512 without
    VNNI) multiplies pairs of bytes into 16 bits (vpmaddubsw), and 255 * 127 * 2 overflows it:
    vectors twice as far from float32 (decision 0070). Asked of the runtime itself, by a product
    whose every pair overflows; where it does, the graph takes its weights as uint8 (zero point
    128), which ONNX Runtime multiplies in 16 bits: exact, on every CPU."""
    g = Graph()
    k, n = 64, 16
    g.init("q", np.full((k, n), 127, np.int8))
    g.init("one", np.array(1.0, np.float32))
    g.init("s", np.ones(n, np.float32))
    g.init("z", np.array(0, np.uint8))
    g.node("MatMulIntegerToFloat", ["u", "q", "one", "s", "z"], ["y"], domain="com.microsoft")
    model = g.model([value_info("u", 2, [4, k])], [value_info("y", 1, [4, n])])
    try:
        ort = runtime()
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        y = session.run(None, {"u": np.full((4, k), 255, np.uint8)})[0]
        return not np.all(y == 255 * 127 * k)
    except Exception:  # noqa: BLE001  # a runtime that cannot say: the product that is exact everywhere
        return True


# --- the protobuf ONNX Runtime reads (onnx.proto's field numbers), written without `onnx` -----


def varint(v: int) -> bytes:
    """A protobuf varint; a negative int64 as its ten bytes, as protobuf writes it."""
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if not v:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


class _Proto:
    """Protocol-buffer fields, appended to a byte string."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def num(self, field: int, v: int) -> "_Proto":
        self.parts.append(varint(field << 3) + varint(v))
        return self

    def f32(self, field: int, v: float) -> "_Proto":
        self.parts.append(varint(field << 3 | 5) + struct.pack("<f", v))
        return self

    def raw(self, field: int, v: bytes | str) -> "_Proto":
        data = v.encode() if isinstance(v, str) else v
        self.parts.append(varint(field << 3 | 2) + varint(len(data)) + data)
        return self

    def msg(self, field: int, m: "_Proto") -> "_Proto":
        return self.raw(field, m.done())

    def done(self) -> bytes:
        return b"".join(self.parts)


_TYPES = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3, np.dtype(np.int64): 7}


def _tensor(name: str, a: np.ndarray) -> _Proto:
    t = _Proto()
    for d in a.shape:
        t.num(1, int(d))
    raw = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
    return t.num(2, _TYPES[a.dtype]).raw(8, name).raw(9, raw)


def value_info(name: str, elem: int, dims: list) -> _Proto:
    shape = _Proto()
    for d in dims:
        shape.msg(1, _Proto().raw(2, d) if isinstance(d, str) else _Proto().num(1, d))
    tensor_type = _Proto().num(1, elem).msg(2, shape)
    return _Proto().raw(1, name).msg(2, _Proto().msg(1, tensor_type))


class Graph:
    """Nodes and initialisers; `wide`: product() stores its weights as uint8 (saturates())."""

    def __init__(self, wide: bool = False) -> None:
        self.nodes: list[_Proto] = []
        self.inits: list[_Proto] = []
        self.wide = wide

    def init(self, name: str, a: np.ndarray) -> str:
        self.inits.append(_tensor(name, a))
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], domain: str = "", **attrs) -> str:
        n = _Proto()
        for i in inputs:
            n.raw(1, i)
        for o in outputs:
            n.raw(2, o)
        n.raw(4, op)
        for key, v in attrs.items():
            a = _Proto().raw(1, key)
            if isinstance(v, float):
                a.f32(2, v).num(20, 1)
            elif isinstance(v, int):
                a.num(3, v).num(20, 2)
            else:  # a list of ints
                for x in v:
                    a.num(8, int(x))
                a.num(20, 7)
            n.msg(5, a)
        if domain:
            n.raw(7, domain)
        self.nodes.append(n)
        return outputs[0]

    def model(self, inputs: list[_Proto], outputs: list[_Proto]) -> bytes:
        g = _Proto()
        for n in self.nodes:
            g.msg(1, n)
        g.raw(2, "e5")
        for t in self.inits:
            g.msg(5, t)
        for v in inputs:
            g.msg(11, v)
        for v in outputs:
            g.msg(12, v)
        m = _Proto().num(1, 8).raw(2, "pmem")
        m.msg(8, _Proto().raw(1, "").num(2, 17)).msg(8, _Proto().raw(1, "com.microsoft").num(2, 1))
        return m.msg(7, g).done()


# --- the graph -----------------------------------------------------------------------------------


def channel_maxima(forward: Callable, batches, layers: int) -> list[dict]:
    """Each layer's products' input channel maxima (of |x|) over float32 passes of `batches` (lists
    of token lists): `forward(seqs, observe=...)` shows each product's input (E5Embedder.forward,
    BertInt8.forward). What `build` smooths and picks outliers by."""
    amax: list[dict] = [{} for _ in range(layers)]

    def observe(i: int, part: str, x: np.ndarray) -> None:
        m = np.abs(x).max(axis=0)
        amax[i][part] = np.maximum(amax[i][part], m) if part in amax[i] else m

    for seqs in batches:
        forward(seqs, observe=observe)
    return amax


def smoothing(amax: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per input channel c for activations of channel maxima `amax` and a weight w [out, in]."""
    wmax = np.abs(w).max(axis=0)
    c = np.maximum(amax, 1e-5) ** ALPHA / np.maximum(wmax, 1e-5) ** (1 - ALPHA)
    return np.maximum(c, 1e-5).astype(np.float32)


def quantise(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A weight [out, in] as int8 [in, out] and one float32 scale per output column."""
    scale = np.maximum(np.abs(w).max(axis=1), 1e-12) / 127.0
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return np.ascontiguousarray(q.T), scale.astype(np.float32)


def constants(g: Graph) -> None:
    """What every product of the graph shares."""
    g.init("tiny", np.array(1e-12, np.float32))  # a row of zeros: any scale
    g.init("rows", np.array([-1], np.int64))
    g.init("one", np.array(1.0, np.float32))
    if g.wide:
        g.init("wide_zero", np.array(128, np.uint8))


def product(g: Graph, inp: str, weight: np.ndarray, bias: np.ndarray, c: np.ndarray | None, name: str,
            keep: np.ndarray | None = None) -> str:
    """inp @ weight.T + bias, inp quantised per row: scale r = max(row max / (255 - zero),
    -row min / zero), u = round(inp / r) + zero in uint8; y = r * (u - zero) @ (q * s) + bias.
    With c: inp / c, and the weight's rows times c. With `keep` (input channels): those channels'
    share in float32, the rest in int8, whose rows' scales then leave those channels' outliers
    out. The product's kind (qkv, ao, fi, fo) is the second part of `name`; `g` holds constants()."""
    side = None
    scale_in = np.ones(weight.shape[1], np.float32) if c is None else (1 / c).astype(np.float32)
    if keep is not None and len(keep):
        kept = g.node("Gather", [inp, g.init(name + "ki", keep.astype(np.int64))], [name + "xk"], axis=1)
        side = g.node("MatMul", [kept, g.init(name + "kw", np.ascontiguousarray(weight[:, keep].T, np.float32))],
                      [name + "side"])
        weight = weight.copy()
        weight[:, keep] = 0
        scale_in[keep] = 0
    if c is not None or side is not None:
        inp = g.node("Mul", [inp, g.init(name + "ic", scale_in)], [name + "xs"])
    if c is not None:
        weight = weight * c[None, :]
    q, s = quantise(weight)
    zero = ZERO[name.split(".")[1]]
    hi = g.node("ReduceMax", [inp], [name + "hi"], axes=[-1], keepdims=1)
    lo = g.node("ReduceMin", [inp], [name + "lo"], axes=[-1], keepdims=1)
    hi = g.node("Mul", [hi, g.init(name + "ih", np.array(1 / (255 - zero), np.float32))], [name + "hs"])
    lo = g.node("Mul", [lo, g.init(name + "il", np.array(-1 / zero, np.float32))], [name + "ls"])
    r = g.node("Max", [hi, lo, "tiny"], [name + "r"])  # [T, 1]
    flat = g.node("Reshape", [r, "rows"], [name + "rf"])
    z = g.init(name + "z", np.array(zero, np.uint8))
    zeros = g.node("Expand", [z, g.node("Shape", [flat], [name + "n"])], [name + "zs"])
    u = g.node("QuantizeLinear", [inp, flat, zeros], [name + "u"], axis=0)
    if g.wide:  # q + 128 against a zero point of 128: the same integers, multiplied in 16 bits
        q = (q.astype(np.int16) + 128).astype(np.uint8)
    inputs = [u, g.init(name + "q", q), "one", g.init(name + "s", s), z] + (["wide_zero"] if g.wide else [])
    acc = g.node("MatMulIntegerToFloat", inputs, [name + "acc"], domain="com.microsoft")
    y = g.node("Mul", [acc, r], [name + "yr"])
    if side is not None:
        y = g.node("Add", [y, side], [name + "ys"])
    return g.node("Add", [y, g.init(name + "b", bias.astype(np.float32))], [name + "y"])


def build(layers: list[dict], amax: list[dict], heads: int, eps: float, wide: bool = False,
          outliers: int = 0) -> bytes:
    """The ONNX model of e5's layers: inputs x [T, H] (the embeddings after their layer norm),
    pad [B, L] (each sequence's token rows, padded with any row), unpad [T] (each token's place in
    the padded [B * L]) and bias [B, 1, 1, L] (0 for a token, -1e4 for padding); output y [T, H].
    `layers` are e5's float32 weights (E5Embedder._layer_weights), `amax` each layer's input
    channel maxima of its four products; `wide`: the weights in uint8 (saturates()); `outliers`:
    each product's that many largest input channels (after smoothing) in float32 (MiniLM's)."""
    H = layers[0]["qkv"][0].shape[1]
    hd = H // heads
    g = Graph(wide)
    g.init("pad_shape", np.array([0, 0, heads, hd], np.int64))
    g.init("flat", np.array([-1, H], np.int64))
    g.init("thirds", np.array([H, H, H], np.int64))
    constants(g)

    def top(a: np.ndarray) -> np.ndarray | None:
        return np.sort(np.argsort(a)[-outliers:]) if outliers else None

    x = "x"
    for i, (w, m) in enumerate(zip(layers, amax)):
        p = f"l{i}."
        qkv_w, qkv_b = w["qkv"][0].copy(), w["qkv"][1].copy()
        qkv_w[:H] /= math.sqrt(hd)  # attention's 1/sqrt(d) in Q, exact
        qkv_b[:H] /= math.sqrt(hd)
        c_ao = smoothing(m["ao"], w["ao"][0])
        qkv_w[2 * H :] /= c_ao[:, None]  # the attention output's smoothing in V: ctx = P V is linear in V
        qkv_b[2 * H :] /= c_ao

        c_qkv = smoothing(m["qkv"], qkv_w)
        qkv = product(g, x, qkv_w, qkv_b, c_qkv, p + "qkv.", top(m["qkv"] / c_qkv))
        padded = g.node("Gather", [qkv, "pad"], [p + "padded"], axis=0)  # [B, L, 3H]
        q_, k_, v_ = (p + "q", p + "k", p + "v")
        g.node("Split", [padded, "thirds"], [q_, k_, v_], axis=-1)
        heads_of = {}
        for t, perm in ((q_, [0, 2, 1, 3]), (k_, [0, 2, 3, 1]), (v_, [0, 2, 1, 3])):
            four = g.node("Reshape", [t, "pad_shape"], [t + "4"])
            heads_of[t] = g.node("Transpose", [four], [t + "t"], perm=perm)
        scores = g.node("MatMul", [heads_of[q_], heads_of[k_]], [p + "scores"])
        scores = g.node("Add", [scores, "bias"], [p + "masked"])
        probs = g.node("Softmax", [scores], [p + "probs"], axis=-1)
        ctx = g.node("MatMul", [probs, heads_of[v_]], [p + "ctx4"])  # [B, heads, L, hd]
        ctx = g.node("Transpose", [ctx], [p + "ctxt"], perm=[0, 2, 1, 3])
        ctx = g.node("Reshape", [ctx, "flat"], [p + "ctxf"])
        ctx = g.node("Gather", [ctx, "unpad"], [p + "ctx"], axis=0)  # [T, H], already divided by c_ao
        ao_w = w["ao"][0] * c_ao[None, :]
        ao = product(g, ctx, ao_w, w["ao"][1], None, p + "ao.", top(m["ao"] / c_ao))
        r1 = g.node("Add", [ao, x], [p + "r1"])
        x1 = g.node("LayerNormalization", [r1, g.init(p + "aln.w", w["aln"][0]), g.init(p + "aln.b", w["aln"][1])],
                    [p + "x1"], axis=-1, epsilon=float(eps))
        c_fi = smoothing(m["fi"], w["fi"][0])
        fi = product(g, x1, w["fi"][0], w["fi"][1], c_fi, p + "fi.", top(m["fi"] / c_fi))
        gelu = g.node("Gelu", [fi], [p + "gelu"], domain="com.microsoft")  # exact (erf), as e5 was trained
        fo = product(g, gelu, w["fo"][0], w["fo"][1], None, p + "fo.", top(m["fo"]))
        r2 = g.node("Add", [fo, x1], [p + "r2"])
        out = "y" if i == len(layers) - 1 else p + "out"
        x = g.node("LayerNormalization", [r2, g.init(p + "oln.w", w["oln"][0]), g.init(p + "oln.b", w["oln"][1])],
                   [out], axis=-1, epsilon=float(eps))
    inputs = [value_info("x", 1, ["T", H]), value_info("pad", 7, ["B", "L"]), value_info("unpad", 7, ["T"]),
              value_info("bias", 1, ["B", 1, 1, "L"])]
    return g.model(inputs, [value_info("y", 1, ["T", H])])


def unpadded(lengths: list[int], start: int, end: int, slack: float = SLACK) -> list[tuple[int, int]]:
    """The run start..end of sequences sorted by length, cut where its attention would pad past
    `slack` times its tokens: each sequence of a pack is padded to the pack's longest (a call of
    64 chat turns, one pack: MiniLM's fill 4.1 s, cut at 1.2: 2.9 s; decision 0070)."""
    spans = []
    while start < end:
        cut, used = start + 1, lengths[start]
        while cut < end and (cut - start + 1) * lengths[cut] <= slack * (used + lengths[cut]):
            used += lengths[cut]
            cut += 1
        spans.append((start, cut))
        start = cut
    return spans


def padding(lengths: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The graph's pad [B, L], unpad [T] and bias [B, 1, 1, L] for packed sequences of these lengths."""
    L = max(lengths)
    starts = np.cumsum([0, *lengths[:-1]])
    at = np.arange(L)
    real = at[None, :] < np.asarray(lengths)[:, None]
    pad = np.where(real, starts[:, None] + at[None, :], 0).astype(np.int64)
    unpad = np.flatnonzero(real.reshape(-1)).astype(np.int64)
    bias = np.where(real, np.float32(0), np.float32(-1e4)).astype(np.float32).reshape(len(lengths), 1, 1, L)
    return pad, unpad, bias


REFUSED = b"refused"  # a graph its maker measured and refused (bert_int8): cached, so no process builds it again


def open_session(model: bytes):
    """An ONNX Runtime session of a graph's bytes, one intra-op thread (e5's workers run packs
    side by side)."""
    ort = runtime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def run(session, x: np.ndarray, lengths: list[int]) -> np.ndarray:
    """The graph's layers over packed token rows x [T, H] of sequences of these lengths."""
    pad, unpad, bias = padding(lengths)
    return session.run(None, {"x": np.ascontiguousarray(x, np.float32), "pad": pad, "unpad": unpad, "bias": bias})[0]


class Int8Layers:
    """A session of the graph, built on first use and kept in `cache` (mode 0600, keyed by
    `stamp`: the model file's size and time). Raises ValueError where its maker refused it
    (REFUSED, cached too)."""

    def __init__(self, cache: Path, stamp: bytes, make: Callable[[], bytes]):
        head = (WIDE_FORMAT if saturates() else FORMAT) + stamp
        model = None
        try:
            with open(cache, "rb") as f:
                if f.read(len(head)) == head:
                    model = f.read()
        except OSError:
            pass
        if model and model != REFUSED:
            try:
                self.session = open_session(model)
                return
            except Exception:  # noqa: BLE001  # a cache cut short or written by hand: built again
                pass
        if model != REFUSED:
            model = make()
            try:  # a models directory that cannot be written only costs the next process the build
                paths.write_atomic(cache, head + model, mode=0o600)
            except OSError:
                pass
        if model == REFUSED:
            raise ValueError(f"{cache.name}: the int8 graph was measured and refused")
        self.session = open_session(model)

    def run(self, x: np.ndarray, lengths: list[int]) -> np.ndarray:
        return run(self.session, x, lengths)
