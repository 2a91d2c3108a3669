"""ConSERT (Yan et al., 2021): contrastive views from embedding-level augmentations."""

import tensorflow as tf

from tfsent import checks, losses, matryoshka
from tfsent.checks import Field
from tfsent.methods.replicas import gather_with_local_grad, global_mean
from tfsent.encoders.model import resolve_dropout_rates
from tfsent.errors import ConfigError
from tfsent.layers.augment import (AUGMENTATIONS, Augmentation, check_augmentation,
                                   fgv_perturbation, identity_position_ids)
from tfsent.layers.nli_head import NLIHead
from tfsent.methods.base import SentenceMethod, concat_features, encoder_dropout_field
from tfsent.methods.spec import MethodSpec

MODES = ("unsup", "joint", "sup")
DIRECTION_REDUCTIONS = ("mean", "sum")
DIRECTION_REDUCTION = checks.Choices(DIRECTION_REDUCTIONS)
AUGMENTATION = checks.Choices(AUGMENTATIONS)
_METRICS = {"unsup": ("loss", "contrastive_loss"),
            "joint": ("loss", "ce_loss", "contrastive_loss", "nli_accuracy"),
            "sup": ("loss", "ce_loss", "nli_accuracy")}


class ConSERT(SentenceMethod):
    """ConSERT: two augmented views of each sentence, symmetric NT-Xent (tau 0.1).

    Views: each view's augmentation (`tfsent.layers.augment`) acts on the embedding-layer
    output inside the encoder (`embedding_fn`), or on the position ids (`shuffle`). The
    views of a batch go through the encoder in ONE pass (the batch stacked once per view).
    The augmentations' randomness comes from stateless ops keyed by (seed, replica,
    optimizer step, view), so a step is reproducible. `encoder_dropout` is the encoder's
    dropout during training: 0.0 in the paper's unsupervised recipe (it removes BERT's
    dropout), None (the backbone's own rate) in the reference's joint script.

    Modes:
      unsup: batches are sentence features; L = L_con = NT-Xent(z1, z2). (The reference
        multiplies it by its cl_rate 0.15; a constant factor, left out here: see the
        docs/faithfulness.md.)
      joint: batches from `nli_pair_dataset(..., group_premises=False)` (ordinary shuffled
        pairs, as the reference's DataLoader); L = L_ce + alpha * L_con, as the reference:
        L_ce: an `NLIHead` (linear Dense(3)) on concat(u, v, |u - v|) (+ max(u, v)^2 with
          `ce_max_feature`, the reference's `concatenation_sent_max_square`) of the
          un-augmented pass over premises u and hypotheses v, a mean over the valid pairs
          of the global batch;
        L_con = NT-Xent(premises' two views) + NT-Xent(hypotheses' two views), computed
          separately (a premise's own hypothesis is never its negative). With
          `view1_augmentation="none"` view 1 IS the un-augmented CE pass (the reference's
          joint strategies contrast the CE pass with one augmented pass); otherwise both
          views are extra passes.
      sup: L_ce only (stage 1 of sup-unsup).
    The two-stage settings are two runs: stage 2 is `--method=consert` with
    `--config.encoder=RUN1/encoder`.

    `adversarial` (FGV, joint mode): delta = epsilon * g / ||g|| per token, g the gradient
    of the (local) CE w.r.t. the embedding output of the un-augmented pass; the view is
    x + delta (delta without gradient). In `sup` mode there are no views. In `unsup` it is
    a ConfigError.

    Global batch: the views (and the valid flags) travel in one collective
    (`gather_with_local_grad`); the CE is a global mean (`global_mean(..., after=)`).
    `valid` masks the padding slots of premise-grouped batches, should any be given.

    Args:
        encoder: a SentenceEncoder.
        mode: unsup | joint | sup.
        view1_augmentation, view2_augmentation: names from AUGMENTATIONS.
        token_cutoff_rate, feature_cutoff_rate, aug_dropout_rate: rates of those
            augmentations, in [0, 1) (paper: 0.15, 0.2, 0.2; the joint script: 0.1).
        adversarial_epsilon: FGV step size (>= 0).
        temperature: NT-Xent tau (0.1).
        direction_reduction: "sum" (reference code: sum of the two directions' means) or
            "mean" (mean over the 2B anchors).
        alpha: weight of L_con in joint mode (0.15, the reference's cl_rate).
        ce_max_feature: add max(u, v)^2 to the classifier features.
        encoder_dropout: encoder dropout spec during training (None: the backbone's).
        seed: seed of the augmentations.
        train_pooling: loss pooling (mean); export_pooling: exported pooling (paper's
            numbers: last2_avg).
    """

    def __init__(self, encoder, mode="unsup", view1_augmentation="feature_cutoff",
                 view2_augmentation="shuffle", token_cutoff_rate=0.15,
                 feature_cutoff_rate=0.2, aug_dropout_rate=0.2, adversarial_epsilon=1.0,
                 temperature=0.1, direction_reduction="sum", alpha=0.15,
                 ce_max_feature=False, encoder_dropout=0.0, seed=0, train_pooling="mean",
                 export_pooling=None, **kwargs):
        checks.one_of("ConSERT mode", mode, MODES)
        # Keras must not track these; the base class reads them in __init__.
        object.__setattr__(self, "metric_names", _METRICS[mode])
        object.__setattr__(self, "mode", mode)
        super().__init__(encoder, train_pooling or "mean", export_pooling, **kwargs)
        supervised = mode != "unsup"
        check_augmentation(view1_augmentation, supervised)
        check_augmentation(view2_augmentation, supervised)
        self.mode = mode
        self.view1_augmentation = view1_augmentation
        self.view2_augmentation = view2_augmentation
        self.token_cutoff_rate = checks.RATE.check("token_cutoff_rate", token_cutoff_rate)
        self.feature_cutoff_rate = checks.RATE.check("feature_cutoff_rate",
                                                     feature_cutoff_rate)
        self.aug_dropout_rate = checks.RATE.check("aug_dropout_rate", aug_dropout_rate)
        self.adversarial_epsilon = checks.NON_NEGATIVE.check("adversarial_epsilon",
                                                             adversarial_epsilon)
        self.temperature = checks.POSITIVE.check("temperature", temperature)
        self.direction_reduction = DIRECTION_REDUCTION.check("direction_reduction",
                                                             direction_reduction)
        self.alpha = checks.NON_NEGATIVE.check("alpha", alpha)
        self.ce_max_feature = bool(ce_max_feature)
        resolve_dropout_rates(encoder_dropout, 0.0)  # ConfigError now, not at the first step
        self.encoder_dropout = encoder_dropout
        self.seed = int(seed)
        rates = {"token_cutoff": self.token_cutoff_rate,
                 "feature_cutoff": self.feature_cutoff_rate, "dropout": self.aug_dropout_rate}
        self.aug1 = Augmentation(view1_augmentation, rates.get(view1_augmentation, 0.0),
                                 self.adversarial_epsilon, name="view1_augmentation")
        self.aug2 = Augmentation(view2_augmentation, rates.get(view2_augmentation, 0.0),
                                 self.adversarial_epsilon, name="view2_augmentation")
        self.classifier = None
        if supervised:
            self.classifier = NLIHead(encoder.hidden_dim, max_square_feature=self.ce_max_feature,
                                      name="nli_classifier")
            self.classifier.build()

    # -- pieces -----------------------------------------------------------------------------
    @property
    def supports_matryoshka(self):
        """unsup and joint: Matryoshka wraps the NT-Xent of the views (the CE head of joint
        mode sees the full embedding); sup has no embedding loss."""
        return self.mode != "sup"

    def _matryoshka_refusal(self):
        return f" (mode {self.mode!r})"

    @property
    def dev_pooling(self):
        """Dev selection uses the training pooling (`mean`), as the paper does; the export
        may carry another (`last2_avg`, the paper's reported numbers)."""
        return self.train_pooling

    @property
    def uses_adversarial(self):
        return self.mode == "joint" and "adversarial" in (self.view1_augmentation,
                                                          self.view2_augmentation)

    @property
    def view1_is_ce_pass(self):
        """Joint mode with an un-augmented view 1: the CE pass serves as view 1."""
        return self.mode == "joint" and self.view1_augmentation == "none"

    def step_seeds(self):
        """Two int32 [2] seeds (view 1, view 2) from (seed, replica, optimizer step)."""
        step = tf.constant(0, tf.int32)
        if getattr(self, "optimizer", None) is not None:
            step = tf.cast(self.optimizer.iterations, tf.int32)
        ctx = tf.distribute.get_replica_context()
        replica = tf.constant(0, tf.int32)
        if ctx is not None and ctx.num_replicas_in_sync > 1:
            replica = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
        base = tf.constant(self.seed, tf.int32) * 1009 + replica
        return tf.stack([base, 2 * step]), tf.stack([base, 2 * step + 1])

    def augmented_passes(self, features, augmentations, seeds, training=True, delta=None):
        """One encoder pass over `features` stacked once per augmentation, copy k
        transformed by `augmentations[k]` with `seeds[k]`; returns the local float32
        pooled embeddings of each copy (a list)."""
        k = len(augmentations)
        mask = features["padding_mask"]
        ids = [aug.position_ids(mask, seed) for aug, seed in zip(augmentations, seeds)]
        position_ids = None
        if any(p is not None for p in ids):
            position_ids = tf.concat([identity_position_ids(mask) if p is None else p
                                      for p in ids], axis=0)

        def embedding_fn(x, padding_mask):
            parts = zip(tf.split(x, k, axis=0), tf.split(padding_mask, k, axis=0),
                        augmentations, seeds)
            return tf.concat([aug.apply(xi, mi, seed, delta) for xi, mi, aug, seed in parts],
                             axis=0)

        z = self.embed(concat_features([features] * k), training,
                       dropout=self.encoder_dropout, embedding_fn=embedding_fn,
                       position_ids=position_ids)
        return tf.split(tf.cast(z, tf.float32), k, axis=0)

    def views(self, features, training=True, delta=None, seeds=None):
        """The local (z1, z2): one encoder pass over the features stacked twice, view 1's
        augmentation on the first copy and view 2's on the second."""
        seeds = self.step_seeds() if seeds is None else seeds
        z1, z2 = self.augmented_passes(features, [self.aug1, self.aug2], seeds, training,
                                       delta)
        return z1, z2

    def supervised_pass(self, sentences, labels, training=True, embedding_fn=None):
        """Un-augmented pass over [premises; hypotheses]: (pooled float32 (2B, H),
        per-pair CE, per-pair correctness)."""
        z = tf.cast(self.embed(sentences, training, dropout=self.encoder_dropout,
                               embedding_fn=embedding_fn), tf.float32)
        u, v = tf.split(z, 2, axis=0)
        ce, correct = self.classifier.cross_entropy(u, v, labels)
        return z, ce, correct

    def adversarial_pass(self, sentences, labels, valid, training=True):
        """`supervised_pass` plus delta, the FGV perturbation of its embedding output from
        the gradient of the local valid-masked mean CE: (z, ce, correct, delta)."""
        captured = {}
        with tf.GradientTape() as tape:
            def capture(x, padding_mask):
                tape.watch(x)
                captured["x"] = x
                return x

            z, ce, correct = self.supervised_pass(sentences, labels, training, capture)
            local = tf.reduce_sum(ce * valid) / tf.maximum(tf.reduce_sum(valid), 1.0)
        grad = tape.gradient(local, captured["x"])
        delta = fgv_perturbation(grad, sentences["padding_mask"], self.adversarial_epsilon)
        return z, ce, correct, delta

    def contrastive_loss(self, z1, z2, valid=None):
        """NT-Xent of two local views over the global batch (gathered across replicas)."""
        if valid is None:
            z1, z2 = gather_with_local_grad(z1, z2)  # the step's only collective

            def nt_xent(a, b):
                return losses.nt_xent(a, b, self.temperature, self.direction_reduction)

            return self.embedding_loss(nt_xent, [z1, z2])
        # Joint: [premises; hypotheses] in each view; one NT-Xent per side, added.
        p1, h1 = tf.split(z1, 2, axis=0)
        p2, h2 = tf.split(z2, 2, axis=0)
        p1, p2, h1, h2, valid = gather_with_local_grad(p1, p2, h1, h2, valid[:, None])
        valid = tf.stop_gradient(valid[:, 0])

        def both_sides(p1, p2, h1, h2):
            return (losses.nt_xent(p1, p2, self.temperature, self.direction_reduction, valid)
                    + losses.nt_xent(h1, h2, self.temperature, self.direction_reduction,
                                     valid))

        return self.embedding_loss(both_sides, [p1, p2, h1, h2])

    # -- objective --------------------------------------------------------------------------
    def compute_losses(self, batch, training=True):
        if self.mode == "unsup":
            z1, z2 = self.views(batch, training)
            con = self.contrastive_loss(z1, z2)
            return con, {"loss": con, "contrastive_loss": con}

        sentences = concat_features([batch["premise"], batch["hypothesis"]])
        valid = tf.cast(batch["valid"], tf.float32)
        labels = batch["label"]
        delta = None
        if self.uses_adversarial:
            z, ce, correct, delta = self.adversarial_pass(sentences, labels, valid, training)
        else:
            z, ce, correct = self.supervised_pass(sentences, labels, training)
        con = None
        if self.mode == "joint":
            seed1, seed2 = self.step_seeds()
            if self.view1_is_ce_pass:
                z1 = z
                (z2,) = self.augmented_passes(sentences, [self.aug2], [seed2], training,
                                              delta)
            else:
                z1, z2 = self.views(sentences, training, delta, (seed1, seed2))
            con = self.contrastive_loss(z1, z2, valid)
        ce_share, ce_mean, accuracy = global_mean(
            tf.reduce_sum(ce * valid), tf.reduce_sum(valid), tf.reduce_sum(correct * valid),
            after=con)
        logs = {"ce_loss": ce_mean, "nli_accuracy": accuracy}
        if con is None:
            logs["loss"] = ce_mean
            return ce_share, logs
        logs["loss"] = ce_mean + self.alpha * con
        logs["contrastive_loss"] = con
        return ce_share + self.alpha * con, logs

    def nli_accuracy(self, rows, batch_size=128, max_seq_length=None):
        """Accuracy (x100) of the CE head on (premise, hypothesis, label) rows, with the
        training pooling (the head was trained on it)."""
        if self.classifier is None:
            raise ConfigError("nli_accuracy needs a supervised ConSERT mode (joint or sup)")
        return self.classifier.rows_accuracy(
            lambda s: self.encoder.encode(s, batch_size, normalize=False, verbose=0,
                                          pooling=self.train_pooling,
                                          truncate_dim=matryoshka.FULL_DIM,
                                          max_seq_length=max_seq_length), rows)

    @property
    def input_kind(self):
        """Raw examples of `fit`: sentences (unsup) or NLI (premise, hypothesis, label) rows."""
        return "sentences" if self.mode == "unsup" else "nli_pairs"

    def get_config(self):
        config = super().get_config()
        config.update({
            "mode": self.mode, "view1_augmentation": self.view1_augmentation,
            "view2_augmentation": self.view2_augmentation,
            "token_cutoff_rate": self.token_cutoff_rate,
            "feature_cutoff_rate": self.feature_cutoff_rate,
            "aug_dropout_rate": self.aug_dropout_rate,
            "adversarial_epsilon": self.adversarial_epsilon, "temperature": self.temperature,
            "direction_reduction": self.direction_reduction, "alpha": self.alpha,
            "ce_max_feature": self.ce_max_feature, "encoder_dropout": self.encoder_dropout,
            "seed": self.seed})
        return config


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------

