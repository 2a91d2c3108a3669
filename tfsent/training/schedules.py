"""Learning-rate schedules of a run: linear warmup, then linear or cosine decay (or a
constant rate). Registered with Keras as "tfsent>WarmupCosineDecay" and
"tfsent>WarmupLinearDecay", so a saved `.keras` model's optimizer restores them."""

import math

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="tfsent")
class WarmupCosineDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak` over `warmup_steps`, then cosine decay to 0 at
    `total_steps` (SimCLR's schedule, used by CLSR)."""

    def __init__(self, peak, total_steps, warmup_steps=0):
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = self.peak * (step + 1.0) / float(max(self.warmup_steps, 1))
        span = float(max(self.total_steps - self.warmup_steps, 1))
        frac = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
        cosine = 0.5 * self.peak * (1.0 + tf.cos(math.pi * frac))
        return tf.where(step < self.warmup_steps, warm, cosine)

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps}


@keras.saving.register_keras_serializable(package="tfsent")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak` over `warmup_steps`, then linear decay to 0 at
    `total_steps` (`decay=False`: constant after warmup)."""

    def __init__(self, peak, total_steps, warmup_steps=0, decay=True):
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay = bool(decay)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = tf.cast(max(self.warmup_steps, 1), tf.float32)
        lr = self.peak * tf.minimum(1.0, (step + 1.0) / warm) if self.warmup_steps else \
            tf.constant(self.peak)
        if self.decay:
            span = tf.cast(max(self.total_steps - self.warmup_steps, 1), tf.float32)
            frac = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
            lr = tf.where(step < self.warmup_steps, lr, self.peak * (1.0 - frac))
        return lr

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps, "decay": self.decay}
