"""Scored pairs: a siamese encoder learns graded (sentence1, sentence2, score) pairs with
CoSENT, AnglE or CosineSimilarityLoss (docs/methods.md, "Scored pairs")."""

import tensorflow as tf

from tfsent import checks, losses, matryoshka
from tfsent.checks import Field
from tfsent.errors import ConfigError
from tfsent.methods.base import SentenceMethod
from tfsent.methods.spec import MethodSpec

LOSSES = ("cosent", "angle", "cosine")
LOSS = checks.Choices(LOSSES)


def check_score_range(score_min, score_max):
    """ConfigError unless score_min < score_max."""
    if not score_min < score_max:
        raise ConfigError(f"score_min ({score_min}) must be below score_max ({score_max})")


class ScoredPairs(SentenceMethod):
    """Siamese encoder on (sentence1, sentence2, score) batches; u, v the two sides'
    embeddings, y the gold scores.

    loss="cosent": `losses.cosent_loss(cos(u, v), y, scale)`; "angle":
    `losses.angle_loss(u, v, y, scale, angle_cosine_weight)` (CoSENT's ranking on AnglE's
    angle similarity); "cosine": `losses.cosine_similarity_loss(u, v, (y - score_min) /
    (score_max - score_min))`. CoSENT and AnglE use only the order of the scores within a
    batch (a per-replica batch under a strategy); CosineSimilarityLoss the scaled values.

    Args:
        encoder: SentenceEncoder.
        loss: "cosent", "angle" or "cosine".
        scale: CoSENT / AnglE scale (1 / tau), 20.
        score_min, score_max: the scores' declared range (STS-B: 0, 5).
        angle_cosine_weight: AnglE only, weight of its cosine (CoSENT) term; 0 as
            sentence-transformers' AnglELoss.
        train_pooling, export_pooling, matryoshka_dims, matryoshka_weights: see
            SentenceMethod.
    """

    metric_names = ("loss",)
    input_kind = "scored_pairs"
    supports_grad_cache = True
    supports_matryoshka = True

    def __init__(self, encoder, loss="cosent", scale=20.0, score_min=0.0, score_max=5.0,
                 angle_cosine_weight=0.0, train_pooling=None, export_pooling=None, **kwargs):
        super().__init__(encoder, train_pooling, export_pooling, **kwargs)
        self.loss_name = LOSS.check("loss", loss)
        self.scale = checks.POSITIVE.check("scale", scale)
        check_score_range(score_min, score_max)
        self.score_min, self.score_max = float(score_min), float(score_max)
        self.angle_cosine_weight = float(angle_cosine_weight)
        if self.angle_cosine_weight < 0:
            raise ConfigError(f"angle_cosine_weight must be >= 0, got {angle_cosine_weight}")
        if loss == "angle" and encoder.hidden_dim % 2:
            raise ConfigError(f"loss='angle' splits embeddings into real and imaginary "
                              f"halves; the encoder's size {encoder.hidden_dim} is odd")

    def embedding_parts(self, batch):
        """Both sides of the pairs (GradCache hook)."""
        return [(batch["sentence1"], {}), (batch["sentence2"], {})]

    def compute_losses(self, batch, training=True):
        return self.loss_from_embeddings(self.embed_parts(batch, training), batch)

    def loss_from_embeddings(self, embeddings, batch):
        """The chosen loss from the two sides' embeddings and the batch's scores."""
        scores = tf.cast(batch["score"], tf.float32)
        loss = self.embedding_loss(lambda u, v: self.pair_loss(u, v, scores), embeddings)
        return loss, {"loss": loss}

    def pair_loss(self, u, v, scores):
        """The configured loss of embeddings u, v (B, H) and gold scores (B,)."""
        if self.loss_name == "cosent":
            return losses.cosent_loss(losses.pairwise_cosine(u, v), scores, self.scale)
        if self.loss_name == "angle":
            return losses.angle_loss(u, v, scores, self.scale, self.angle_cosine_weight)
        targets = (scores - self.score_min) / (self.score_max - self.score_min)
        return losses.cosine_similarity_loss(u, v, targets)

    def get_config(self):
        config = super().get_config()
        config.update({"loss": self.loss_name, "scale": self.scale,
                       "score_min": self.score_min, "score_max": self.score_max,
                       "angle_cosine_weight": self.angle_cosine_weight})
        return config


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------

SPEC = MethodSpec(
    "scored_pairs", ScoredPairs, "scored_pairs",
    "Scored pairs: learn graded (sentence1, sentence2, score) rows with CoSENT, AnglE or "
    "CosineSimilarityLoss.",
    fields=[
        Field("scored_loss", "cosent", LOSS, arg="loss",
              doc="cosent | angle | cosine (CosineSimilarityLoss)"),
        Field("scored_scale", 20.0, checks.POSITIVE, arg="scale",
              doc="CoSENT / AnglE scale (1 / tau)"),
        Field("score_min", 0.0, checks.Range(), arg="score_min",
              doc="lowest gold score (rows outside [score_min, score_max] are errors)"),
        Field("score_max", 5.0, checks.Range(), arg="score_max", doc="highest gold score"),
        Field("angle_cosine_weight", 0.0, checks.Range(0.0), arg="angle_cosine_weight",
              doc="AnglE: weight of its cosine (CoSENT) term"),
        *matryoshka.config_fields(),
    ],
    # No demo training data (the demo's scored pairs are its dev set): STS-B train, with
    # selection on STS-B dev, both from eval_data_dir.
    run_defaults={"train_data": "stsb", "eval_data": "stsb", "learning_rate": 2e-5,
                  "warmup_ratio": 0.1},
    validate=lambda config: check_score_range(config.score_min, config.score_max))
