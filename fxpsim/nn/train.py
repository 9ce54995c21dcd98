"""Training: optimizers, learning-rate schedules, ``fit``, ``evaluate`` and model save/load.

Everything is float32 numpy; ``fit`` is deterministic: the model's initial weights come from the seeds
given when it was built, and ``fit(seed=...)`` fixes the order of the mini-batches, so the same seeds give
the same trained weights bit for bit. The layers multiply with :func:`fxpsim.nn.repro.matmul`, whose sums are
exact, so the bits depend neither on the BLAS kernel (AVX2 or AVX-512) nor on its thread count; ``fit`` also
runs BLAS/OpenMP on one thread by default (:func:`thread_limit`), the fastest for these small matrices.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import time
import zipfile
import zlib

import numpy as np

from .layers import Module, SoftmaxCrossEntropy, layer_from_config

__all__ = ["Optimizer", "SGD", "Adam", "StepLR", "CosineLR", "fit", "evaluate", "predict",
           "save_model", "load_model", "thread_limit"]


# ------------------------------------------------------------------------------------------ schedules
class StepLR:
    """Step decay by epoch: :math:`\\eta_e = \\eta_0\\, \\gamma^{\\lfloor e / s \\rfloor}`."""

    def __init__(self, lr: float, step_size: int, gamma: float = 0.1):
        if lr <= 0 or step_size < 1 or not 0 < gamma <= 1:
            raise ValueError(f"StepLR needs lr > 0, step_size >= 1, 0 < gamma <= 1; got {lr}, {step_size}, {gamma}")
        self.lr, self.step_size, self.gamma = float(lr), int(step_size), float(gamma)

    def __call__(self, epoch: int) -> float:
        return self.lr * self.gamma ** (epoch // self.step_size)

    def __repr__(self):
        return f"StepLR(lr={self.lr}, step_size={self.step_size}, gamma={self.gamma})"


class CosineLR:
    """Cosine annealing by epoch over ``epochs``:
    :math:`\\eta_e = \\eta_{min} + \\tfrac12 (\\eta_0 - \\eta_{min})(1 + \\cos(\\pi e / E))`."""

    def __init__(self, lr: float, epochs: int, min_lr: float = 0.0):
        if lr <= 0 or epochs < 1 or not 0 <= min_lr <= lr:
            raise ValueError(f"CosineLR needs lr > 0, epochs >= 1, 0 <= min_lr <= lr; got {lr}, {epochs}, {min_lr}")
        self.lr, self.epochs, self.min_lr = float(lr), int(epochs), float(min_lr)

    def __call__(self, epoch: int) -> float:
        t = min(epoch, self.epochs) / self.epochs
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1.0 + math.cos(math.pi * t))

    def __repr__(self):
        return f"CosineLR(lr={self.lr}, epochs={self.epochs}, min_lr={self.min_lr})"


# ------------------------------------------------------------------------------------------ optimizers
class Optimizer:
    """Base optimizer: ``step(params, grads)`` updates the arrays of ``params`` in place.

    ``lr`` is a float or a schedule ``epoch -> lr`` (:class:`StepLR`, :class:`CosineLR`, any callable);
    :func:`fit` calls :meth:`start_epoch` before each epoch. ``weight_decay`` (L2, added to the gradient)
    applies to parameters whose name ends in ``W`` (weights), not to biases, batch-norm or quantizer
    parameters.

    For speed, every step works on one flat vector of all gradients (a few vector operations instead of a
    few per parameter); the state (``m``, ``v``, momentum) lives in flat buffers and ``state[name]`` holds
    views of each parameter's slice. A parameter that appears, disappears or changes shape keeps its state.
    """

    _n_slots = 0          # state vectors per parameter (Adam: m and v; SGD with momentum: v)

    def __init__(self, lr=1e-3, weight_decay: float = 0.0):
        if not callable(lr) and not (lr > 0):
            raise ValueError(f"{type(self).__name__}: lr must be > 0 or a schedule, got {lr!r}")
        if weight_decay < 0:
            raise ValueError(f"{type(self).__name__}: weight_decay must be >= 0, got {weight_decay}")
        self.lr, self.weight_decay = lr, float(weight_decay)
        self.current_lr = float(lr(0)) if callable(lr) else float(lr)
        self.iterations = 0
        self.state: dict[str, tuple[np.ndarray, ...]] = {}
        self._layout = None

    def start_epoch(self, epoch: int) -> float:
        """Set ``current_lr`` from the schedule for ``epoch`` (0-based) and return it."""
        if callable(self.lr):
            self.current_lr = float(self.lr(epoch))
        return self.current_lr

    def _relayout(self, layout, dtype):
        """New flat state buffers for ``layout``; per-name state carried over where shapes still match."""
        total = sum(int(np.prod(shape)) for _, shape in layout)
        self._flat_state = [np.zeros(total, dtype=dtype) for _ in range(self._n_slots)]
        self._slices, new_state, offset = [], {}, 0
        for name, shape in layout:
            size = int(np.prod(shape))
            views = tuple(buf[offset:offset + size].reshape(shape) for buf in self._flat_state)
            old = self.state.get(name)
            if old is not None and old[0].shape == shape:
                for dst, src in zip(views, old):
                    dst[...] = src
            new_state[name] = views
            self._slices.append((offset, size, shape))
            offset += size
        self.state = new_state
        self._decay_mask = np.concatenate([np.full(int(np.prod(shape)), name.rsplit(".", 1)[-1] == "W", dtype)
                                           for name, shape in layout]) if layout else np.zeros(0, dtype)
        self._layout = layout

    def step(self, params: dict, grads: dict) -> None:
        """One update of every parameter from its gradient (both dicts keyed by parameter name)."""
        names = [n for n in params if grads.get(n) is not None]
        if not names:
            return
        self.iterations += 1
        dtype = np.result_type(*(params[n].dtype for n in names))
        layout = tuple((n, params[n].shape) for n in names)
        if layout != self._layout or self._flat_state and self._flat_state[0].dtype != dtype:
            self._relayout(layout, dtype)
        g = np.concatenate([np.ravel(grads[n]) for n in names]).astype(dtype, copy=False)
        if self.weight_decay:
            g = g + self.weight_decay * self._decay_mask * np.concatenate([params[n].ravel() for n in names])
        delta = self._delta(g)
        for name, (offset, size, shape) in zip(names, self._slices):
            params[name] -= delta[offset:offset + size].reshape(shape)

    def _delta(self, g: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """The flat update ``delta`` (``p -= delta``) for the flat gradient ``g``."""
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent with (optionally Nesterov) momentum, PyTorch form:
    :math:`v \\leftarrow \\mu v + g`, :math:`p \\leftarrow p - \\eta\\, v`
    (Nesterov: :math:`p \\leftarrow p - \\eta (g + \\mu v)`); the first step sets :math:`v = g`."""

    def __init__(self, lr=1e-2, momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0):
        super().__init__(lr, weight_decay)
        if not 0 <= momentum < 1:
            raise ValueError(f"SGD: momentum must be in [0, 1), got {momentum}")
        self.momentum, self.nesterov = float(momentum), bool(nesterov)
        self._n_slots = 1 if self.momentum else 0

    def _delta(self, g):
        if not self.momentum:
            return self.current_lr * g
        (v,) = self._flat_state        # starts at 0, so the first step sets v = g
        v *= self.momentum
        v += g
        return self.current_lr * (g + self.momentum * v if self.nesterov else v)