def _fields(supervised, matryoshka_loss=True):
    """The config fields of a ConSERT mode; CPU-demo defaults (supervised: the reference's
    joint script, below); `matryoshka_loss`: the mode has an embedding loss to wrap."""
    fields = [
        Field("view1_augmentation", "none" if supervised else "feature_cutoff", AUGMENTATION,
              arg="view1_augmentation", doc="view 1's augmentation"),
        Field("view2_augmentation", "token_cutoff" if supervised else "shuffle",
              AUGMENTATION, arg="view2_augmentation", doc="view 2's augmentation"),
        Field("token_cutoff_rate", 0.1 if supervised else 0.15, checks.RATE,  # paper: 0.15
              arg="token_cutoff_rate", doc="token cutoff rate"),
        Field("feature_cutoff_rate", 0.2, checks.RATE, arg="feature_cutoff_rate",  # paper
              doc="feature cutoff rate"),
        Field("aug_dropout_rate", 0.2, checks.RATE, arg="aug_dropout_rate",  # paper
              doc="rate of the dropout augmentation"),
        # FGV step (not given in the paper; our choice).
        Field("adversarial_epsilon", 1.0, checks.NON_NEGATIVE, arg="adversarial_epsilon",
              doc="FGV step size"),
        Field("temperature", 0.1, checks.POSITIVE, arg="temperature", doc="NT-Xent tau"),
        # Reference code "sum"; "mean" = mean over 2B anchors.
        Field("direction_reduction", "sum", DIRECTION_REDUCTION, arg="direction_reduction",
              doc="how the NT-Xent's two directions are reduced"),
        # Weight of L_con in joint mode (reference cl_rate).
        Field("consert_alpha", 0.15, checks.NON_NEGATIVE, arg="alpha",
              doc="weight of L_con in joint mode"),
        Field("ce_max_feature", supervised, arg="ce_max_feature",
              doc="add max(u, v)^2 to the CE features"),
        # ConSERT removes BERT's dropout (unsup); the joint script keeps it.
        encoder_dropout_field(None if supervised else 0.0),
    ]
    if supervised:
        fields.append(Field("nli_eval_split", "test", types=(str,),
                            doc="after training: NLI accuracy of the head on this split"))
    if matryoshka_loss:
        fields += matryoshka.config_fields()
    return fields


