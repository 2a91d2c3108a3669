"""GradCache (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size under Memory
Limited Setup"), kept out of the objectives as sentence-transformers keeps it out of its
losses: any `SentenceMethod` whose loss is a function of sentence embeddings (and of heads
outside the encoder) implements `embedding_parts` / `loss_from_embeddings`, and
`grad_cache_gradients` below computes its gradients in chunks.

The batch is embedded chunk by chunk without a tape, the loss and its gradient with respect
to the embeddings are computed over the whole (global) batch, then each chunk is re-encoded
under a tape with the encoder's dropout stream replayed and back-propagated with that
gradient: the update equals the plain one while one chunk's activations are alive at a time.
"""

import tensorflow as tf

FEATURE_KEYS = ("token_ids", "padding_mask", "segment_ids")


def grad_cache_gradients(method, batch, variables):
    """`method.gradients(batch, variables)` computed with GradCache.

    Each part of `embedding_parts` is cut into chunks of `grad_cache_chunk` rows: the
    first chunk and a smaller last one run as plain ops, the equal-sized chunks between
    them in a `tf.while_loop` (one iteration at a time), so a graph holds one chunk's
    activations at a time and XLA compiles one chunk, not an unrolled batch. The
    encoder's dropout seed state is saved before each chunk's first pass and restored
    for its second, so both passes draw the same masks."""
    seed_state = method.encoder.seed_generator.state
    chunk = method.grad_cache_chunk
    barrier = []  # orders the chunks in a graph (nothing else keeps them apart)

    def first_pass(features, kwargs, start, size):
        state = tf.identity(seed_state.value)
        z = method.embed(_rows(features, start, size), True, **kwargs)
        return state, tf.stop_gradient(z)

    parts = []  # (features, kwargs, segments, states (chunks, ...), cached (n, D))
    for features, kwargs in method.embedding_parts(batch):
        features = {k: features[k] for k in FEATURE_KEYS if k in features}
        segments = chunk_segments(features["token_ids"].shape[0], chunk)
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
        objective, logs = method.loss_from_embeddings(cached, batch)
        scaled = method._scale(objective)
    all_grads = tape.gradient(scaled, [*cached, *variables])
    embedding_grads, grads = all_grads[:len(cached)], list(all_grads[len(cached):])

    index = {id(v): i for i, v in enumerate(variables)}
    encoder_vars = [v for v in method.encoder.trainable_variables if id(v) in index]
    slots = [index[id(v)] for v in encoder_vars]

    def second_pass(features, kwargs, start, size, state, part_grad):
        seed_state.assign(state)
        grad = tf.stop_gradient(_rows({"g": part_grad}, start, size)["g"])
        with tf.GradientTape() as tape:
            z = method.embed(_rows(features, start, size), True, **kwargs)
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


def chunk_segments(n, chunk):
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
