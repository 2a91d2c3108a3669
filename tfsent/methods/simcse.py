"""SimCSE (Gao et al., 2021): unsupervised (dropout views) and supervised (NLI triplets);
`RetrievalSimCSE`, its supervised objective on (query, document) pairs (`--method=retrieval`)."""

import tensorflow as tf
from absl import logging

from tfsent import checks, formats, losses, matryoshka
from tfsent.checks import Field
from tfsent.methods.replicas import gather_with_local_grad
from tfsent.encoders.model import resolve_dropout_rates
from tfsent.methods.base import SentenceMethod, encoder_dropout_field
from tfsent.methods.spec import MethodSpec


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

    Matryoshka (`matryoshka_dims`, e.g. (384, 256, 128, 64, 32); SentenceMethod's
    `tfsent.matryoshka.MatryoshkaLoss` wrapper): the InfoNCE is applied to each prefix of
    the embeddings (truncated before the cosine's normalisation) and the weighted sum is
    the objective; embeddings are gathered across replicas once and then cut. GradCache
    works unchanged (it differentiates this loss of the full embeddings). CMLM-CSE
    inherits it for its contrastive term.

    Args:
        encoder: a SentenceEncoder.
        temperature: tau (0.05).
        supervised: see above.
        hard_negative_weight: added to each anchor's own hard-negative logit (0.0).
        encoder_dropout: encoder dropout spec for the views (None = the backbone's, 0.1 for
            BERT); the run-config field of the same name. (`dropout=`, its old name, still
            works and warns.)
        duplicate_free_batches: `fit` on raw triplets builds batches in which no text
            occurs twice (a duplicate is a false negative; `tfsent.data.pipelines`).
        train_pooling, export_pooling, matryoshka_dims, matryoshka_weights: see
            SentenceMethod.
    """

    metric_names = ("loss",)
    supports_grad_cache = True
    supports_matryoshka = True

    @property
    def input_kind(self):
        """Raw examples of `fit`: sentences, or NLI triplets when supervised."""
        return "triplets" if self.supervised else "sentences"

    def __init__(self, encoder, temperature=0.05, supervised=False, hard_negative_weight=0.0,
                 encoder_dropout=None, train_pooling=None, export_pooling=None,
                 duplicate_free_batches=True, **kwargs):
        if "dropout" in kwargs:  # the old name (saved configs, user code)
            old = kwargs.pop("dropout")
            if encoder_dropout is None:
                encoder_dropout = old
            logging.warning("%s(dropout=...) is now encoder_dropout=... (the run-config "
                            "field's name); dropout= will be removed", type(self).__name__)
        super().__init__(encoder, train_pooling, export_pooling, **kwargs)
        self.duplicate_free_batches = bool(duplicate_free_batches)
        self.temperature = checks.POSITIVE.check("temperature", temperature)
        self.supervised = bool(supervised)
        self.hard_negative_weight = float(hard_negative_weight)
        resolve_dropout_rates(encoder_dropout, 0.0)  # ConfigError now, not at the first step
        self.encoder_dropout = encoder_dropout

    def embedding_parts(self, batch):
        """(anchor, positive[, negative]) features (supervised; a batch without "negative"
        has in-batch negatives only), or the batch twice (dropout views)."""
        kwargs = {"dropout": self.encoder_dropout}
        if self.supervised:
            names = ("anchor", "positive", "negative") if "negative" in batch else \
                ("anchor", "positive")
            return [(batch[name], kwargs) for name in names]
        return [(batch, kwargs), (batch, kwargs)]

    def contrastive_views(self, batch, training):
        """Returns the local (z1, z2, z3-or-None) embeddings of a batch."""
        views = self.embed_parts(batch, training)
        return views[0], views[1], (views[2] if len(views) > 2 else None)

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

        def info_nce(*views):
            return losses.info_nce(*views, temperature=self.temperature,
                                   hard_negative_weight=self.hard_negative_weight)

        return self.embedding_loss(info_nce, [z1, z2] if z3 is None else [z1, z2, z3])

    def compute_losses(self, batch, training=True):
        return self.loss_from_embeddings(self.embed_parts(batch, training), batch)

    def get_config(self):
        config = super().get_config()
        config.update({"temperature": self.temperature, "supervised": self.supervised,
                       "hard_negative_weight": self.hard_negative_weight,
                       "encoder_dropout": self.encoder_dropout,
                       "duplicate_free_batches": self.duplicate_free_batches})
        return config


class RetrievalSimCSE(SimCSE):
    """Supervised SimCSE on retrieval rows (query, relevant document[, hard negatives]).

    The loss is SimCSE's supervised InfoNCE: each query's positive against every other
    document of the global batch (in-batch negatives) and, when the rows carry negative
    columns, every hard negative of the batch. Without hard negatives it is
    sentence-transformers' MultipleNegativesRankingLoss (cosine similarity, scale 20 =
    temperature 0.05, cross-entropy over the batch's documents).

    `fit` takes (anchor, positive[, negative_1 .. negative_N]) string rows (tuples, or dicts
    with those keys) or a tf.data Dataset of them; `query_prompt` is put before every
    anchor and `document_prompt` before every positive and negative, in training as in the
    export's encode_query / encode_document and the retrieval evaluation.

    Args:
        encoder: a SentenceEncoder.
        query_prompt, document_prompt: text put before queries / documents; None: the
            encoder's own (`encoder.prompts`, a sentence-transformers folder's), else
            none; "": none.
        **kwargs: SimCSE's (temperature, hard_negative_weight, encoder_dropout,
            duplicate_free_batches, pooling, Matryoshka).
    """

    input_kind = "pairs"

    def __init__(self, encoder, query_prompt=None, document_prompt=None, **kwargs):
        kwargs.pop("supervised", None)  # always supervised (a saved config names it)
        super().__init__(encoder, supervised=True, **kwargs)
        own = getattr(encoder, "prompts", None) or {}
        self.query_prompt = str(own.get("query_prompt") or "" if query_prompt is None
                                else query_prompt)
        self.document_prompt = str(own.get("document_prompt") or "" if document_prompt is None
                                   else document_prompt)

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None,
               **kwargs):
        """`SentenceMethod.export`, with the prompts the model trains with as the export's
        (a format that carries prompts; others record none) unless `kwargs` give them."""
        entry = formats.get_format(format)
        entry.check_dependency()  # (options() imports the writer)
        if "query_prompt" in entry.options():
            kwargs.setdefault("query_prompt", self.query_prompt)
            kwargs.setdefault("document_prompt", self.document_prompt)
        return super().export(filepath, format, verbose, input_signature, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update({"query_prompt": self.query_prompt,
                       "document_prompt": self.document_prompt})
        return config


def _negatives_per_anchor(z1, z3):
    """N, the hard negatives per anchor: rows of z3 over rows of z1 (static when known)."""
    if z1.shape[0] is not None and z3.shape[0] is not None:
        return z3.shape[0] // z1.shape[0]
    return tf.shape(z3)[0] // tf.shape(z1)[0]


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------

def contrastive_fields(temperature=0.05):
    """The run-config fields of SimCSE's constructor (CMLM-CSE adds its own)."""
    return [Field("temperature", temperature, checks.POSITIVE, arg="temperature",
                  doc="tau of the InfoNCE"),
            Field("hard_negative_weight", 0.0, checks.Range(), arg="hard_negative_weight",
                  doc="added to each anchor's own hard-negative logit"),
            encoder_dropout_field(None),
            *matryoshka.config_fields()]


