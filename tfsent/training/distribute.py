"""tf.distribute strategies from the `strategy` config field, and this process's role in a
multi-worker run. (The cross-replica gathers the methods' losses use are in
`tfsent.methods.replicas`.)"""

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
    if name == "multi_worker":  # before anything initialises the context (collectives)
        tf_config = os.environ.get("TF_CONFIG")
        if not tf_config:
            raise ConfigError("strategy multi_worker needs the TF_CONFIG environment variable")
        try:
            json.loads(tf_config)
        except json.JSONDecodeError as e:
            raise ConfigError(f"TF_CONFIG is not valid JSON: {e}") from None
        return tf.distribute.MultiWorkerMirroredStrategy()
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
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    logging.info("TPU devices: %s", tf.config.list_logical_devices("TPU"))
    return tf.distribute.TPUStrategy(resolver)


def worker_role(strategy):
    """(is_chief, task_id) of this process. Without a multi-worker cluster: (True, 0).
    The chief is task `chief` if the cluster has one, else worker 0 (TF's convention)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True, 0
    task_type, task_id = resolver.task_type, int(resolver.task_id or 0)
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    chief = task_type == "chief" or (not has_chief and task_type == "worker" and task_id == 0)
    return chief, task_id
