"""CMLM-CSE: unsupervised SimCSE plus a conditional MLM auxiliary network."""

import tensorflow as tf

from tfsent import checks, losses
from tfsent.checks import Field
from tfsent.methods.replicas import global_mean
from tfsent.layers.cmlm import Fusioner, LexicalExtractor
from tfsent.methods.simcse import SimCSE, contrastive_fields
from tfsent.methods.spec import MethodSpec


class CMLMCSE(SimCSE):
    """SimCSE (unsupervised) + conditional MLM: L = w_c * L_contrast + lambda * L_MLM.

    Batches are token features carrying MLM inputs (`tfsent.data.pipelines.mask_tokens`):
    `masked_token_ids`, `mask_positions`, `mask_labels`, `mask_weights`. The sentence
    embedding h of the unmasked sentence (first SimCSE view) replaces the [CLS] slot of the
    frozen extractor's states on the masked sentence: h'' = [h ; h'[:, 1:]]; the fusioner
    predicts the masked tokens from h'', so the MLM gradient reaches the encoder only
    through h. Cross-entropy counts masked positions only (a global mean over replicas).

    Reductions: both terms are MEANS (InfoNCE over the batch's anchors, MLM cross-entropy
    over the batch's masked tokens, as SimCSE's own MLM auxiliary term), where the paper's
    equations (4)-(6) SUM over the N sentences and their masked tokens. Dividing the
    paper's L by N (a constant factor for Adam) gives mean_contrast + lambda_paper * p *
    mean_MLM, p the mean number of masked tokens per sentence, so `mlm_weight` here is on
    the mean scale: mlm_weight = lambda_paper * p. On wiki1m at max_seq_length 32 and
    mask rate 0.15, p = 2.84 (measured): the default 0.005 is lambda_paper = 0.0018, and
    the paper's 0.005 would be mlm_weight = 0.014.

    Args:
        encoder: the SentenceEncoder being trained; the extractor is copied from it here,
            so construct the method from the *initial* pretrained encoder.
        extractor_layers: k (8 for 12-layer BERT).
        fusion_layers: n (3).
        mlm_weight: lambda on the mean scale (0.005; see "Reductions").
        contrastive_weight: w_c (1.0; 0 switches the contrastive term off).
        mask_rate: the masking rate, in (0, 1), recorded for the data pipeline (0.15).
        tie_mlm_embeddings: tie the MLM vocabulary projection to the token embedding.
        **kwargs: SimCSE's arguments (temperature, encoder_dropout, poolings,
            Matryoshka).
    """

    metric_names = ("loss", "contrastive_loss", "mlm_loss", "mlm_accuracy")
    input_kind = "sentences_mlm"  # raw `fit` examples: sentences, masked at `mask_rate`
    supports_grad_cache = False  # the MLM loss reads the encoder's token states too

    def __init__(self, encoder, extractor_layers=8, fusion_layers=3, mlm_weight=0.005,
                 contrastive_weight=1.0, mask_rate=0.15, tie_mlm_embeddings=True,
                 fusion_dropout=0.1, **kwargs):
        kwargs.pop("supervised", None)
        super().__init__(encoder, supervised=False, **kwargs)
        self.extractor_layers = checks.SIZE.check("extractor_layers", extractor_layers)
        self.fusion_layers = checks.SIZE.check("fusion_layers", fusion_layers)
        self.mlm_weight = checks.NON_NEGATIVE.check("mlm_weight", mlm_weight)
        self.contrastive_weight = checks.NON_NEGATIVE.check("contrastive_weight",
                                                            contrastive_weight)
        self.mask_rate = checks.OPEN_RATE.check("mask_rate", mask_rate)
        self.tie_mlm_embeddings = bool(tie_mlm_embeddings)
        self.fusion_dropout = checks.RATE.check("fusion_dropout", fusion_dropout)
        encoder.require_own_forward("CMLM-CSE's lexical extractor (the first k layers)")
        self.extractor = LexicalExtractor.from_encoder(encoder, self.extractor_layers)
        bb = encoder.backbone
        self.fusioner = Fusioner(bb.vocabulary_size, bb.hidden_dim, bb.num_heads,
                                 bb.intermediate_dim, self.fusion_layers, self.fusion_dropout,
                                 self.tie_mlm_embeddings, dtype=bb.dtype_policy,
                                 name="fusioner")
        self.fusioner.build()
        self.fusioner.init_mlm_head(encoder)  # the checkpoint's MLM head when it has one

    def fused_states(self, h, batch):
        """h'' = [h ; h'[:, 1:]] with h' the extractor's states on the masked sentence."""
        h_prime = self.extractor({"token_ids": batch["masked_token_ids"],
                                  "padding_mask": batch["padding_mask"]})
        h = tf.cast(h, h_prime.dtype)
        return tf.concat([h[:, None, :], h_prime[:, 1:]], axis=1)

    def mlm_logits(self, h, batch, training):
        """Fusioner logits (B, P, V) at the masked positions."""
        matrix = self.encoder.backbone.token_embedding.embeddings if self.tie_mlm_embeddings \
            else None
        return self.fusioner(self.fused_states(h, batch), batch["padding_mask"],
                             batch["mask_positions"], embedding_matrix=matrix,
                             training=training)

    def compute_losses(self, batch, training=True):
        z1, z2, _ = self.contrastive_views(batch, training)
        contrastive = self.contrastive_loss(z1, z2)
        logits = self.mlm_logits(z1, batch, training)
        ce_sum, count, correct = losses.masked_lm_loss(logits, batch["mask_labels"],
                                                       batch["mask_weights"])
        # One reduction, ordered after the embedding gather (inside contrastive).
        mlm_share, mlm, accuracy = global_mean(ce_sum, count, correct, after=contrastive)
        objective = self.contrastive_weight * contrastive + self.mlm_weight * mlm_share
        logs = {"loss": self.contrastive_weight * contrastive + self.mlm_weight * mlm,
                "contrastive_loss": contrastive, "mlm_loss": mlm, "mlm_accuracy": accuracy}
        return objective, logs

    def get_config(self):
        config = super().get_config()
        config.update({"extractor_layers": self.extractor_layers,
                       "fusion_layers": self.fusion_layers, "mlm_weight": self.mlm_weight,
                       "contrastive_weight": self.contrastive_weight,
                       "mask_rate": self.mask_rate,
                       "tie_mlm_embeddings": self.tie_mlm_embeddings,
                       "fusion_dropout": self.fusion_dropout})
        return config


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------

