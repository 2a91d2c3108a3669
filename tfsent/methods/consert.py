"""ConSERT (Yan et al., 2021): contrastive views from embedding-level augmentations."""

import keras
import tensorflow as tf

from tfsent import losses
from tfsent.distribute import gather_with_local_grad, global_sum
from tfsent.errors import ConfigError
from tfsent.layers.augment import (Augmentation, check_augmentation, fgv_perturbation,
                                   identity_position_ids)
from tfsent.methods.base import SentenceMethod, concat_features

MODES = ("unsup", "joint", "sup")
_METRICS = {"unsup": ("loss", "contrastive_loss"),
            "joint": ("loss", "ce_loss", "contrastive_loss", "nli_accuracy"),
            "sup": ("loss", "ce_loss", "nli_accuracy")}


def masked_nt_xent(z1, z2, valid=None, temperature=0.1, direction_reduction="sum"):
    """NT-Xent (`losses.nt_xent`) restricted to valid rows.

    `valid` (N,) marks real examples (NLI batches have padding slots that repeat row 0):
    invalid rows are neither anchors nor candidates. With every row valid (or
    valid=None) this is `losses.nt_xent`.
    """
    if valid is None:
        return losses.nt_xent(z1, z2, temperature, direction_reduction)
    if direction_reduction not in ("mean", "sum"):
        raise ValueError(f"direction_reduction must be 'mean' or 'sum', got "
                         f"{direction_reduction!r}")
    z = tf.concat([z1, z2], axis=0)
    n = tf.shape(z1)[0]
    ok = tf.concat([valid, valid], axis=0) > 0
    sim = losses.cosine_matrix(z, z) / temperature
    masked = tf.logical_or(tf.cast(tf.eye(2 * n), tf.bool), tf.logical_not(ok)[None, :])
    sim = sim - tf.cast(masked, tf.float32) * 1e9
    labels = tf.concat([tf.range(n, 2 * n), tf.range(0, n)], axis=0)
    per_anchor = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=sim)
    w = tf.cast(ok, tf.float32)
    loss = tf.reduce_sum(per_anchor * w) / tf.maximum(tf.reduce_sum(w), 1.0)
    return 2.0 * loss if direction_reduction == "sum" else loss


