"""Layer norm trains at any batch size; batch norm degrades at small ones (Ba, Kiros & Hinton, 2016).

A small-scale reproduction of the paper's permutation-invariant MNIST experiment (its figure 6) on
scikit-learn's digits (8x8 images, shipped with scikit-learn, no download): the same MLP trained
three ways -- no normalization, batch normalization (NumPy), layer normalization (fastln) -- at
batch sizes 128 and 4, and at batch size 1 for layer norm and no normalization (batch norm cannot
run there: the variance of a batch of one is zero). Pure NumPy plus fastln; the backward passes
are checked against finite differences before training.

    python examples/paper_batch_size.py            # full run, writes paper_batch_size.png
    python examples/paper_batch_size.py --quick    # a few seconds: fewer epochs, less data

Needs the optional extras: pip install "fastln[examples]" (matplotlib, scikit-learn).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

import numpy as np

import fastln

HIDDEN = (128, 128)


# ---- layers: forward(x, train) keeps what backward(dy) needs; backward returns dx and sets grads


class Linear:
    def __init__(self, n_in, n_out, rng, dtype):
        self.params = [
            (rng.standard_normal((n_in, n_out)) * np.sqrt(2.0 / n_in)).astype(dtype),
            np.zeros(n_out, dtype),
        ]

    def forward(self, x, train):
        self.x = x
        return x @ self.params[0] + self.params[1]

    def backward(self, dy):
        self.grads = [self.x.T @ dy, dy.sum(axis=0)]
        return dy @ self.params[0].T


class ReLU:
    params: list = []
    grads: list = []

    def forward(self, x, train):
        self.mask = x > 0
        return x * self.mask

    def backward(self, dy):
        return dy * self.mask


class BatchNorm:
    """Batch normalization in NumPy: batch statistics in training, running averages at test."""

    def __init__(self, n, dtype, eps=1e-5, momentum=0.1):
        self.params = [np.ones(n, dtype), np.zeros(n, dtype)]
        self.eps, self.momentum = eps, momentum
        self.running_mean = np.zeros(n, dtype)
        self.running_var = np.ones(n, dtype)

    def forward(self, x, train):
        if train:
            mean, var = x.mean(axis=0), x.var(axis=0)
            m = self.momentum
            self.running_mean = (1 - m) * self.running_mean + m * mean
            self.running_var = (1 - m) * self.running_var + m * var * len(x) / max(len(x) - 1, 1)
        else:
            mean, var = self.running_mean, self.running_var
        self.rstd = 1.0 / np.sqrt(var + self.eps)
        self.xhat = (x - mean) * self.rstd
        return self.xhat * self.params[0] + self.params[1]

    def backward(self, dy):
        g = dy * self.params[0]
        self.grads = [(dy * self.xhat).sum(axis=0), dy.sum(axis=0)]
        return self.rstd * (g - g.mean(axis=0) - self.xhat * (g * self.xhat).mean(axis=0))


class LayerNorm:
    """fastln's LayerNorm module: its forward keeps the statistics, its backward sets the grads."""

    def __init__(self, n, dtype):
        self.ln = fastln.LayerNorm(n, dtype=dtype)
        self.params = [self.ln.weight, self.ln.bias]

    def forward(self, x, train):
        return self.ln.forward(x)

    def backward(self, dy):
        dx = self.ln.backward(dy)
        self.grads = [self.ln.grad_weight, self.ln.grad_bias]
        return dx


NORMS = {"none": None, "batch norm": BatchNorm, "layer norm": LayerNorm}


class MLP:
    """Linear -> [norm] -> ReLU for each hidden layer, then a linear softmax layer."""

    def __init__(self, n_in, n_out, norm, rng, dtype=np.float32):
        self.layers = []
        for h in HIDDEN:
            self.layers.append(Linear(n_in, h, rng, dtype))
            if NORMS[norm] is not None:
                self.layers.append(NORMS[norm](h, dtype))
            self.layers.append(ReLU())
            n_in = h
        self.layers.append(Linear(n_in, n_out, rng, dtype))

    def logits(self, x, train):
        for layer in self.layers:
            x = layer.forward(x, train)
        return x

    def loss_and_backward(self, x, labels):
        """Mean cross-entropy of the batch; fills every layer's grads."""
        z = self.logits(x, True)
        z = z - z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        n = len(x)
        loss = -logp[np.arange(n), labels].mean()
        dz = np.exp(logp)
        dz[np.arange(n), labels] -= 1
        dz /= n
        for layer in reversed(self.layers):
            dz = layer.backward(dz)
        return float(loss)

    def pairs(self):
        return [(p, g) for layer in self.layers for p, g in zip(layer.params, layer.grads)]

    def error(self, x, labels):
        return float(np.mean(self.logits(x, False).argmax(axis=1) != labels))


class Adam:
    def __init__(self, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, b1, b2, eps
        self.t, self.state = 0, {}

    def step(self, pairs):
        self.t += 1
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        for p, g in pairs:
            m, v = self.state.setdefault(id(p), (np.zeros_like(p), np.zeros_like(p)))
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * g * g
            p -= self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)


# ---- gradient check -------------------------------------------------------------------------------