class Adam(Optimizer):
    """Adam (Kingma & Ba 2015), PyTorch form, with :math:`t` the step count:

    .. math:: m \\leftarrow \\beta_1 m + (1-\\beta_1) g, \\quad v \\leftarrow \\beta_2 v + (1-\\beta_2) g^2, \\quad
              p \\leftarrow p - \\frac{\\eta}{1-\\beta_1^t} \\frac{m}{\\sqrt{v / (1-\\beta_2^t)} + \\epsilon}
    """

    _n_slots = 2

    def __init__(self, lr=1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.0):
        super().__init__(lr, weight_decay)
        if not (0 <= beta1 < 1 and 0 <= beta2 < 1 and eps > 0):
            raise ValueError(f"Adam needs 0 <= beta1, beta2 < 1 and eps > 0; got {beta1}, {beta2}, {eps}")
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)

    def _delta(self, g):
        m, v = self._flat_state
        t = self.iterations
        m *= self.beta1
        m += (1.0 - self.beta1) * g
        v *= self.beta2
        g *= g
        g *= 1.0 - self.beta2
        v += g
        denom = np.sqrt(v)
        denom *= 1.0 / math.sqrt(1.0 - self.beta2 ** t)
        denom += self.eps
        np.divide(m, denom, out=denom)
        denom *= self.current_lr / (1.0 - self.beta1 ** t)
        return denom