class ConSERT(SentenceMethod):
    """ConSERT: two augmented views of each sentence, symmetric NT-Xent (tau 0.1).

    Views: each view's augmentation (`tfsent.layers.augment`) acts on the embedding-layer
    output inside the encoder (`embedding_fn`), or on the position ids (`shuffle`). Both
    views of a batch go through the encoder in ONE pass (the batch stacked twice, view 1
    then view 2). Encoder dropout is off during training (`encoder_dropout=0.0`, the
    paper removes BERT's dropout); the augmentations' randomness comes from stateless ops
    keyed by (seed, replica, optimizer step, view), so a step is reproducible.

    Modes:
      unsup: batches are sentence features; L = L_con.
      joint: batches from `nli_pair_dataset` ({premise, hypothesis, label, valid, ...});
        L = L_ce + alpha * L_con. L_ce: a linear Dense(3) on concat(u, v, |u - v|)
        (+ max(u, v)^2 with `ce_max_feature`, a trick of the reference code) of the
        un-augmented premise u and hypothesis v, mean over valid pairs of the global batch.
        L_con: the two views of the batch's premises AND hypotheses (2B sentences, padding
        slots excluded).
      sup: L_ce only (stage 1 of sup-unsup).
    The two-stage settings are two runs: stage 2 is `--method=consert` with
    `--config.encoder=RUN1/encoder`.

    `adversarial` (FGV, joint mode): delta = epsilon * g / ||g|| per token, g the gradient
    of the (local) CE w.r.t. the embedding output of the un-augmented pass; the view is
    x + delta (delta without gradient). In `sup` mode there are no views. In `unsup` it is
    a ConfigError.

    Global batch: the step's only collective gathers both views (and the valid flags) with
    `gather_with_local_grad`; the CE is a global mean via `global_sum(..., after=)`.

    Args:
        encoder: a SentenceEncoder.
        mode: unsup | joint | sup.
        view1_augmentation, view2_augmentation: names from AUGMENTATIONS.
        token_cutoff_rate, feature_cutoff_rate, aug_dropout_rate: rates of those
            augmentations (paper: 0.15, 0.2, 0.2).
        adversarial_epsilon: FGV step size.
        temperature: NT-Xent tau (0.1).
        direction_reduction: "sum" (reference code: sum of the two directions' means) or
            "mean" (mean over the 2B anchors).
        alpha: weight of L_con in joint mode (0.15).
        ce_max_feature: add max(u, v)^2 to the classifier features.
        encoder_dropout: encoder dropout during training (0.0 for ConSERT).
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
        if mode not in MODES:
            raise ConfigError(f"unknown ConSERT mode {mode!r}; choose one of {', '.join(MODES)}")
        # Keras must not track this tuple; the base class reads it in __init__.
        object.__setattr__(self, "metric_names", _METRICS[mode])
        super().__init__(encoder, train_pooling or "mean", export_pooling, **kwargs)
        supervised = mode != "unsup"
        check_augmentation(view1_augmentation, supervised)
        check_augmentation(view2_augmentation, supervised)
        if direction_reduction not in ("mean", "sum"):
            raise ConfigError(f"direction_reduction must be 'mean' or 'sum', got "
                              f"{direction_reduction!r}")
        if not temperature or float(temperature) <= 0:
            raise ConfigError(f"temperature must be > 0, got {temperature!r}")
        self.mode = mode
        self.view1_augmentation = view1_augmentation
        self.view2_augmentation = view2_augmentation
        self.token_cutoff_rate = float(token_cutoff_rate)
        self.feature_cutoff_rate = float(feature_cutoff_rate)
        self.aug_dropout_rate = float(aug_dropout_rate)
        self.adversarial_epsilon = float(adversarial_epsilon)
        self.temperature = float(temperature)
        self.direction_reduction = direction_reduction
        self.alpha = float(alpha)
        self.ce_max_feature = bool(ce_max_feature)
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
            dim = encoder.hidden_dim
            self.classifier = keras.layers.Dense(3, name="nli_classifier")
            self.classifier.build((None, (4 if self.ce_max_feature else 3) * dim))

    # -- pieces -----------------------------------------------------------------------------
    @property
    def dev_pooling(self):
        """Dev selection uses the training pooling (`mean`), as the paper does; the export
        may carry another (`last2_avg`, the paper's reported numbers)."""
        return self.train_pooling

    @property
    def uses_adversarial(self):
        return self.mode == "joint" and "adversarial" in (self.view1_augmentation,
                                                          self.view2_augmentation)

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

    def views(self, features, training=True, delta=None, seeds=None):
        """The local (z1, z2): one encoder pass over the features stacked twice, view 1's
        augmentation on the first copy and view 2's on the second."""
        seed1, seed2 = self.step_seeds() if seeds is None else seeds
        mask = features["padding_mask"]
        both = concat_features([features, features])
        ids = [self.aug1.position_ids(mask, seed1), self.aug2.position_ids(mask, seed2)]
        position_ids = None
        if any(p is not None for p in ids):
            position_ids = tf.concat([identity_position_ids(mask) if p is None else p
                                      for p in ids], axis=0)

        def embedding_fn(x, padding_mask):
            x1, x2 = tf.split(x, 2, axis=0)
            m1, m2 = tf.split(padding_mask, 2, axis=0)
            return tf.concat([self.aug1.apply(x1, m1, seed1, delta),
                              self.aug2.apply(x2, m2, seed2, delta)], axis=0)

        z = self.embed(both, training, dropout=self.encoder_dropout,
                       embedding_fn=embedding_fn, position_ids=position_ids)
        z1, z2 = tf.split(tf.cast(z, tf.float32), 2, axis=0)
        return z1, z2

    def classifier_features(self, u, v):
        parts = [u, v, tf.abs(u - v)]
        if self.ce_max_feature:
            parts.append(tf.square(tf.maximum(u, v)))
        return tf.concat(parts, axis=-1)

    def nli_logits(self, z):
        """Pooled (2B, H) [premises; hypotheses] -> (B, 3) float32 logits."""
        u, v = tf.split(z, 2, axis=0)
        return tf.cast(self.classifier(self.classifier_features(u, v)), tf.float32)

    def supervised_pass(self, sentences, labels, valid, training=True, embedding_fn=None):
        """Un-augmented pass over [premises; hypotheses]; returns (per-pair CE, logits)."""
        z = self.embed(sentences, training, dropout=self.encoder_dropout,
                       embedding_fn=embedding_fn)
        logits = self.nli_logits(z)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        return ce, logits

    def adversarial_delta(self, sentences, labels, valid, training=True):
        """(per-pair CE, logits, delta): delta = FGV perturbation of the embedding output
        from the gradient of the local valid-masked mean CE."""
        captured = {}
        with tf.GradientTape() as tape:
            def capture(x, padding_mask):
                tape.watch(x)
                captured["x"] = x
                return x

            ce, logits = self.supervised_pass(sentences, labels, valid, training, capture)
            local = tf.reduce_sum(ce * valid) / tf.maximum(tf.reduce_sum(valid), 1.0)
        grad = tape.gradient(local, captured["x"])
        delta = fgv_perturbation(grad, sentences["padding_mask"], self.adversarial_epsilon)
        return ce, logits, delta

    # -- objective --------------------------------------------------------------------------
    def compute_losses(self, batch, training=True):
        if self.mode == "unsup":
            z1, z2 = self.views(batch, training)
            z1, z2 = gather_with_local_grad(z1, z2)  # the step's only collective
            con = masked_nt_xent(z1, z2, None, self.temperature, self.direction_reduction)
            return con, {"loss": con, "contrastive_loss": con}

        sentences = concat_features([batch["premise"], batch["hypothesis"]])
        valid = tf.cast(batch["valid"], tf.float32)
        labels = tf.cast(batch["label"], tf.int32)
        delta = None
        if self.uses_adversarial:
            ce, logits, delta = self.adversarial_delta(sentences, labels, valid, training)
        else:
            ce, logits = self.supervised_pass(sentences, labels, valid, training)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels),
                          tf.float32)
        con = None
        after = None
        if self.mode == "joint":
            z1, z2 = self.views(sentences, training, delta)
            valid2 = tf.concat([valid, valid], axis=0)[:, None]
            z1, z2, valid_all = gather_with_local_grad(z1, z2, valid2)
            con = masked_nt_xent(z1, z2, tf.stop_gradient(valid_all[:, 0]), self.temperature,
                                 self.direction_reduction)
            after = con
        g_ce, g_valid, g_correct = tf.unstack(global_sum(
            tf.stack([tf.reduce_sum(ce * valid), tf.reduce_sum(valid),
                      tf.reduce_sum(correct * valid)]), after=after))
        g_valid = tf.maximum(g_valid, 1.0)
        ce_share = tf.reduce_sum(ce * valid) / g_valid  # this replica's share of the mean
        ce_mean = g_ce / g_valid
        logs = {"ce_loss": ce_mean, "nli_accuracy": g_correct / g_valid}
        if con is None:
            objective = ce_share
            logs["loss"] = ce_mean
        else:
            objective = ce_share + self.alpha * con
            logs["loss"] = ce_mean + self.alpha * con
            logs["contrastive_loss"] = con
        return objective, logs

    def nli_accuracy(self, rows, batch_size=128, max_seq_length=None):
        """Accuracy (x100) of the CE head on (premise, hypothesis, label) rows, with the
        training pooling (the head was trained on it)."""
        import numpy as np

        from tfsent.data.pipelines import NLI_LABEL_IDS

        if self.classifier is None:
            raise ConfigError("nli_accuracy needs a supervised ConSERT mode (joint or sup)")
        enc = self.encoder
        u = enc.encode([r[0] for r in rows], batch_size, verbose=0, normalize=False,
                       pooling=self.train_pooling,
                       max_seq_length=max_seq_length)
        v = enc.encode([r[1] for r in rows], batch_size, verbose=0, normalize=False,
                       pooling=self.train_pooling,
                       max_seq_length=max_seq_length)
        logits = np.asarray(self.classifier(self.classifier_features(u, v)))
        labels = np.array([NLI_LABEL_IDS[r[2]] for r in rows])
        return 100.0 * float(np.mean(np.argmax(logits, axis=1) == labels))

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

