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

    GradCache (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size under
    Memory Limited Setup"): a method whose objective is a function of sentence embeddings
    (and of heads outside the encoder) implements `embedding_parts` and
    `loss_from_embeddings` and sets `supports_grad_cache`; with `grad_cache_chunk` > 0
    its train_step embeds the batch in chunks without a tape, takes the gradient of the
    loss w.r.t. the embeddings, then re-runs each chunk under a tape with the encoder's
    dropout stream replayed, so the gradient equals the plain one while only one chunk's
    activations are alive at a time.

    Args:
        encoder: a `tfsent.encoders.SentenceEncoder`.
        train_pooling: pooling used in the loss (default: the encoder's).
        export_pooling: pooling the exported model carries (default: train_pooling).
        grad_cache_chunk: GradCache chunk size in sentences per replica (0: off).
    """

    metric_names = ("loss",)
    supports_grad_cache = False

    def __init__(self, encoder, train_pooling=None, export_pooling=None, grad_cache_chunk=0,
                 **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.grad_cache_chunk = 0
        self.set_grad_cache(grad_cache_chunk)
        self.train_pooling = train_pooling or encoder.pooling
        self.export_pooling = export_pooling or self.train_pooling
        if "cls" not in (self.train_pooling, self.export_pooling) and \
                encoder.pooler_dense is not None:  # (None: a family without a pooler)
            # The pooler Dense is unused: keep it out of the trainable variables.
            encoder.pooler_dense.trainable = False
        self._trackers = {name: keras.metrics.Mean(name=name)
                          for name in (*self.metric_names, "grad_norm")}
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

    def set_grad_cache(self, chunk):
        """Turns GradCache on with `chunk` sentences per encoder pass (0 turns it off)."""
        from tfsent.errors import ConfigError

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
        return tf.split(z, len(parts), axis=0)

    def train_step(self, data):
        batch = data[0] if isinstance(data, tuple) else data
        variables = self.trainable_variables
        if self.grad_cache_chunk:
            grads, logs = self.grad_cache_gradients(batch, variables)
        else:
            grads, logs = self.gradients(batch, variables)
        grads = self.adjust_gradients(grads, variables)
        logs = dict(logs, grad_norm=self._gradient_norm(grads))
        self.optimizer.apply_gradients(zip(grads, variables))
        return self._update_trackers(logs)

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
        """`gradients` computed with GradCache (see the class docstring).

        Each part of `embedding_parts` is cut into chunks of `grad_cache_chunk` rows: the
        first chunk and a smaller last one run as plain ops, the equal-sized chunks between
        them in a `tf.while_loop` (one iteration at a time), so a graph holds one chunk's
        activations at a time and XLA compiles one chunk, not an unrolled batch. The
        encoder's dropout seed state is saved before each chunk's first pass and restored
        for its second, so both passes draw the same masks."""
        seed_state = self.encoder.seed_generator.state
        chunk = self.grad_cache_chunk
        barrier = []  # orders the chunks in a graph (nothing else keeps them apart)

        def first_pass(features, kwargs, start, size):
            state = tf.identity(seed_state.value)
            z = self.embed(_rows(features, start, size), True, **kwargs)
            return state, tf.stop_gradient(z)

        parts = []  # (features, kwargs, segments, states (chunks, ...), cached (n, D))
        for features, kwargs in self.embedding_parts(batch):
            features = {k: features[k] for k in FEATURE_KEYS if k in features}
            segments = _chunk_segments(features["token_ids"].shape[0], chunk)
            states, views = [], []
            for start, size, count in segments:
                with tf.control_dependencies(barrier):
                    if count == 1:
                        state, z = first_pass(features, kwargs, start, size)
                        state = state[None]
                    else:
                        state, z = _chunk_loop(
                            lambda i, f=features, k=kwargs, a=start, s=size:
                                first_pass(f, k, a + i * s, s),
                            count, (tf.TensorSpec(seed_state.shape, seed_state.dtype),
                                    tf.TensorSpec(views[-1].shape, views[-1].dtype)))
                        z = tf.reshape(z, [count * size, -1])
                states.append(state)
                views.append(z)
                barrier = [z]
            parts.append((features, kwargs, segments, tf.concat(states, 0),
                          tf.concat(views, 0)))
        after = tf.identity(seed_state.value)
        cached = [part[-1] for part in parts]
        with tf.GradientTape() as tape:
            tape.watch(cached)
            objective, logs = self.loss_from_embeddings(cached, batch)
            scaled = self._scale(objective)
        all_grads = tape.gradient(scaled, [*cached, *variables])
        embedding_grads, grads = all_grads[:len(cached)], list(all_grads[len(cached):])

        index = {id(v): i for i, v in enumerate(variables)}
        encoder_vars = [v for v in self.encoder.trainable_variables if id(v) in index]
        slots = [index[id(v)] for v in encoder_vars]

        def second_pass(features, kwargs, start, size, state, part_grad):
            seed_state.assign(state)
            grad = tf.stop_gradient(_rows({"g": part_grad}, start, size)["g"])
            with tf.GradientTape() as tape:
                z = self.embed(_rows(features, start, size), True, **kwargs)
                surrogate = tf.reduce_sum(tf.cast(z, tf.float32) * tf.cast(grad, tf.float32))
            return tape.gradient(surrogate, encoder_vars)

        barrier = [g for g in embedding_grads if g is not None]
        for (features, kwargs, segments, states, _), part_grad in zip(parts, embedding_grads):
            chunk_index, first_grads = 0, None
            for start, size, count in segments:  # the first segment is one chunk
                with tf.control_dependencies(barrier):
                    if count == 1:
                        chunk_grads = second_pass(features, kwargs, start, size,
                                                  states[chunk_index], part_grad)
                        if first_grads is None:
                            first_grads = chunk_grads
                    else:  # the first chunk's gradients give the loop its structure
                        chunk_grads = _summed_chunk_gradients(
                            lambda i, f=features, k=kwargs, a=start, s=size, c=chunk_index,
                            g=part_grad: second_pass(f, k, a + i * s, s,
                                                     tf.gather(states, c + i), g),
                            count, first_grads)
                chunk_index += count
                for slot, g in zip(slots, chunk_grads):
                    if g is not None:
                        grads[slot] = g if grads[slot] is None else _add_gradients(grads[slot], g)
                barrier = [_dense_part(g) for g in chunk_grads if g is not None]
        with tf.control_dependencies(barrier):
            seed_state.assign(after)
        return grads, logs

    def _gradient_norm(self, grads):
        """Global L2 norm of this replica's gradients before clipping, without the loss
        scale (logged as `grad_norm`; `tfsent.training.NanGuard` stops on an explosion).
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
                "train_pooling": self.train_pooling, "export_pooling": self.export_pooling,
                "grad_cache_chunk": self.grad_cache_chunk}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


FEATURE_KEYS = ("token_ids", "padding_mask", "segment_ids")


def _dense_part(g):
    """The tensor carrying a gradient's values (IndexedSlices -> its values)."""
    return g.values if isinstance(g, tf.IndexedSlices) else g


def _rows(features, start, size):
    """Rows [start, start + size) of every tensor in a dict (`start` may be a tensor;
    `size` is static, so shapes stay static for XLA)."""
    out = {}
    for key, value in features.items():
        rank = value.shape.rank
        out[key] = tf.slice(value, [start] + [0] * (rank - 1), [size] + [-1] * (rank - 1))
    return out


def _chunk_segments(n, chunk):
    """GradCache's plan for `n` rows in chunks of `chunk`: `(start, size, count)` runs of
    equal chunks; the first chunk alone (its results give the loop its shapes), then the
    other full chunks (one `tf.while_loop`), then the remainder."""
    if n is None:
        raise ValueError("GradCache needs a static per-replica batch size "
                         "(batch the dataset with drop_remainder=True)")
    first = min(chunk, n)
    full = n // chunk
    segments = [(0, first, 1)]
    if full > 1:
        segments.append((chunk, chunk, full - 1))
    if full >= 1 and n % chunk:
        segments.append((full * chunk, n % chunk, 1))
    return segments


def _chunk_loop(fn, count, specs):
    """Stacks `fn(i)` (a tuple of tensors matching `specs`) for i in [0, count), one
    iteration at a time."""
    arrays = tuple(tf.TensorArray(spec.dtype, size=count, element_shape=spec.shape)
                   for spec in specs)

    def body(i, arrays):
        return i + 1, tuple(a.write(i, x) for a, x in zip(arrays, fn(i)))

    _, arrays = tf.while_loop(lambda i, _: i < count, body, (tf.constant(0), arrays),
                              parallel_iterations=1)
    return tuple(a.stack() for a in arrays)


def _summed_chunk_gradients(fn, count, template):
    """Sum over i in [0, count) of the gradient lists `fn(i)`, in a `tf.while_loop`;
    `template` (one chunk's gradients) gives each entry's kind: None, dense (summed in
    the loop) or IndexedSlices (rows stacked, kept sparse)."""
    dense = [tf.zeros_like(g) if g is not None and not isinstance(g, tf.IndexedSlices)
             else tf.zeros([]) for g in template]
    sparse = [(tf.TensorArray(g.values.dtype, size=count, element_shape=g.values.shape),
               tf.TensorArray(g.indices.dtype, size=count, element_shape=g.indices.shape))
              if isinstance(g, tf.IndexedSlices) else () for g in template]

    def body(i, dense, sparse):
        new_dense, new_sparse = [], []
        for g, acc, arrays, kind in zip(fn(i), dense, sparse, template):
            if isinstance(kind, tf.IndexedSlices):
                new_dense.append(acc)
                new_sparse.append((arrays[0].write(i, g.values), arrays[1].write(i, g.indices)))
            else:
                new_dense.append(acc if kind is None else acc + g)
                new_sparse.append(arrays)
        return i + 1, new_dense, new_sparse

    _, dense, sparse = tf.while_loop(lambda i, *_: i < count, body,
                                     (tf.constant(0), dense, sparse), parallel_iterations=1)
    out = []
    for kind, acc, arrays in zip(template, dense, sparse):
        if kind is None:
            out.append(None)
        elif isinstance(kind, tf.IndexedSlices):
            values, indices = arrays[0].concat(), arrays[1].concat()
            out.append(tf.IndexedSlices(values, indices, kind.dense_shape))
        else:
            out.append(acc)
    return out


def _add_gradients(a, b):
    """a + b for dense gradients and embedding-table IndexedSlices (kept sparse)."""
    if isinstance(a, tf.IndexedSlices) and isinstance(b, tf.IndexedSlices):
        return tf.IndexedSlices(tf.concat([a.values, b.values], 0),
                                tf.concat([a.indices, b.indices], 0), a.dense_shape)
    return tf.convert_to_tensor(a) + tf.convert_to_tensor(b)


def concat_features(parts):
    """Concatenates token feature dicts along the batch axis (one encoder pass for all views)."""
    keys = [k for k in FEATURE_KEYS if k in parts[0]]
    return {k: tf.concat([p[k] for p in parts], axis=0) for k in keys}


def _multi_worker(strategy):
    """True under a MultiWorkerMirroredStrategy that spans several workers."""
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and strategy.extended._in_multi_worker_mode())  # noqa: SLF001
