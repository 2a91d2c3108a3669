"""The NLI classification head of the supervised methods (SupCon-SBERT, ConSERT joint/sup)."""

import keras
import numpy as np
import tensorflow as tf

from tfsent.data.pipelines import NLI_LABEL_IDS


@keras.saving.register_keras_serializable(package="tfsent")
class NLIHead(keras.layers.Layer):
    """Logits of (entailment, neutral, contradiction) from a pair's embeddings (u, v).

    Features: concat(u, v, |u - v|), plus max(u, v)^2 with `max_square_feature` (ConSERT's
    reference `concatenation_sent_max_square`); then an optional linear Dense(hidden_dim)
    (no nonlinearity, as SupCon-SBERT's reference) and a Dense(num_classes). Call:
    `head(u, v)` -> float32 logits (B, num_classes).

    SupCon-SBERT: `hidden_dim = 1.5 H`; ConSERT: `hidden_dim = 0` (one linear layer).

    Args:
        embedding_dim: H, the size of u and v.
        hidden_dim: width of the linear hidden layer (0: none).
        max_square_feature: add max(u, v)^2 to the features.
        num_classes: 3 for NLI.
    """

    def __init__(self, embedding_dim, hidden_dim=0, max_square_feature=False, num_classes=3,
                 **kwargs):
        super().__init__(**kwargs)
        self.embedding_dim = int(embedding_dim)
        self.hidden_dim = int(hidden_dim)
        self.max_square_feature = bool(max_square_feature)
        self.num_classes = int(num_classes)
        self.hidden = None
        if self.hidden_dim:
            self.hidden = keras.layers.Dense(self.hidden_dim, name="hidden",
                                             dtype=self.dtype_policy)
        self.logits = keras.layers.Dense(self.num_classes, name="logits",
                                         dtype=self.dtype_policy)

    @property
    def feature_dim(self):
        """Size of the feature vector the first Dense reads."""
        return (4 if self.max_square_feature else 3) * self.embedding_dim

    def build(self, input_shape=None):
        """Builds the Dense layers for `feature_dim` inputs (the input shape is not needed)."""
        if self.built:
            return
        width = self.feature_dim
        if self.hidden is not None:
            self.hidden.build((None, width))
            width = self.hidden_dim
        self.logits.build((None, width))
        self.built = True

    def features(self, u, v):
        """concat(u, v, |u - v| [, max(u, v)^2])."""
        parts = [u, v, tf.abs(u - v)]
        if self.max_square_feature:
            parts.append(tf.square(tf.maximum(u, v)))
        return tf.concat(parts, axis=-1)

    def call(self, u, v):
        x = self.features(u, v)
        if self.hidden is not None:
            x = self.hidden(x)
        return tf.cast(self.logits(x), tf.float32)

    def cross_entropy(self, u, v, labels):
        """(per-pair cross-entropy, per-pair 0/1 correctness), float32 (B,) each."""
        labels = tf.cast(labels, tf.int32)
        logits = self(u, v)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels),
                          tf.float32)
        return ce, correct

    def rows_accuracy(self, embed, rows):
        """Accuracy (x100) on (premise, hypothesis, label name) rows; `embed` maps a list of
        strings to their (N, H) embeddings (with the pooling the head was trained on)."""
        u = np.asarray(embed([r[0] for r in rows]), np.float32)
        v = np.asarray(embed([r[1] for r in rows]), np.float32)
        labels = np.array([NLI_LABEL_IDS[r[2]] for r in rows])
        _, correct = self.cross_entropy(u, v, labels)
        return 100.0 * float(np.mean(np.asarray(correct)))

    def get_config(self):
        config = super().get_config()
        config.update({"embedding_dim": self.embedding_dim, "hidden_dim": self.hidden_dim,
                       "max_square_feature": self.max_square_feature,
                       "num_classes": self.num_classes})
        return config