def _builder(mode):
    def build(encoder, c):
        return ConSERT(encoder, mode=mode, view1_augmentation=c.view1_augmentation,
                       view2_augmentation=c.view2_augmentation,
                       token_cutoff_rate=c.token_cutoff_rate,
                       feature_cutoff_rate=c.feature_cutoff_rate,
                       aug_dropout_rate=c.aug_dropout_rate,
                       adversarial_epsilon=c.adversarial_epsilon, temperature=c.temperature,
                       direction_reduction=c.direction_reduction, alpha=c.consert_alpha,
                       ce_max_feature=c.ce_max_feature, encoder_dropout=c.encoder_dropout,
                       seed=c.seed, train_pooling=c.pooling,
                       export_pooling=c.export_pooling)
    return build


# CPU-demo defaults. lr 5e-6 instead of the paper's 5e-7: the paper runs thousands of
# steps from raw BERT; the demo runs 150 steps from minilm-l6, where 5e-7 moves the model
# by nothing measurable, and a SimCSE-like 3e-5 would undo its sentence-embedding training.
_COMMON = {
    "view1_augmentation": "feature_cutoff",
    "view2_augmentation": "shuffle",
    "token_cutoff_rate": 0.15,         # paper
    "feature_cutoff_rate": 0.2,        # paper
    "aug_dropout_rate": 0.2,           # paper
    "adversarial_epsilon": 1.0,        # FGV step (not given in the paper; our choice)
    "temperature": 0.1,
    "direction_reduction": "sum",      # reference code; "mean" = mean over 2B anchors
    "consert_alpha": 0.15,             # weight of L_con in joint mode
    "ce_max_feature": False,           # add max(u, v)^2 to the CE features
    "encoder_dropout": 0.0,            # ConSERT removes BERT's dropout
    "pooling": "mean",
    "batch_size": 32,
    "learning_rate": 5e-6,
    "warmup_ratio": 0.1,
}


