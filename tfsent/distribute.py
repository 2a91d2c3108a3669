"""tf.distribute strategy from a flag, and cross-replica helpers for global-batch losses.

Convention used by every method's train_step (Keras sums gradients over replicas):
  - a contrastive loss is computed over the GLOBAL batch identically on every replica,
    with embeddings gathered by `gather_with_local_grad`: the gradient reaches only the
    local slice, so the sum of the replicas' gradients is exactly the gradient of the
    global loss, whatever the replica count;
  - a per-example loss is a global mean: local sum / `global_sum(local count)`, so the
    replicas' gradients again add up to the gradient of the global mean.
"""

import json
import os

import tensorflow as tf
from absl import logging

from tfsent.errors import ConfigError

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")


def get_strategy(name="auto", tpu_address=""):
    """Returns a tf.distribute strategy.

    auto: MirroredStrategy over all GPUs if there are several, else the default strategy
    on the one device; one_device: the first GPU or the CPU; mirrored: all local GPUs
    (or all logical CPUs); multi_worker: MultiWorkerMirroredStrategy (reads TF_CONFIG);
    tpu: TPUStrategy on `tpu_address` ("" = local TPU VM).
    """
    if name not in STRATEGIES:
        raise ConfigError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        if len(gpus) > 1:
            return tf.distribute.MirroredStrategy()
        return tf.distribute.get_strategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        tf_config = os.environ.get("TF_CONFIG")
        if not tf_config:
            raise ConfigError("strategy multi_worker needs the TF_CONFIG environment variable")
        try:
            json.loads(tf_config)
        except json.JSONDecodeError as e:
            raise ConfigError(f"TF_CONFIG is not valid JSON: {e}") from None
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    logging.info("TPU devices: %s", tf.config.list_logical_devices("TPU"))
    return tf.distribute.TPUStrategy(resolver)


def _replica_context():
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return None
    return ctx


def num_replicas():
    """Replicas in sync in the current context (1 outside a strategy)."""
    ctx = tf.distribute.get_replica_context()
    return 1 if ctx is None else ctx.num_replicas_in_sync


def gather_with_local_grad(x):
    """Concatenates `x` (b, ...) from all replicas along axis 0 -> (R*b, ...).

    Other replicas' rows are constants; this replica's rows keep their gradient. Local
    batches must have equal size (datasets are batched with drop_remainder=True).
    """
    ctx = _replica_context()
    if ctx is None:
        return x
    gathered = tf.stop_gradient(ctx.all_gather(x, axis=0))
    b = tf.shape(x)[0]
    start = tf.cast(ctx.replica_id_in_sync_group, tf.int32) * b
    return tf.concat([gathered[:start], x, gathered[start + b:]], axis=0)


def global_sum(x):
    """Sum of `x` over replicas, without gradient (used for counts and logging)."""
    ctx = _replica_context()
    x = tf.stop_gradient(x)
    if ctx is None:
        return x
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, x)


def global_mean(local_sum, local_count):
    """local_sum / (count summed over replicas): this replica's share of a global mean.

    The value returned on one replica is a partial sum; `global_sum` of it is the full mean.
    """
    total = global_sum(tf.cast(local_count, local_sum.dtype))
    return local_sum / tf.maximum(total, tf.cast(1.0, local_sum.dtype))
