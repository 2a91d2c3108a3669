"""`SentenceMethod`: the Keras model every objective subclasses.

A method owns a `SentenceEncoder` (and any heads), defines `compute_losses(batch,
training)` from pure functions in `tfsent.losses`, and inherits a `train_step` that is
correct under tf.distribute (see `tfsent.methods.replicas` for the gradient convention),
XLA-compilable and mixed-precision safe (losses in float32, loss scaling through the
optimizer). The same class is used by `python -m tfsent.train` and by `model.fit` in a
user's own code.
"""

import keras
import numpy as np
import tensorflow as tf

from tfsent import formats
from tfsent.checks import Field
from tfsent.data import preprocessing
from tfsent.encoders.loading import load_encoder
from tfsent.encoders.model import resolve_dropout_rates
from tfsent.errors import ConfigError
from tfsent.matryoshka import FULL_DIM, MatryoshkaLoss, resolve_truncate_dim
from tfsent.methods import grad_cache
from tfsent.methods.grad_cache import FEATURE_KEYS


@keras.saving.register_keras_serializable(package="tfsent")
class SentenceMethod(keras.Model):
    """Base class: encoder + objective with its own train_step.

    Subclasses set `metric_names` (the first is "loss"), `train_pooling` /
    `export_pooling`, and implement `compute_losses`, which returns
    `(objective, logs)`: the replica's differentiable objective and a dict of float32
    scalars to log (global values, identical on every replica).

    GradCache (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size under
    Memory Limited Setup"): a method whose objective is a function of sentence embeddings
    (and of heads outside the encoder) implements `embedding_parts` and
    `loss_from_embeddings` and sets `supports_grad_cache`; with `grad_cache_chunk` > 0
    its train_step embeds the batch in chunks without a tape, takes the gradient of the
    loss w.r.t. the embeddings, then re-runs each chunk under a tape with the encoder's
    dropout stream replayed, so the gradient equals the plain one while only one chunk's
    activations are alive at a time.

    Keras-native: every method (and every subclass defined inside tfsent) is a registered
    serializable ("tfsent>ClassName"), so `model.save("m.keras")` and
    `keras.saving.load_model("m.keras")` round-trip it with its optimizer state;
    `evaluate` / `fit(validation_data=...)` report the objective's losses on held-out
    batches (`test_step`: the same objective with the encoder in inference mode, so
    dropout-view methods see identical views: comparable between checkpoints, not with
    the training loss); `fit`, `evaluate` take raw strings (`input_kind` says which
    examples) and tokenize them in the tf.data pipeline with the encoder's tokenizer.

    Matryoshka (`matryoshka_dims`): `tfsent.matryoshka.MatryoshkaLoss` wraps the method's
    embedding loss (`embedding_loss`: the term computed from sentence embeddings alone);
    a method without one (`supports_matryoshka` False) raises ConfigError.

    Args:
        encoder: a `tfsent.encoders.SentenceEncoder`.
        train_pooling: pooling used in the loss (default: the encoder's).
        export_pooling: pooling the exported model carries (default: train_pooling).
        grad_cache_chunk: GradCache chunk size in sentences per replica (0: off).
        matryoshka_dims: nested sizes, largest first (None: the plain loss).
        matryoshka_weights: a weight per size (default all 1).
    """

    metric_names = ("loss",)
    supports_grad_cache = False
    # What `fit(x=...)` takes as raw examples (see `tfsent.data.preprocessing`):
    # "sentences", "sentences_mlm", "triplets", "pairs", "nli_pairs" or "embedding_pairs".
    input_kind = "sentences"
    # nli_pairs only: premise-grouped batches (SupCon-SBERT) or ordinary shuffled ones.
    premise_grouped = False
    # The loss has a term computed from sentence embeddings alone (`embedding_loss`), so
    # Matryoshka can wrap it.
    supports_matryoshka = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__module__.startswith("tfsent."):  # users register their own subclasses
            keras.saving.register_keras_serializable(package="tfsent")(cls)

    @classmethod
    def from_preset(cls, encoder, pooling=None, max_seq_length=128, **kwargs):
        """A method on a named encoder in one line: `SimCSE.from_preset("minilm-l6")`.

        `encoder` is anything `tfsent.encoders.load_encoder` takes (a short name, a
        keras-hub preset, a Hugging Face / sentence-transformers / tfsent directory);
        `kwargs` go to the method's constructor."""
        loaded = load_encoder(encoder, pooling=pooling, max_seq_length=max_seq_length)
        return cls(loaded, **kwargs)

    def __init__(self, encoder, train_pooling=None, export_pooling=None, grad_cache_chunk=0,
                 matryoshka_dims=None, matryoshka_weights=None, **kwargs):
        super().__init__(**kwargs)
        self.matryoshka = MatryoshkaLoss.from_args(matryoshka_dims, matryoshka_weights,
                                                   encoder.hidden_dim)
        if self.matryoshka is not None and not self.supports_matryoshka:
            raise ConfigError(
                f"matryoshka_dims: {type(self).__name__}{self._matryoshka_refusal()} cannot "
                "take a Matryoshka loss: its loss is not computed from sentence embeddings "
                "alone (a head or projector needs the full embedding); unset "
                "matryoshka_dims (SimCSE, CMLM-CSE, ConSERT unsup/joint and SupCon-SBERT "
                "take it)")
        self.encoder = encoder
        self.grad_cache_chunk = 0
        self.set_grad_cache(grad_cache_chunk)
        self.train_pooling = train_pooling or encoder.pooling
        self.export_pooling = export_pooling or self.train_pooling
        if "cls" not in (self.train_pooling, self.export_pooling) and \
                encoder.pooler_dense is not None:  # (None: a family without a pooler)
            # The pooler Dense is unused: keep it out of the trainable variables.
            encoder.pooler_dense.trainable = False
        self._trackers = {name: keras.metrics.Mean(name=name) for name in self.metric_names}
        # Every variable lives in already-built sublayers (subclasses build theirs in
        # __init__), so Keras must not try to build the model by calling it on a batch.
        self.built = True

    def _matryoshka_refusal(self):
        """Detail for the Matryoshka ConfigError (e.g. a mode); empty by default."""
        return ""

    @property
    def matryoshka_dims(self):
        """The Matryoshka sizes (a tuple), or None without Matryoshka."""
        return self.matryoshka.dims if self.matryoshka is not None else None

    @property
    def matryoshka_weights(self):
        """The Matryoshka loss weights (a tuple), or None without Matryoshka."""
        return self.matryoshka.weights if self.matryoshka is not None else None

    def embedding_loss(self, loss_fn, embeddings):
        """`loss_fn(*embeddings)`, or with `matryoshka_dims` the weighted sum of `loss_fn`
        over the embeddings' nested prefixes (`tfsent.matryoshka.MatryoshkaLoss`)."""
        if self.matryoshka is None:
            return loss_fn(*embeddings)
        return self.matryoshka(loss_fn, list(embeddings))

    @property
    def metrics(self):
        return list(self._trackers.values())

    def call(self, inputs, training=False):
        """Sentence embeddings (B, H) of tokenized `inputs` with the export pooling."""
        return self.encoder(inputs, training=training, pooling=self.export_pooling)["embedding"]

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None,
               **kwargs):
        """Writes the method's servable encoder (the encoder with `export_pooling` and
        `export_head`, as `python -m tfsent.train` exports it) as `format` through the
        registry `tfsent.formats.FORMATS` (tf_saved_model, onnx, litert,
        sentence_transformers, ...); returns the path written.

        Keras' `Model.export` signature, with these differences: for "tf_saved_model"
        `filepath` is TF Serving's model directory and the SavedModel is its next version
        (`filepath/1` first; strings in, see `tfsent.formats.saved_model`); `input_signature`
        must be None (the signatures are fixed); `kwargs` go to the format's writer
        (`pooling`, `head`, `max_seq_length`, `quantize`, `metadata`, `query_prompt`,
        ...; for tf_saved_model those of `tfsent.formats.saved_model.export_encoder`).
        """
        defaults = {"pooling": self.export_pooling, "head": self.export_head,
                    "metadata": {"method": type(self).__name__}}
        return formats.keras_export(self.encoder, filepath, format, verbose,
                                    input_signature, defaults, kwargs)

    @property
    def export_head(self):
        """A layer applied to the pooled embedding in the export (None: the embedding itself)."""
        return None

    @property
    def dev_pooling(self):
        """Pooling used for dev-set model selection (the export pooling unless a method's
        paper selects on another one, as ConSERT does)."""
        return self.export_pooling

    def encode(self, sentences, batch_size=64, normalize=False, max_seq_length=None,
               use_head=True, pooling=None, truncate_dim=None):
        """Embeds strings as the exported model would (numpy (N, D)); `use_head=False`
        stops at the pooled encoder embedding; `pooling` overrides the export pooling;
        `truncate_dim` keeps the first dimensions (before normalisation; None: the
        encoder's own `truncate_dim` when no head applies, as the export does; 0: all)."""
        out = self.encoder.encode(sentences, batch_size=batch_size, normalize=False, verbose=0,
                                  pooling=pooling or self.export_pooling,
                                  max_seq_length=max_seq_length, truncate_dim=FULL_DIM)
        head = self.export_head if use_head else None
        if head is not None:
            out = np.array(head(out), np.float32)
        own = getattr(self.encoder, "truncate_dim", None) if head is None else None
        truncate_dim = resolve_truncate_dim(truncate_dim, own, out.shape[1])
        if truncate_dim is not None:
            out = np.ascontiguousarray(out[:, :truncate_dim])
        if normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def embed(self, features, training, **kwargs):
        """Training-pooled embeddings of `features`; kwargs go to the encoder call."""
        return self.encoder(features, training=training, pooling=self.train_pooling,
                            **kwargs)["embedding"]

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Keras builds the model from one batch before `fit`; under a strategy it first
        all-reduces that batch (a MEAN of token ids) to get one replica's shapes, and
        MultiWorkerMirroredStrategy cannot reduce a nested dict batch. This takes the
        local replica's batch instead; the build is the same."""
        if iterator is not None and self._distribute_strategy is not None:
            strategy = self.distribute_strategy
            for _, _, it in iterator:
                data_batch = tf.nest.map_structure(
                    lambda x: strategy.experimental_local_results(x)[0]
                    if isinstance(x, tf.distribute.DistributedValues) else x, next(it))
                break
            iterator = None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    def compute_losses(self, batch, training=True):
        """Returns (objective, logs); see the class docstring."""
        raise NotImplementedError

    def set_grad_cache(self, chunk):
        """Turns GradCache on with `chunk` sentences per encoder pass (0 turns it off)."""
        if not isinstance(chunk, int) or chunk < 0:
            raise ConfigError(f"grad_cache_chunk must be an integer >= 0, got {chunk!r}")
        if chunk and not self.supports_grad_cache:
            raise ConfigError(f"grad_cache_chunk: {type(self).__name__} does not support "
                              "GradCache (its loss is not a function of sentence embeddings "
                              "alone); set it to 0")
        self.grad_cache_chunk = chunk

    def embedding_parts(self, batch):
        """GradCache hook: the `(features, embed_kwargs)` pairs whose training-mode
        embeddings `loss_from_embeddings` needs, in order."""
        raise NotImplementedError

    def loss_from_embeddings(self, embeddings, batch):
        """GradCache hook: `(objective, logs)` from the embeddings of `embedding_parts`."""
        raise NotImplementedError

    def embed_parts(self, batch, training):
        """Embeds every part of `embedding_parts` in one encoder pass per distinct
        kwargs (the plain path; GradCache embeds them chunk by chunk instead)."""
        parts = self.embedding_parts(batch)
        kwargs = parts[0][1]
        if any(k != kwargs for _, k in parts):
            return [self.embed(f, training, **k) for f, k in parts]
        z = self.embed(concat_features([f for f, _ in parts]), training, **kwargs)
        rows = [f["token_ids"].shape[0] for f, _ in parts]
        if len(set(rows)) == 1:
            return tf.split(z, len(parts), axis=0)
        if None in rows:  # parts of different sizes (N hard negatives per anchor)
            rows = tf.stack([tf.shape(f["token_ids"])[0] for f, _ in parts])
        return tf.split(z, rows, axis=0, num=len(parts))

    def compile(self, optimizer="adamw", loss=None, loss_weights=None, metrics=None,
                weighted_metrics=None, **kwargs):
        """`keras.Model.compile` without `loss` / `metrics`: the objective is built in and
        logs its own parts (`metric_names`); passing either is an error, not ignored."""
        for name, value in (("loss", loss), ("loss_weights", loss_weights),
                            ("metrics", metrics), ("weighted_metrics", weighted_metrics)):
            if value is not None and not (isinstance(value, (list, tuple, dict))
                                          and not value):
                raise ConfigError(
                    f"{type(self).__name__}.compile({name}={value!r}): a tfsent method "
                    f"computes its own objective and logs {', '.join(self.metric_names)}; "
                    f"remove {name}= (for a dev score, use "
                    "tfsent.training.callbacks.STSDevEvaluation)")
        super().compile(optimizer=optimizer, **kwargs)

    def compile_from_config(self, config):
        """Re-compiles a loaded model (`keras.saving.load_model`) and builds its optimizer,
        so the optimizer state saved in a `.keras` archive is restored."""
        config = keras.saving.deserialize_keras_object(config)
        self.compile(**config)
        if getattr(self, "optimizer", None) is not None and self.built:
            self.optimizer.build(self.trainable_variables)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, *, validation_data=None,
            shuffle=True, validation_batch_size=None, **kwargs):
        """`keras.Model.fit`, also on raw examples (`input_kind`): a list, or a tf.data
        Dataset (batched or not), of strings, triplets or NLI rows (tuples or dicts),
        batched by `batch_size` (default: a batched Dataset's own, else 32) and tokenized
        in the tf.data pipeline (`tfsent.data.kinds.dataset_for_kind`, the CLI's).
        The shuffle seed comes from NumPy's global generator, which
        `keras.utils.set_random_seed` seeds. `validation_data` may be raw too.
        Pre-tokenized datasets pass through unchanged; anything else is an InputError
        saying what to pass."""
        if preprocessing.is_raw(x):
            if y is not None:
                raise ConfigError("fit(y=...): tfsent methods take no targets; labels of "
                                  "NLI rows go inside x")
            raw_batch_size = batch_size or preprocessing.default_batch_size(x)
            seed = int(np.random.randint(0, 2 ** 31 - 1))  # keras.utils.set_random_seed
            x = preprocessing.dataset_for(self, x, raw_batch_size, shuffle=shuffle,
                                          seed=seed, argument="x")
            batch_size = None
        else:
            preprocessing.check_input(self, x, "x")
            raw_batch_size = batch_size or 32
        if validation_data is not None and preprocessing.is_raw(validation_data):
            validation_data = preprocessing.dataset_for(
                self, validation_data,
                validation_batch_size or preprocessing.default_batch_size(
                    validation_data, raw_batch_size),
                shuffle=False, argument="validation_data")
        if isinstance(x, tf.data.Dataset):
            shuffle = False  # a dataset shuffles itself (Keras would only warn)
        return super().fit(x, y, batch_size=batch_size, epochs=epochs,
                           validation_data=validation_data, shuffle=shuffle,
                           validation_batch_size=validation_batch_size, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, **kwargs):
        """`keras.Model.evaluate` (the objective's losses on held-out batches), also on raw
        examples like `fit`."""
        if preprocessing.is_raw(x):
            x = preprocessing.dataset_for(
                self, x, batch_size or preprocessing.default_batch_size(x), shuffle=False,
                argument="x")
            batch_size = None
        else:
            preprocessing.check_input(self, x, "x")
        return super().evaluate(x, y, batch_size=batch_size, **kwargs)

    def test_step(self, data):
        """The objective's losses on a held-out batch (encoder in inference mode)."""
        batch = data[0] if isinstance(data, tuple) else data
        _, logs = self.compute_losses(batch, training=False)
        return self._update_trackers(logs, only_logged=True)

    def train_step(self, data):
        batch = data[0] if isinstance(data, tuple) else data
        variables = self.trainable_variables
        if self.grad_cache_chunk:
            grads, logs = self.grad_cache_gradients(batch, variables)
        else:
            grads, logs = self.gradients(batch, variables)
        grads = self.adjust_gradients(grads, variables)
        grad_norm = self._gradient_norm(grads)
        self.optimizer.apply_gradients(zip(grads, variables))
        results = self._update_trackers(logs)
        # The step's own gradient norm, not an epoch mean: one exploding step must not be
        # diluted by the steps before it (`tfsent.training.callbacks.NanGuard` reads it).
        results["grad_norm"] = (tf.reshape(grad_norm, [1]) if _multi_worker(
            self.distribute_strategy) else grad_norm)
        return results

    def _scale(self, objective):
        optimizer = getattr(self, "optimizer", None)
        return optimizer.scale_loss(objective) if optimizer is not None else objective

    def gradients(self, batch, variables):
        """(gradients of the (loss-scaled) objective w.r.t. `variables`, logs)."""
        with tf.GradientTape() as tape:
            objective, logs = self.compute_losses(batch, training=True)
            scaled = self._scale(objective)
        return tape.gradient(scaled, variables), logs

    def grad_cache_gradients(self, batch, variables):
        """`gradients` computed with GradCache (`tfsent.methods.grad_cache`)."""
        return grad_cache.grad_cache_gradients(self, batch, variables)

    def _gradient_norm(self, grads):
        """Global L2 norm of this replica's gradients before clipping, without the loss
        scale (logged as `grad_norm`; `tfsent.training.callbacks.NanGuard` stops on an explosion).
        Unlike the losses it is a per-replica value: the norm of the summed gradient would
        need a second all-reduce of every gradient."""
        norm = tf.linalg.global_norm([g for g in grads if g is not None])
        scale = getattr(self.optimizer, "dynamic_scale", None)
        if scale is not None:  # LossScaleOptimizer: the gradients carry the loss scale
            norm = norm / tf.cast(scale, norm.dtype)
        return tf.cast(norm, tf.float32)

    def adjust_gradients(self, grads, variables):
        """Hook between the gradient and the update (identity here); a subclass whose
        loss puts a global-batch gradient on every replica rescales it here."""
        del variables
        return grads

    def _update_trackers(self, logs, only_logged=False):
        for name, value in logs.items():
            self._trackers[name].update_state(value)
        results = {name: tracker.result() for name, tracker in self._trackers.items()
                   if name in logs or not only_logged}
        if _multi_worker(self.distribute_strategy):
            # Keras reduces step logs across workers with reduce(MEAN, axis=0), which
            # needs a batch axis: give each scalar one (Keras 3 with
            # MultiWorkerMirroredStrategy; tensorflow/tensorflow#72388).
            results = {name: tf.reshape(value, [1]) for name, value in results.items()}
        return results

    def get_config(self):
        config = {"encoder": keras.saving.serialize_keras_object(self.encoder),
                  "train_pooling": self.train_pooling, "export_pooling": self.export_pooling,
                  "grad_cache_chunk": self.grad_cache_chunk}
        if self.supports_matryoshka:
            config["matryoshka_dims"] = (list(self.matryoshka_dims) if self.matryoshka_dims
                                         else None)
            config["matryoshka_weights"] = (list(self.matryoshka_weights)
                                            if self.matryoshka_weights else None)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def check_encoder_dropout(name, value):
    """Config check of an encoder dropout spec (None, a rate, or {site: rate})."""
    try:
        resolve_dropout_rates(value, 0.0)
    except ConfigError as e:
        raise ConfigError(f"{name}: {e}") from None


def encoder_dropout_field(default):
    """The `encoder_dropout` config field (feeds the constructor's `encoder_dropout`)."""
    return Field("encoder_dropout", default, check_encoder_dropout, types=(float, dict),
                 optional=True, arg="encoder_dropout",
                 doc="encoder dropout during training (None: the backbone's)")


def concat_features(parts):
    """Concatenates token feature dicts along the batch axis (one encoder pass for all views)."""
    keys = [k for k in FEATURE_KEYS if k in parts[0]]
    return {k: tf.concat([p[k] for p in parts], axis=0) for k in keys}


def _multi_worker(strategy):
    """True under a MultiWorkerMirroredStrategy that spans several workers."""
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and strategy.extended._in_multi_worker_mode())  # noqa: SLF001
