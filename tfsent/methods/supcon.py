"""Supervised-contrastive SBERT (supcon_sbert.txt): NLI cross-entropy + SCL."""

import keras
import tensorflow as tf

from tfsent import losses
from tfsent.distribute import gather_with_local_grad, global_sum
from tfsent.methods.base import SentenceMethod


class SupConSBERT(SentenceMethod):
    """Siamese encoder; L = (1 - lambda) CE + lambda SCL. lambda = 0 is plain SBERT.

    Batches come from `tfsent.data.pipelines.nli_pair_dataset` (premise-grouped). CE: a
    head on concat(u, v, |u - v|) -> Dense(1.5 H) -> Dense(3) (no nonlinearity between,
    as in the reference). SCL: anchors are the premises u_i, candidates the hypotheses v_j
    of the global batch; positives of i are the entailed hypotheses of the same premise;
    negatives are every other valid candidate (its neutral / contradiction hypotheses and
    all hypotheses of other premises). `max_positives` / `max_negatives` cap them per
    anchor (a random subset, drawn from a seed that depends on the step; 0 = all).

    Args:
        encoder: SentenceEncoder (pooling `mean_no_cls` by default, mask-aware).
        scl_weight: lambda (0.3 best STS, 0.1 best transfer).
        temperature: tau (1.0).
        max_positives, max_negatives: caps N+ / N- (0 = all).
        similarity: "dot" (reference) or "cosine".
    """

    metric_names = ("loss", "ce_loss", "scl_loss", "nli_accuracy")
    input_kind = "nli_pairs"  # raw `fit` examples: (premise, hypothesis, label) rows
    supports_grad_cache = True

    def __init__(self, encoder, scl_weight=0.3, temperature=1.0, max_positives=0,
                 max_negatives=0, similarity="dot", train_pooling="mean_no_cls",
                 export_pooling=None, **kwargs):
        super().__init__(encoder, train_pooling, export_pooling, **kwargs)
        self.scl_weight = float(scl_weight)
        self.temperature = float(temperature)
        self.max_positives = int(max_positives)
        self.max_negatives = int(max_negatives)
        self.similarity = similarity
        dim = encoder.hidden_dim
        self.classifier = keras.Sequential(
            [keras.layers.Dense(int(1.5 * dim), name="ce_hidden"),
             keras.layers.Dense(3, name="ce_logits")], name="nli_classifier")
        self.classifier.build((None, 3 * dim))

    def embedding_parts(self, batch):
        """Premises and hypotheses (GradCache hook)."""
        return [(batch["premise"], {}), (batch["hypothesis"], {})]

    def compute_losses(self, batch, training=True):
        return self.loss_from_embeddings(self.embed_parts(batch, training), batch)

    def loss_from_embeddings(self, embeddings, batch):
        """CE on the NLI head plus SCL from premise/hypothesis embeddings."""
        u, v = (tf.cast(z, tf.float32) for z in embeddings)  # float32 under mixed precision
        valid = tf.cast(batch["valid"], tf.float32)
        labels = tf.cast(batch["label"], tf.int32)
        logits = tf.cast(self.classifier(tf.concat([u, v, tf.abs(u - v)], axis=-1)), tf.float32)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels),
                          tf.float32)
        meta = tf.stack([tf.cast(labels, tf.float32), tf.cast(batch["premise_id"], tf.float32),
                         valid], axis=1)
        u_all, v_all, meta_all = gather_with_local_grad(u, v, meta)
        label_all, pid_all, valid_all = tf.unstack(tf.stop_gradient(meta_all), axis=1)
        scl = self.scl(u_all, v_all, label_all, pid_all, valid_all)
        g_ce, g_valid, g_correct = tf.unstack(global_sum(
            tf.stack([tf.reduce_sum(ce * valid), tf.reduce_sum(valid),
                      tf.reduce_sum(correct * valid)]), after=scl))
        g_valid = tf.maximum(g_valid, 1.0)
        ce_share = tf.reduce_sum(ce * valid) / g_valid  # this replica's share of the mean
        objective = (1.0 - self.scl_weight) * ce_share + self.scl_weight * scl
        ce_mean = g_ce / g_valid
        logs = {"loss": (1.0 - self.scl_weight) * ce_mean + self.scl_weight * scl,
                "ce_loss": ce_mean, "scl_loss": scl, "nli_accuracy": g_correct / g_valid}
        return objective, logs

    def scl(self, u, v, labels, premise_ids, valid):
        """SCL over the (global) batch; see the class docstring."""
        ok = tf.logical_and(valid[:, None] > 0, valid[None, :] > 0)
        same = tf.equal(premise_ids[:, None], premise_ids[None, :])
        entailed = tf.equal(labels, 0.0)[None, :]
        pos = tf.logical_and(ok, tf.logical_and(same, entailed))
        neg = tf.logical_and(ok, tf.logical_not(pos))
        if self.max_positives > 0 or self.max_negatives > 0:
            step = tf.cast(self.optimizer.iterations, tf.int32) if self.optimizer else 0
            shape = tf.shape(pos)
            keys_p = tf.random.stateless_uniform(shape, tf.stack([step, 1]))
            keys_n = tf.random.stateless_uniform(shape, tf.stack([step, 2]))
            pos = losses.cap_mask(pos, self.max_positives, keys_p)
            neg = losses.cap_mask(neg, self.max_negatives, keys_n)
        return losses.supervised_contrastive_loss(u, v, pos, neg, self.temperature,
                                                  self.similarity)

    def nli_accuracy(self, rows, batch_size=128, max_seq_length=None):
        """Accuracy (x100) of the CE head on (premise, hypothesis, label) rows."""
        import numpy as np

        from tfsent.data.pipelines import NLI_LABEL_IDS

        u = self.encode([r[0] for r in rows], batch_size, max_seq_length=max_seq_length)
        v = self.encode([r[1] for r in rows], batch_size, max_seq_length=max_seq_length)
        logits = np.asarray(self.classifier(np.concatenate([u, v, np.abs(u - v)], axis=1)))
        labels = np.array([NLI_LABEL_IDS[r[2]] for r in rows])
        return 100.0 * float(np.mean(np.argmax(logits, axis=1) == labels))

    def get_config(self):
        config = super().get_config()
        config.update({"scl_weight": self.scl_weight, "temperature": self.temperature,
                       "max_positives": self.max_positives,
                       "max_negatives": self.max_negatives, "similarity": self.similarity})
        return config