def registry_entries():
    """MethodSpec kwargs (dicts) for consert (unsup), consert_joint and consert_sup.

    Joint / sup read NLI pairs (`nli_pairs`, premise-grouped batches with padding slots).
    Their demo lr is 2e-5 (SBERT's) instead of 5e-6: they train a fresh Dense(3) head in
    150 steps. Two-stage settings: run consert_sup or consert_joint, then
    `--method=consert --config.encoder=RUN1/encoder`.
    """
    supervised = dict(_COMMON, train_data="demo_nli", learning_rate=2e-5,
                      nli_eval_split="test")
    return [
        {"name": "consert", "build": _builder("unsup"), "defaults": dict(_COMMON),
         "data_kind": "sentences",
         "doc": "ConSERT unsupervised: augmented embedding views, NT-Xent (tau 0.1)."},
        {"name": "consert_joint", "build": _builder("joint"), "defaults": supervised,
         "data_kind": "nli_pairs",
         "doc": "ConSERT joint: NLI cross-entropy + alpha * NT-Xent over augmented views."},
        {"name": "consert_sup", "build": _builder("sup"), "defaults": dict(supervised),
         "data_kind": "nli_pairs",
         "doc": "ConSERT sup: NLI cross-entropy only (stage 1 of sup-unsup)."},
    ]


def registry_entry():
    """The unsupervised entry alone (like the other methods' registry_entry)."""
    return registry_entries()[0]