# ------------------------------------------------------------------------------------------ data checks
def _check_data(data, model_dtype, where):
    """Validate ``(x, y)``: float array without NaN/inf, integer labels [N] (range checked by the loss)."""
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise TypeError(f"{where}: data must be a pair (x, y), got {type(data).__name__}")
    x, y = data
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{where}: x must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype != model_dtype:
        raise TypeError(f"{where}: x must have dtype {model_dtype.name} (the model's), got {x.dtype.name}")
    y = np.asarray(y)
    if y.dtype.kind not in "iu":
        raise TypeError(f"{where}: labels y must be integers, got dtype {y.dtype}")
    if x.ndim < 2 or x.shape[0] == 0:
        raise ValueError(f"{where}: x must be a non-empty batch [N, ...], got shape {list(x.shape)}")
    if y.shape != (x.shape[0],):
        raise ValueError(f"{where}: y must have shape [{x.shape[0]}] (one label per sample), got {list(y.shape)}")
    if y.min() < 0:
        raise ValueError(f"{where}: labels must be >= 0, got min {y.min()}")
    if not np.isfinite(x).all():
        raise ValueError(f"{where}: x holds {int(x.size - np.isfinite(x).sum())} NaN/inf value(s)")
    return x, y


def _check_labels_fit(logits, y, where):
    if y.max() >= logits.shape[1]:
        raise ValueError(f"{where}: labels must lie in [0, {logits.shape[1] - 1}] for a model with "
                         f"{logits.shape[1]} outputs, got max {y.max()}")


# ------------------------------------------------------------------------------------------ fit / evaluate
def check_threads(threads, where: str = "threads") -> None:
    """``threads`` must be ``None`` or an int in 1..the machine's CPU count (more threads than CPUs only
    spin: 10^5 ran 64 BLAS threads on 2 CPUs, 23x slower)."""
    if threads is None:
        return
    cpus = os.cpu_count() or 1
    if isinstance(threads, (bool, np.bool_)) or not isinstance(threads, (int, np.integer)):
        raise TypeError(f"{where} must be None or an int in 1..{cpus}, got {threads!r}")
    if not 1 <= int(threads) <= cpus:
        raise ValueError(f"{where} must be None or an int in 1..{cpus} (this machine's CPUs), got {threads!r}")


def thread_limit(threads: int | None):
    """Context manager capping BLAS and OpenMP threads (via threadpoolctl, a scikit-learn dependency).

    The training matrices here are small: one thread is fastest (several threads spin and, on a loaded
    machine, run many times slower), and OpenBLAS's results can depend on the thread count, so a fixed
    count also keeps training bit-for-bit reproducible across machines. ``None`` leaves threads alone.
    """
    check_threads(threads)
    if threads is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=int(threads))


def predict(model: Module, x: np.ndarray, batch_size: int = 512, threads: int | None = 1) -> np.ndarray:
    """Model outputs (logits) in eval mode, in batches; the model's mode is restored afterwards."""
    check_threads(threads, "predict: threads")
    was_training = model.training
    model.eval()
    try:
        with thread_limit(threads):
            return np.concatenate([model.forward(x[i:i + batch_size]) for i in range(0, len(x), batch_size)])
    finally:
        model.train(was_training)


def evaluate(model: Module, x: np.ndarray, y: np.ndarray, batch_size: int = 512) -> dict:
    """Eval-mode loss and accuracy: ``{"loss": mean cross-entropy, "accuracy": fraction correct}``."""
    x, y = _check_data((x, y), model.dtype, "evaluate")
    logits = predict(model, x, batch_size)
    _check_labels_fit(logits, y, "evaluate")
    loss = SoftmaxCrossEntropy().forward(logits, y)
    return {"loss": loss, "accuracy": float(np.mean(logits.argmax(axis=1) == y))}


