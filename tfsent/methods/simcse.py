"""SimCSE (Gao et al., 2021): unsupervised (dropout views) and supervised (NLI triplets)."""

import tensorflow as tf

from tfsent import checks, losses, matryoshka
from tfsent.distribute import gather_with_local_grad
from tfsent.encoders.model import resolve_dropout_rates
from tfsent.errors import ConfigError
from tfsent.methods.base import SentenceMethod


class SimCSE(SentenceMethod):
    """SimCSE with InfoNCE over the global batch.

    Unsupervised (`supervised=False`): batches are token features of sentences; each
    sentence goes through the encoder twice in training mode (one pass over the batch
    stacked twice), dropout being the only augmentation; z1 anchors, z2 positives.
    Supervised: batches are `{"anchor", "positive", "negative"}` feature dicts (premise,
    entailment, contradiction); contradictions are hard negatives (B x 2B logits). With
    N hard negatives per anchor ("negative" holds B * N rows, anchor-major, e.g. from
    `tfsent.mine --output_format=n-tuple`) every anchor's denominator has all B * N of
    them (B x B(1 + N) logits).
    Embeddings are gathered from all replicas, so negatives are global-batch.

    The paper trains with `cls` pooling (MLP on [CLS]) and exports `cls_before_pooler`
    for the unsupervised model and `cls` for the supervised one; both are arguments.

    Matryoshka (`matryoshka_dims`, e.g. (384, 256, 128, 64, 32)): the InfoNCE is applied
    to each prefix of the embeddings (truncated before the cosine's normalisation) and
    the weighted sum is the objective (`tfsent.matryoshka.nested_loss`); embeddings are
    gathered across replicas once and then cut. GradCache works unchanged (it
    differentiates this loss of the full embeddings). CMLM-CSE inherits it for its
    contrastive term.

    Args:
        encoder: a SentenceEncoder.
        temperature: tau (0.05).
        supervised: see above.
        hard_negative_weight: added to each anchor's own hard-negative logit (0.0).
        dropout: encoder dropout spec for the views (None = the backbone's, 0.1 for BERT).
        matryoshka_dims: nested sizes, largest first (None: the plain loss).
        matryoshka_weights: a weight per size (default all 1).
        duplicate_free_batches: `fit` on raw triplets builds batches in which no text
            occurs twice (a duplicate is a false negative; `tfsent.data.pipelines`).
        train_pooling, export_pooling: see SentenceMethod.
    """

    metric_names = ("loss",)
    supports_grad_cache = True

    @property
    def input_kind(self):
        """Raw examples of `fit`: sentences, or NLI triplets when supervised."""
        return "triplets" if self.supervised else "sentences"

    def __init__(self, encoder, temperature=0.05, supervised=False, hard_negative_weight=0.0,
                 dropout=None, train_pooling=None, export_pooling=None, matryoshka_dims=None,
                 matryoshka_weights=None, duplicate_free_batches=True, **kwargs):
        super().__init__(encoder, train_pooling, export_pooling, **kwargs)
        self.matryoshka_dims = None
        self.matryoshka_weights = None
        if matryoshka_dims:
            self.matryoshka_dims = matryoshka.check_dims(matryoshka_dims, encoder.hidden_dim,
                                                         "matryoshka_dims")
            self.matryoshka_weights = matryoshka.parse_weights(
                matryoshka_weights, len(self.matryoshka_dims))
        elif matryoshka_weights:
            raise ConfigError("matryoshka_weights is set but matryoshka_dims is not")
        self.duplicate_free_batches = bool(duplicate_free_batches)
        self.temperature = checks.POSITIVE.check("temperature", temperature)
        self.supervised = bool(supervised)
        self.hard_negative_weight = float(hard_negative_weight)
        resolve_dropout_rates(dropout, 0.0)  # ConfigError now, not at the first step
        self.dropout = dropout

    def embedding_parts(self, batch):
        """(anchor, positive, negative) features, or the batch twice (dropout views)."""
        kwargs = {"dropout": self.dropout}
        if self.supervised:
            return [(batch["anchor"], kwargs), (batch["positive"], kwargs),
                    (batch["negative"], kwargs)]
        return [(batch, kwargs), (batch, kwargs)]

    def contrastive_views(self, batch, training):
        """Returns the local (z1, z2, z3-or-None) embeddings of a batch."""
        views = self.embed_parts(batch, training)
        return views[0], views[1], (views[2] if self.supervised else None)

    def loss_from_embeddings(self, embeddings, batch):
        """InfoNCE from the views' embeddings (GradCache hook)."""
        del batch
        loss = self.contrastive_loss(*embeddings)
        return loss, {"loss": loss}

    def contrastive_loss(self, z1, z2, z3=None):
        """InfoNCE over the global batch (gathered across replicas)."""
        if z3 is None:
            z1, z2 = gather_with_local_grad(z1, z2)
        else:
            # N negatives per anchor travel as one (B, N * H) row each, so the gathered
            # rows stay anchor-major across replicas.
            width = z3.shape[-1]
            rows = tf.reshape(z3, [z1.shape[0] or tf.shape(z1)[0],
                                   _negatives_per_anchor(z1, z3) * width])
            z1, z2, rows = gather_with_local_grad(z1, z2, rows)
            z3 = tf.reshape(rows, [-1, width])
        if self.matryoshka_dims:
            def loss_at(*cut):
                return losses.info_nce(*cut, temperature=self.temperature,
                                       hard_negative_weight=self.hard_negative_weight)

            views = [z1, z2] if z3 is None else [z1, z2, z3]
            return matryoshka.nested_loss(loss_at, views, self.matryoshka_dims,
                                          self.matryoshka_weights)
        return losses.info_nce(z1, z2, z3, self.temperature, self.hard_negative_weight)

    def compute_losses(self, batch, training=True):
        return self.loss_from_embeddings(self.embed_parts(batch, training), batch)

    def get_config(self):
        config = super().get_config()
        config.update({"temperature": self.temperature, "supervised": self.supervised,
                       "hard_negative_weight": self.hard_negative_weight,
                       "dropout": self.dropout,
                       "matryoshka_dims": (list(self.matryoshka_dims)
                                           if self.matryoshka_dims else None),
                       "matryoshka_weights": (list(self.matryoshka_weights)
                                              if self.matryoshka_weights else None),
                       "duplicate_free_batches": self.duplicate_free_batches})
        return config


def _negatives_per_anchor(z1, z3):
    """N, the hard negatives per anchor: rows of z3 over rows of z1 (static when known)."""
    if z1.shape[0] is not None and z3.shape[0] is not None:
        return z3.shape[0] // z1.shape[0]
    return tf.shape(z3)[0] // tf.shape(z1)[0]
