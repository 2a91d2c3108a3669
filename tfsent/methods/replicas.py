"""Cross-replica helpers for global-batch losses (the strategies themselves:
`tfsent.training.distribute`).

Convention used by every method's train_step (Keras sums gradients over replicas):
  - a contrastive loss is computed over the GLOBAL batch identically on every replica,
    with embeddings gathered by `gather_with_local_grad`: the gradient reaches only the
    local slice, so the sum of the replicas' gradients is exactly the gradient of the
    global loss, whatever the replica count;
  - a per-example loss is a global mean: local sum / `global_sum(local count)`, so the
    replicas' gradients again add up to the gradient of the global mean.
"""

import tensorflow as tf


def _replica_context():
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return None
    return ctx


def num_replicas():
    """Replicas in sync in the current context (1 outside a strategy)."""
    ctx = tf.distribute.get_replica_context()
    return 1 if ctx is None else ctx.num_replicas_in_sync


def gather_with_local_grad(*tensors):
    """Concatenates each tensor (b, D) from all replicas along axis 0 -> (R*b, D).

    Other replicas' rows are constants; this replica's rows keep their gradient. All
    tensors travel in ONE collective (concatenated on the last axis): collectives issued
    independently may start in a different order on different replicas, which aborts them.
    Local batches must have equal size (datasets are batched with drop_remainder=True).
    Returns a list (or the tensor itself when given one).
    """
    ctx = _replica_context()
    if ctx is None:
        return tensors[0] if len(tensors) == 1 else list(tensors)
    dims = [t.shape[-1] for t in tensors]
    local = tf.concat(tensors, axis=-1) if len(tensors) > 1 else tensors[0]
    gathered = tf.stop_gradient(ctx.all_gather(local, axis=0))
    b = tf.shape(local)[0]
    start = tf.cast(ctx.replica_id_in_sync_group, tf.int32) * b
    full = tf.concat([gathered[:start], local, gathered[start + b:]], axis=0)
    if len(tensors) == 1:
        return full
    if None in dims:  # e.g. N hard negatives per anchor behind an unknown batch size
        return tf.split(full, tf.stack([tf.shape(t)[-1] for t in tensors]), axis=-1,
                        num=len(tensors))
    return tf.split(full, dims, axis=-1)


def global_sum(values, after=None):
    """Sums a 1-D float vector over replicas, without gradient (counts, logging).

    `after`: a tensor the reduction must wait for, so that the order of collectives is
    the same on every replica (pass the output of the step's previous collective).
    """
    ctx = _replica_context()
    values = tf.stop_gradient(values)
    if ctx is None:
        return values
    deps = [] if after is None else [after]
    with tf.control_dependencies(deps):
        values = tf.identity(values)
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, values)


def global_mean(local_sum, local_count, *other_sums, after=None):
    """Means over the GLOBAL batch from this replica's sums (a per-example loss: the
    convention in the module docstring), in one all-reduce.

    Args:
        local_sum: this replica's differentiable sum of the per-example loss.
        local_count: this replica's number of examples (or sum of weights).
        *other_sums: further local sums to average over the same count (accuracy, ...).
        after: see `global_sum`.
    Returns:
        (share, mean, *other_means): `share` = local_sum / global count, this replica's
        differentiable share (the replicas' summed gradients are the gradient of the global
        mean); `mean` and `other_means` = global sums / global count, without gradient
        (identical on every replica, for logging). The count is floored at 1.
    """
    totals = tf.unstack(global_sum(tf.stack([local_sum, local_count, *other_sums]),
                                   after=after))
    count = tf.maximum(totals[1], 1.0)
    return (local_sum / count, totals[0] / count, *[t / count for t in totals[2:]])