def _run_epoch(model, x, y, batch_size, optimizer, loss_fn, rng, epoch, epochs, bar_cls, history, val_data):
    """One epoch of :func:`fit` (appends to ``history``)."""
    n = len(y)
    n_batches = -(-n // batch_size)
    lr = optimizer.start_epoch(epoch)
    model.train()
    order = rng.permutation(n)
    total_loss, correct = 0.0, 0
    bar = bar_cls(total=n_batches, desc=f"epoch {epoch + 1}/{epochs}", leave=False,
                  unit="batch") if bar_cls else None
    start = time.perf_counter()
    for b in range(n_batches):
        idx = order[b * batch_size:(b + 1) * batch_size]
        xb, yb = x[idx], y[idx]
        model.zero_grad()
        logits = model.forward(xb)
        if b == 0 and epoch == 0:
            _check_labels_fit(logits, y, "fit")
        total_loss += loss_fn.forward(logits, yb) * len(idx)
        correct += int(np.count_nonzero(logits.argmax(axis=1) == yb))
        model.backward(loss_fn.backward(), input_grad=False)
        optimizer.step(*model.parameters_and_grads())
        if bar is not None:
            bar.update(1)
            if b % 10 == 9 or b == n_batches - 1:
                seen = min((b + 1) * batch_size, n)
                bar.set_postfix(loss=f"{total_loss / seen:.4f}", acc=f"{correct / seen:.4f}", refresh=False)
    elapsed = time.perf_counter() - start
    if bar is not None:
        bar.close()
    history["loss"].append(total_loss / n)
    history["accuracy"].append(correct / n)
    history["lr"].append(lr)
    history["time"].append(elapsed)
    line = f"epoch {epoch + 1}/{epochs}: loss {total_loss / n:.4f}, accuracy {correct / n:.4f}"
    if val_data is not None:
        res = evaluate(model, *val_data)
        history["val_loss"].append(res["loss"])
        history["val_accuracy"].append(res["accuracy"])
        line += f", val_loss {res['loss']:.4f}, val_accuracy {res['accuracy']:.4f}"
    if bar_cls is not None:
        bar_cls.write(line)


def fit(model: Module, train_data, epochs: int, batch_size: int = 32, optimizer: Optimizer | None = None,
        seed: int = 0, val_data=None, progress: bool = True, loss=None, threads: int | None = 1,
        callback=None) -> dict:
    """Train ``model`` on ``train_data = (x, y)`` with mini-batches; returns the history.

    Each epoch draws a permutation from ``numpy.random.default_rng(seed)`` and runs, per batch,
    ``zero_grad -> forward -> loss -> backward -> optimizer.step``. The last batch may be smaller.

    Parameters
    ----------
    model : Module (usually ``Sequential``), trained in place (left in eval mode).
    train_data, val_data : ``(x, y)``, x of the model's dtype (float32), y integer labels.
    epochs, batch_size : int
    optimizer : Optimizer, default ``Adam(1e-3)``; its ``lr`` schedule is stepped per epoch.
    seed : int, seed of the batch order.
    progress : bool, show a tqdm bar per epoch (loss, accuracy).
    loss : default ``SoftmaxCrossEntropy()``.
    threads : BLAS/OpenMP threads while training (:func:`thread_limit`; default 1, None = unchanged).
    callback : ``callback(epoch, history)`` after every epoch (``epoch`` counted from 1), e.g. to advance an
        outer progress bar; None for none.

    Returns
    -------
    dict of per-epoch lists: ``loss``, ``accuracy`` (running averages over the epoch's batches, in
    training mode), ``lr``, ``time`` (seconds), and ``val_loss`` / ``val_accuracy`` with ``val_data``.
    """
    if int(epochs) != epochs or epochs < 0 or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"fit: epochs must be an int >= 0 and batch_size an int >= 1, got {epochs}, {batch_size}")
    x, y = _check_data(train_data, model.dtype, "fit")
    if val_data is not None:
        val_data = _check_data(val_data, model.dtype, "fit (val_data)")
    optimizer = Adam(1e-3) if optimizer is None else optimizer
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"fit: optimizer must be an Optimizer (e.g. fxpsim.nn.Adam(1e-3), SGD(0.1)), got "
                        f"{optimizer!r}")
    check_threads(threads, "fit: threads")
    if callback is not None and not callable(callback):
        raise TypeError(f"fit: callback must be callable as callback(epoch, history) or None, got {callback!r}")
    loss_fn = SoftmaxCrossEntropy() if loss is None else loss
    rng = np.random.default_rng(seed)
    history: dict[str, list] = {"loss": [], "accuracy": [], "lr": [], "time": []}
    if val_data is not None:
        history.update(val_loss=[], val_accuracy=[])
    bar_cls = None
    if progress:
        from tqdm import tqdm as bar_cls
    with thread_limit(threads):
        for epoch in range(int(epochs)):
            _run_epoch(model, x, y, batch_size, optimizer, loss_fn, rng, epoch, epochs, bar_cls, history, val_data)
            if callback is not None:
                callback(epoch + 1, history)
    model.eval()
    return history


# ------------------------------------------------------------------------------------------ save / load
_ARCH_KEY = "__fxpsim_model__.json"
_FORMAT_VERSION = 1