def _augmentation_checks(supervised):
    """The validation hook: adversarial views need the CE loss (the constructor's check)."""
    def validate(config):
        for name in ("view1_augmentation", "view2_augmentation"):
            try:
                check_augmentation(config[name], supervised=supervised)
            except ConfigError as e:
                raise ConfigError(f"{name}: {e}") from None
    return validate


# CPU-demo run defaults. lr 1e-6 instead of the paper's 5e-7 (thousands of steps from raw
# BERT): the demo runs 150 steps from minilm-l6; 1e-6 beats the start on demo dev and keeps
# STS-B / SICK-R test, while 2e-6, 5e-6 and 1e-5 beat it on dev but cost 0.4-1.2 SICK-R test
# points (docs/results.md, "No-flag runs"). The supervised modes set their own rate below.
_RUN_DEFAULTS = {"pooling": "mean", "batch_size": 32, "learning_rate": 1e-6,
                 "warmup_ratio": 0.1}

# The supervised modes follow the reference's joint / SBERT scripts
# (scripts/sup-consert-joint-base.sh, scripts/sup-sbert-base.sh in yym6472/ConSERT):
# view 1 = the CE pass itself (strategy "cutoff": rep_a is view 1), view 2 = row (token)
# cutoff at rate 0.1, max(u, v)^2 classifier feature, BERT's dropout kept (no --no_dropout)
# (`_fields(supervised=True)`), lr 2e-5 (main.py's default, which these scripts keep).
_SUPERVISED_RUN_DEFAULTS = dict(_RUN_DEFAULTS, learning_rate=2e-5, train_data="demo_nli")

