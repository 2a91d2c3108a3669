"""`SentenceMethod`: the Keras model every objective subclasses.

A method owns a `SentenceEncoder` (and any heads), defines `compute_losses(batch,
training)` from pure functions in `tfsent.losses`, and inherits a `train_step` that is
correct under tf.distribute (see `tfsent.distribute` for the gradient convention),
XLA-compilable and mixed-precision safe (losses in float32, loss scaling through the
optimizer). The same class is used by `python -m tfsent.train` and by `model.fit` in a
user's own code.
"""

import keras
import numpy as np
import tensorflow as tf


class SentenceMethod(keras.Model):
    """Base class: encoder + objective with its own train_step.

    Subclasses set `metric_names` (the first is "loss"), `train_pooling` /
    `export_pooling`, and implement `compute_losses`, which returns
    `(objective, logs)`: the replica's differentiable objective and a dict of float32
    scalars to log (global values, identical on every replica).

    Args:
        encoder: a `tfsent.encoders.SentenceEncoder`.
        train_pooling: pooling used in the loss (default: the encoder's).
        export_pooling: pooling the exported model carries (default: train_pooling).
    """

    metric_names = ("loss",)

    def __init__(self, encoder, train_pooling=None, export_pooling=None, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.train_pooling = train_pooling or encoder.pooling
        self.export_pooling = export_pooling or self.train_pooling
        if "cls" not in (self.train_pooling, self.export_pooling):
            # The pooler Dense is unused: keep it out of the trainable variables.
            encoder.backbone.pooled_dense.trainable = False
        self._trackers = {name: keras.metrics.Mean(name=name) for name in self.metric_names}
        # Every variable lives in already-built sublayers (subclasses build theirs in
        # __init__), so Keras must not try to build the model by calling it on a batch.
        self.built = True

    @property
    def metrics(self):
        return list(self._trackers.values())

    def call(self, inputs, training=False):
        """Sentence embeddings (B, H) of tokenized `inputs` with the export pooling."""
        return self.encoder(inputs, training=training, pooling=self.export_pooling)["embedding"]

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
               use_head=True, pooling=None):
        """Embeds strings as the exported model would (numpy (N, D)); `use_head=False`
        stops at the pooled encoder embedding; `pooling` overrides the export pooling."""
        out = self.encoder.encode(sentences, batch_size=batch_size, normalize=False, verbose=0,
                                  pooling=pooling or self.export_pooling,
                                  max_seq_length=max_seq_length)
        head = self.export_head
        if head is not None and use_head:
            out = np.array(head(out), np.float32)
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

    def train_step(self, data):
        batch = data[0] if isinstance(data, tuple) else data
        with tf.GradientTape() as tape:
            objective, logs = self.compute_losses(batch, training=True)
            scaled = self.optimizer.scale_loss(objective)
        variables = self.trainable_variables
        grads = self.adjust_gradients(tape.gradient(scaled, variables), variables)
        self.optimizer.apply_gradients(zip(grads, variables))
        return self._update_trackers(logs)

    def adjust_gradients(self, grads, variables):
        """Hook between the gradient and the update (identity here); a subclass whose
        loss puts a global-batch gradient on every replica rescales it here."""
        del variables
        return grads

    def _update_trackers(self, logs):
        for name, value in logs.items():
            self._trackers[name].update_state(value)
        results = {name: tracker.result() for name, tracker in self._trackers.items()}
        if _multi_worker(self.distribute_strategy):
            # Keras reduces step logs across workers with reduce(MEAN, axis=0), which
            # needs a batch axis: give each scalar one (Keras 3 with
            # MultiWorkerMirroredStrategy; tensorflow/tensorflow#72388).
            results = {name: tf.reshape(value, [1]) for name, value in results.items()}
        return results

    def get_config(self):
        return {"encoder": keras.saving.serialize_keras_object(self.encoder),
                "train_pooling": self.train_pooling, "export_pooling": self.export_pooling}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def concat_features(parts):
    """Concatenates token feature dicts along the batch axis (one encoder pass for all views)."""
    keys = [k for k in ("token_ids", "padding_mask", "segment_ids") if k in parts[0]]
    return {k: tf.concat([p[k] for p in parts], axis=0) for k in keys}


def _multi_worker(strategy):
    """True under a MultiWorkerMirroredStrategy that spans several workers."""
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and strategy.extended._in_multi_worker_mode())  # noqa: SLF001