def save_model(model: Module, path) -> str:
    """Save ``model`` to one ``.npz``: every parameter and buffer by name, plus a JSON string
    (key ``__fxpsim_model__.json``) with the architecture and quantizer configs. Returns the path."""
    arrays = {f"param/{k}": v for k, v in model.parameters().items()}
    arrays.update({f"buffer/{k}": v for k, v in model.buffers().items()})
    meta = {"format_version": _FORMAT_VERSION, "model": {"class": type(model).__name__,
                                                         "config": model.get_config()}}
    arrays[_ARCH_KEY] = np.array(json.dumps(meta))
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    np.savez(path, **arrays)
    return path


def load_model(path) -> Module:
    """Rebuild a model saved by :func:`save_model` (same parameters and buffers bit for bit, eval mode).

    The file is data only: its architecture names layer and quantizer classes from fxpsim's registries
    and gradient rules registered with :func:`fxpsim.register_gradient` (never a module to import).
    Anything else -- a missing, empty, truncated or corrupted file, another kind of file, an unknown
    layer or keyword, an array of the wrong shape or dtype, NaN or inf in a parameter -- raises
    ValueError saying what is wrong (``FileNotFoundError`` for a missing path).
    """
    shown = os.fspath(path)
    where = f"load_model: {shown}"
    if not os.path.exists(shown):
        raise FileNotFoundError(f"{where}: no such file")
    if os.path.isdir(shown):
        raise ValueError(f"{where} is a directory, not an fxpsim model file (.npz written by save_model)")
    if os.path.getsize(shown) == 0:
        raise ValueError(f"{where} is empty, not an fxpsim model file (.npz written by save_model)")
    with open(shown, "rb") as fh:
        head = fh.read(4)
    if head != b"PK\x03\x04":
        kind = "a numpy .npy array" if head.startswith(b"\x93NUM") else (
            "a text file" if head and all(32 <= c < 127 or c in (9, 10, 13) for c in head) else "not a zip archive")
        raise ValueError(f"{where} is not an fxpsim model file: it is {kind}, a model is the .npz archive "
                         f"save_model writes")
    try:
        with np.load(shown, allow_pickle=False) as data:
            return _load_archive(data, where)
    except ValueError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError) as exc:
        raise ValueError(f"{where} is truncated or corrupted ({type(exc).__name__}: {exc})") from None


def _load_archive(data, where: str) -> Module:
    if _ARCH_KEY not in data.files:
        raise ValueError(f"{where} is not an fxpsim model file (no {_ARCH_KEY} entry)")
    try:
        meta = json.loads(str(_array(data, _ARCH_KEY, where)))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: the architecture entry is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{where}: the architecture entry must be a JSON object, got {type(meta).__name__}")
    if meta.get("format_version") != _FORMAT_VERSION:
        raise ValueError(f"{where}: unsupported format version {meta.get('format_version')!r} "
                         f"(this fxpsim reads version {_FORMAT_VERSION})")
    try:
        model = layer_from_config(meta.get("model"))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"{where}: invalid architecture: {exc}") from None
    for kind, targets in (("param", model.parameters()), ("buffer", model.buffers())):
        saved = {k.split("/", 1)[1] for k in data.files if k.startswith(kind + "/")}
        if saved != set(targets):
            raise ValueError(f"{where}: {kind} names do not match the architecture: "
                             f"missing {sorted(set(targets) - saved)}, unexpected {sorted(saved - set(targets))}")
        for name, arr in targets.items():
            value = _array(data, f"{kind}/{name}", where)
            what = f"{'parameter' if kind == 'param' else 'buffer'} {name!r} ({_owner(model, name)})"
            if value.shape != arr.shape:
                raise ValueError(f"{where}: {what} has shape {value.shape}, expected {arr.shape}")
            if value.dtype != arr.dtype:
                raise ValueError(f"{where}: {what} has dtype {value.dtype}, expected {arr.dtype} "
                                 f"(a model file stores every array in the model's dtype)")
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                bad = ~np.isfinite(value)
                first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), value.shape))
                raise ValueError(f"{where}: {what} holds {int(bad.sum())} NaN/inf value(s), first at index {first}")
            arr[...] = value
    model.eval()
    return model


def _array(data, key: str, where: str) -> np.ndarray:
    try:
        return data[key]
    except ValueError as exc:                       # object arrays: pickles are never loaded
        raise ValueError(f"{where}: entry {key!r} is not a plain numeric array ({exc})") from None


def _owner(model: Module, name: str) -> str:
    """'layer 0 (Dense)' for a parameter name such as '0.W' of a Sequential."""
    head = name.split(".", 1)[0]
    layers = getattr(model, "layers", None)
    if layers is not None and head.isdigit() and int(head) < len(layers):
        return f"layer {head}, {type(layers[int(head)]).__name__}"
    return type(model).__name__