def gradient_check(rng, n_in=64, n_out=10, batch=6, per_param=8, h=1e-6):
    """Largest relative error between backprop and central differences, over every model kind, in
    float64, on a few entries of every parameter."""
    x = rng.standard_normal((batch, n_in))
    labels = rng.integers(0, n_out, batch)
    worst = {}
    for norm in NORMS:
        model = MLP(n_in, n_out, norm, np.random.default_rng(1), dtype=np.float64)
        for layer in model.layers:  # non-trivial gains and biases
            for p in layer.params[:2] if not isinstance(layer, Linear) else []:
                p += 0.3 * rng.standard_normal(p.shape)
        model.loss_and_backward(x, labels)
        err = 0.0
        for p, g in [(p, g.copy()) for p, g in model.pairs()]:
            for _ in range(per_param):
                i = tuple(rng.integers(0, s) for s in p.shape)
                old = p[i]
                p[i] = old + h
                up = model.loss_and_backward(x, labels)
                p[i] = old - h
                down = model.loss_and_backward(x, labels)
                p[i] = old
                num = (up - down) / (2 * h)
                err = max(err, abs(num - g[i]) / max(abs(num) + abs(g[i]), 1e-7))
        worst[norm] = err
    return worst


# ---- training -------------------------------------------------------------------------------------


def load(quick, seed):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=500, random_state=seed, stratify=y)
    if quick:
        xtr, ytr, xte, yte = xtr[:400], ytr[:400], xte[:200], yte[:200]
    return xtr, ytr, xte, yte


def train(norm, batch, data, epochs, lr, seed):
    xtr, ytr, xte, yte = data
    rng = np.random.default_rng(seed)
    model = MLP(xtr.shape[1], 10, norm, rng)
    opt = Adam(lr)
    errors = []
    for _ in range(epochs):
        order = rng.permutation(len(xtr))
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            if norm == "batch norm" and len(idx) < 2:
                continue  # a batch of one has no variance
            model.loss_and_backward(xtr[idx], ytr[idx])
            opt.step(model.pairs())
        errors.append(model.error(xte, yte))
    return errors


RUNS = [(norm, b) for b in (128, 4, 1) for norm in NORMS if not (norm == "batch norm" and b == 1)]


def plot(results, epochs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"none": "tab:gray", "batch norm": "tab:blue", "layer norm": "tab:red"}
    styles = {128: "-", 4: "--", 1: ":"}
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=90)
    x = np.arange(1, epochs + 1)
    for (norm, b), errs in results.items():  # errs: (seeds, epochs)
        ax.plot(x, 100 * errs.mean(axis=0), styles[b], color=colors[norm], lw=1.6,
                label=f"{norm}, batch {b}")
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"test error (%), mean of {len(errs)} seeds")
    ax.set_ylim(0, 10)
    ax.set_title("digits, permutation-invariant MLP 64-128-128-10, Adam")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _one_blas_thread():
    """The matrices here are tiny: BLAS threads only add overhead (much more on a busy machine)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def main(argv=None):
    with _one_blas_thread():
        return _main(argv)


def _main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few epochs on part of the data")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seeds", type=int, default=None, help="runs per setting (default 3; 1 quick)")
    ap.add_argument("--out", default="paper_batch_size.png", help="the PNG to write ('' for none)")
    args = ap.parse_args(argv)
    epochs = args.epochs or (3 if args.quick else 40)
    seeds = args.seeds or (1 if args.quick else 3)

    worst = gradient_check(np.random.default_rng(0))
    print("gradient check (max relative error, backprop vs central differences, float64):")
    for norm, err in worst.items():
        print(f"  {norm:10s} {err:.1e}")
    if max(worst.values()) > 1e-5:
        print("gradient check FAILED", file=sys.stderr)
        return 1

    data = load(args.quick, 0)
    print(f"digits: {len(data[0])} train, {len(data[2])} test; {epochs} epochs; {seeds} seeds; "
          f"fastln isa {fastln.get_isa()}")
    results = {}
    for norm, b in RUNS:
        t0 = time.perf_counter()
        errs = np.array([train(norm, b, data, epochs, args.lr, s) for s in range(seeds)])
        results[(norm, b)] = errs
        finals = " ".join(f"{100 * e:.1f}" for e in errs[:, -1])
        print(f"  {norm:10s} batch {b:3d}: final test error (%) per seed: {finals}"
              f"  ({time.perf_counter() - t0:.1f} s)", flush=True)

    print("\n| normalization | batch 128 | batch 4 | batch 1 |")
    print("| --- | --- | --- | --- |")
    for norm in NORMS:
        cells = []
        for b in (128, 4, 1):
            if (norm, b) not in results:
                cells.append("n/a")
                continue
            final = 100 * results[(norm, b)][:, -1]
            cells.append(f"{final.mean():.1f}%" + (f" ± {final.std():.1f}" if seeds > 1 else ""))
        print(f"| {norm} | " + " | ".join(cells) + " |")
    spread = " (mean ± std over seeds)" if seeds > 1 else ""
    print(f"\nfinal test error after {epochs} epochs{spread}; lower is better")
    if args.out:
        plot(results, epochs, args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