# Joint / sup read NLI pairs (`nli_pairs`) in ordinary shuffled batches, as the reference's
# DataLoader (premise-grouped batches are SupCon-SBERT's). Two-stage settings: run
# consert_sup or consert_joint, then `--method=consert --config.encoder=RUN1/encoder`.
SPECS = [
    MethodSpec("consert", ConSERT, "sentences",
               "ConSERT unsupervised: augmented embedding views, NT-Xent (tau 0.1).",
               fields=_fields(False), run_defaults=_RUN_DEFAULTS, run_args={"seed": "seed"},
               constants={"mode": "unsup"}, validate=_augmentation_checks(False)),
    MethodSpec("consert_joint", ConSERT, "nli_pairs",
               "ConSERT joint: NLI cross-entropy + alpha * (NT-Xent of the premises' views + "
               "NT-Xent of the hypotheses' views).",
               fields=_fields(True), run_defaults=_SUPERVISED_RUN_DEFAULTS,
               run_args={"seed": "seed"}, constants={"mode": "joint"},
               validate=_augmentation_checks(True)),
    MethodSpec("consert_sup", ConSERT, "nli_pairs",
               "ConSERT sup: NLI cross-entropy only (stage 1 of sup-unsup).",
               fields=_fields(True, matryoshka_loss=False),
               run_defaults=_SUPERVISED_RUN_DEFAULTS, run_args={"seed": "seed"},
               constants={"mode": "sup"},
               validate=_augmentation_checks(True)),
]