SPEC = MethodSpec(
    "cmlm_cse", CMLMCSE, "sentences_mlm",
    "CMLM-CSE: SimCSE + conditional MLM on a frozen lexical extractor.",
    fields=[*contrastive_fields(),
            Field("extractor_layers", 4, checks.SIZE, arg="extractor_layers",
                  doc="k, the frozen extractor's layers (8 for 12-layer BERT)"),
            Field("fusion_layers", 2, checks.SIZE, arg="fusion_layers",
                  doc="n, the fusioner's layers (3 in the paper)"),
            Field("mask_rate", 0.15, checks.OPEN_RATE, arg="mask_rate",
                  doc="MLM masking rate (also read by the data pipeline)"),
            Field("mlm_weight", 0.005, checks.NON_NEGATIVE, arg="mlm_weight",
                  doc="lambda on the mean scale"),
            Field("contrastive_weight", 1.0, checks.NON_NEGATIVE, arg="contrastive_weight",
                  doc="w_c (0 switches the contrastive term off)"),
            Field("tie_mlm_embeddings", True, arg="tie_mlm_embeddings",
                  doc="tie the MLM vocabulary projection to the token embedding")],
    # CPU demo lr 1e-5: at 3e-5 the fresh fusion/MLM head's gradient (the in-batch
    # contrastive loss is ~0 on the demo sentences) lowered demo dev at every evaluation;
    # at 1e-5 dev rises and STS-B / SICK-R test keep (docs/results.md, "No-flag runs").
    run_defaults={"learning_rate": 1e-5})