# No text twice in a global batch (rows that would repeat one are deferred to a later
# batch; the log counts them).
DUPLICATE_FREE_FIELD = Field("duplicate_free_batches", True, arg="duplicate_free_batches",
                             doc="no text twice in a global batch")

SPECS = [
    MethodSpec(
        "simcse_unsup", SimCSE, "sentences", "Unsupervised SimCSE: dropout views, InfoNCE.",
        fields=contrastive_fields(), constants={"supervised": False},
        # CPU demo tau 0.2, lr 1e-5, 50 steps, a dev evaluation every 10 (the paper's tau
        # 0.05 and lr 3e-5 are configs/simcse_unsup.py): at tau 0.05 minilm-l6 tells a
        # sentence's dropout views from 31 in-batch negatives so easily that the loss is
        # ~1e-5, Adam scales that gradient noise up to full-size steps, and demo dev fell
        # from step 10 at lr 3e-5 and 1e-5. At tau 0.2 the loss keeps a gradient and dev
        # rises; past 50 steps it keeps rising while SICK-R test falls (150 steps: -0.7), so
        # the demo stops at 50 (docs/results.md, "No-flag runs").
        run_defaults={"temperature": 0.2, "learning_rate": 1e-5, "steps": 50,
                      "eval_every": 10}),
    MethodSpec(
        "simcse_sup", SimCSE, "triplets",
        "Supervised SimCSE: NLI triplets, contradiction as hard negative.",
        fields=[*contrastive_fields(), DUPLICATE_FREE_FIELD],
        constants={"supervised": True},
        # CPU demo lr 1e-5 (the paper's 5e-5 is configs/simcse_sup.py): 150 steps are seven
        # passes over the 669 demo triplets, and at 3e-5 the export lost 0.9 STS-B test
        # points; at 1e-5 it keeps STS-B and gains SICK-R (docs/results.md, "No-flag runs").
        run_defaults={"train_data": "demo_nli", "learning_rate": 1e-5}),
    MethodSpec(
        "retrieval", RetrievalSimCSE, "pairs",
        "Search: (query, relevant document) pairs (beir:DIR:train, a pairs .tsv/.jsonl, NLI "
        "entailment pairs), in-batch negatives plus any hard-negative columns "
        "(supervised SimCSE = MultipleNegativesRankingLoss).",
        fields=[*contrastive_fields(), DUPLICATE_FREE_FIELD,
                Field("hard_negatives", True, arg=None,
                      doc="use the rows' negative columns (a pairs file's negative_1..N, "
                          "NLI contradictions); false: in-batch negatives only")],
        run_args={"query_prompt": "query_prompt", "document_prompt": "document_prompt"},
        # CPU demo: the demo NLI triplets as (premise, entailment, contradiction) rows at
        # simcse_sup's demo learning rate (docs/training.md, "Training for search").
        run_defaults={"train_data": "demo_nli", "learning_rate": 1e-5}),
]
