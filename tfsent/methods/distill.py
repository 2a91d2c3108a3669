"""Distillation (docs/methods.md, "distill"): a student encoder learns to reproduce a
teacher's sentence embeddings (MSE), optionally plus SimCSE's in-batch contrastive loss."""

import keras
import tensorflow as tf

from tfsent import checks, losses
from tfsent.checks import Field
from tfsent.methods.replicas import gather_with_local_grad, global_mean
from tfsent.encoders.families import TABLE
from tfsent.encoders.layer_drop import describe_encoder, keep_layers, parse_layers
from tfsent.encoders.model import resolve_dropout_rates
from tfsent.errors import ConfigError
from tfsent.matryoshka import FULL_DIM
from tfsent.methods.base import SentenceMethod, concat_features, encoder_dropout_field
from tfsent.methods.spec import MethodSpec

DISTILL_TARGET = checks.Choices(("auto", "normalized", "raw"))
# Tokenizer settings that do not change which ids a text becomes.
_LENGTH_SETTINGS = ("name", "max_seq_length", "pad_to_max_length", "trainable", "dtype",
                    "segment_ids")


def _tokenizer_identity(tokenizer):
    config = tokenizer.get_config()
    return type(tokenizer).__name__, {k: v for k, v in config.items()
                                      if k not in _LENGTH_SETTINGS}


def same_tokenizer(a, b):
    """True when tokenizers `a` and `b` turn text into the same ids (kind, vocabulary,
    merges / model and options; lengths and padding aside)."""
    return _tokenizer_identity(a) == _tokenizer_identity(b)


def check_same_tokenizer(student, teacher):
    """ConfigError unless the student's tokenizer turns text into the ids the teacher's does
    (same kind, vocabulary, merges / model and options): the targets are the teacher's
    embeddings of the `max_seq_length` tokens the student reads, and a layer-dropped
    student keeps the teacher's token embeddings."""
    if student.tokenizer is None or teacher.tokenizer is None:
        return
    if not same_tokenizer(student.tokenizer, teacher.tokenizer):
        raise ConfigError(
            f"distill: the student's tokenizer ({student.family}, "
            f"{type(student.tokenizer).__name__}, {student.tokenizer.vocabulary_size} ids) "
            f"differs from the teacher's ({teacher.family}, "
            f"{type(teacher.tokenizer).__name__}, {teacher.tokenizer.vocabulary_size} ids); "
            "distilling from raw text needs one tokenizer for both. Use a student cut from "
            "the teacher (--config.student_layers=0,2,4), or a student checkpoint of the "
            "teacher's family that ships the teacher's tokenizer files")


class _TeacherRef:
    """Holds the teacher outside Keras / TF tracking: it is neither trained, checkpointed,
    saved in `.keras` archives nor exported."""

    def __init__(self, teacher):
        self.encoder = teacher


class Distill(SentenceMethod):
    """A student reproduces a frozen teacher's embeddings.

    Batches are `{"features": student token features, "target": (B, D) teacher
    embeddings}` (`tfsent.data.pipelines.distill_dataset`; the CLI computes the targets
    once through the embedding cache). The loss is the mean over batch and dimensions of
    the squared difference between the student's embedding (its training pooling, then
    the projection when there is one, then L2 normalisation when `normalized`) and the
    target: sentence-transformers' MSELoss. With `contrastive_weight` w > 0 it adds w x
    SimCSE's unsupervised InfoNCE (two dropout views of each sentence, in-batch negatives
    over the global batch) on the student's embeddings.

    Args:
        encoder: the student SentenceEncoder (e.g. `layer_drop.keep_layers(teacher,
            (0, 2, 4))`, or any encoder with the teacher's tokenizer).
        teacher: the teacher SentenceEncoder (not tracked: never trained or saved); needed
            by `teacher_embeddings` and `fit` on raw sentences, not by pre-computed
            batches or a loaded model.
        teacher_dim: the targets' size (default: the teacher's, else the student's).
        normalized: the targets are L2-normalised and so is the student's embedding in
            the loss (default: as the teacher's `encode` is, e.g. True for minilm-l6).
        projection: a learned linear map from the student's size to `teacher_dim`,
            exported as the export head (the served vector is teacher-sized). Needed when
            the sizes differ (ConfigError otherwise); it starts as the identity when they
            are equal.
        contrastive_weight: w above (0: MSE only).
        temperature: tau of the InfoNCE.
        encoder_dropout: the student's dropout in training (None: its backbone's).
        train_pooling, export_pooling: see SentenceMethod.
    """

    input_kind = "distill_sentences"

    def __init__(self, encoder, teacher=None, teacher_dim=None, normalized=None,
                 projection=False, contrastive_weight=0.0, temperature=0.05,
                 encoder_dropout=None, train_pooling=None, export_pooling=None, **kwargs):
        weight = checks.NON_NEGATIVE.check("contrastive_weight", contrastive_weight)
        object.__setattr__(self, "metric_names",
                           ("loss", "mse", "cosine", "contrastive") if weight
                           else ("loss", "mse", "cosine"))
        super().__init__(encoder, train_pooling, export_pooling, **kwargs)
        if teacher is not None:
            check_same_tokenizer(encoder, teacher)
        self._teacher = _TeacherRef(teacher)
        self.contrastive_weight = weight
        self.temperature = checks.POSITIVE.check("temperature", temperature)
        resolve_dropout_rates(encoder_dropout, 0.0)  # ConfigError now, not at the first step
        self.encoder_dropout = encoder_dropout
        self.teacher_dim = int(teacher_dim or (teacher.hidden_dim if teacher is not None
                                               else encoder.hidden_dim))
        self.normalized = bool(teacher.normalize if normalized is None and teacher is not None
                               else normalized)
        self.use_projection = bool(projection)
        if self.teacher_dim != encoder.hidden_dim and not self.use_projection:
            raise ConfigError(
                f"distill: the student's embeddings have {encoder.hidden_dim} dimensions and "
                f"the teacher's {self.teacher_dim}; set student_projection=True (a learned "
                "linear map to the teacher's size, exported with the student) or choose a "
                "student of the teacher's size")
        self.projection = None
        if self.use_projection:
            square = self.teacher_dim == encoder.hidden_dim
            self.projection = keras.layers.Dense(
                self.teacher_dim, use_bias=False, name="distill_projection",
                kernel_initializer="identity" if square else "glorot_uniform")
            self.projection.build((None, encoder.hidden_dim))

    @property
    def teacher(self):
        """The teacher SentenceEncoder (None for a model loaded from a config or file)."""
        return self._teacher.encoder

    @property
    def export_head(self):
        return self.projection

    def teacher_embeddings(self, sentences, batch_size=128):
        """The targets of `sentences`: the teacher's embeddings (its own pooling,
        normalised when `normalized`) of the first `max_seq_length` tokens, the student's
        training truncation."""
        if self.teacher is None:
            raise ConfigError("Distill: raw sentences need the teacher's embeddings; build "
                              "the model with teacher=... (a SentenceEncoder), or fit on "
                              "batches {'features': ..., 'target': ...}")
        return self.teacher.encode(sentences, batch_size=batch_size, verbose=0,
                                   normalize=self.normalized, truncate_dim=FULL_DIM,
                                   max_seq_length=self.encoder.tokenizer.max_seq_length)

    def student_embeddings(self, features, training):
        """The student's embeddings in the teacher's space (projected when there is a
        projection; not normalised)."""
        views = 2 if self.contrastive_weight else 1  # (evaluation: two identical views)
        if views == 2:
            features = concat_features([features, features])
        z = self.embed(features, training, dropout=self.encoder_dropout)
        if self.projection is not None:
            z = self.projection(z)
        return tf.split(z, views, axis=0) if views == 2 else [z]

    def compute_losses(self, batch, training=True):
        views = self.student_embeddings(batch["features"], training)
        target = batch["target"]
        errors = losses.embedding_squared_errors(views[0], target, self.normalized)
        cosine = tf.reduce_sum(tf.math.l2_normalize(tf.cast(views[0], tf.float32), -1)
                               * tf.math.l2_normalize(tf.cast(target, tf.float32), -1))
        count = tf.cast(tf.shape(errors)[0], tf.float32)
        logs = {}
        extra = 0.0
        after = None
        if len(views) == 2:
            z1, z2 = gather_with_local_grad(*views)
            extra = losses.info_nce(z1, z2, temperature=self.temperature)
            logs["contrastive"] = extra
            after = z1
        share, mse, mean_cosine = global_mean(tf.reduce_sum(errors), count, cosine,
                                              after=after)
        logs.update({"loss": mse + self.contrastive_weight * extra, "mse": mse,
                     "cosine": mean_cosine})
        return share + self.contrastive_weight * extra, logs

    def get_config(self):
        config = super().get_config()
        config.update({"teacher_dim": self.teacher_dim, "normalized": self.normalized,
                       "projection": self.use_projection,
                       "contrastive_weight": self.contrastive_weight,
                       "temperature": self.temperature,
                       "encoder_dropout": self.encoder_dropout})
        return config


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------

def teacher_name(config):
    """The teacher of a run: `teacher`, or `encoder` when it is empty."""
    return config.teacher or config.encoder


def _check_student_layers(name, value):
    if value:
        parse_layers(value, field=name)


def validate_config(config):
    """Checks that need the teacher's and the student's sizes, read from their files
    before any model is loaded (`layer_drop.describe_encoder`; a keras-hub preset name is
    checked when it loads): student_layers within the layers of `encoder`, equal sizes or
    student_projection, tokenizers of the same kind."""
    teacher = describe_encoder(teacher_name(config))
    student = teacher if config.encoder == teacher_name(config) else \
        describe_encoder(config.encoder)
    if config.student_layers:
        parse_layers(config.student_layers, student and student["num_layers"])
    if teacher is None or student is None:
        return
    kinds = [TABLE[d["family"]].tokenizer_kind for d in (student, teacher)]
    if kinds[0] != kinds[1]:
        raise ConfigError(
            f"distill: encoder={config.encoder!r} ({student['family']}, {kinds[0]} "
            f"tokenizer) does not tokenize like teacher={teacher_name(config)!r} "
            f"({teacher['family']}, {kinds[1]}); distilling from raw text needs one "
            "tokenizer for both. Use a student cut from the teacher (leave encoder unset or "
            "equal to the teacher and set student_layers=0,2,4), or a student checkpoint of "
            "the teacher's family with the teacher's tokenizer files")
    if student["hidden_dim"] != teacher["hidden_dim"] and not config.student_projection:
        raise ConfigError(
            f"distill: encoder={config.encoder!r} has {student['hidden_dim']} dimensions and "
            f"teacher={teacher_name(config)!r} {teacher['hidden_dim']}; set "
            "student_projection=True (a learned linear map to the teacher's size, exported "
            "with the student) or choose a student of the teacher's size")


def build_for_run(config, load):
    """The Distill model of a run: the teacher (its own pooling and normalisation), the
    student (`encoder`, or the `student_layers` of it; the run's pooling)."""
    name = teacher_name(config)
    teacher = load(name, pooling=None)
    base = teacher if config.encoder == name and config.student_layers else \
        load(config.encoder)
    student = keep_layers(base, parse_layers(config.student_layers)) \
        if config.student_layers else base
    student.pooling = config.pooling
    normalized = {"auto": None, "normalized": True, "raw": False}[config.distill_target]
    return Distill(student, teacher=teacher, normalized=normalized,
                   projection=config.student_projection,
                   contrastive_weight=config.contrastive_weight,
                   temperature=config.temperature, encoder_dropout=config.encoder_dropout,
                   train_pooling=config.pooling, export_pooling=config.export_pooling)


SPEC = MethodSpec(
    "distill", Distill, "distill_sentences",
    "Distillation: a student (any encoder, or the teacher's student_layers) learns the "
    "teacher's embeddings (MSE, cached targets), optionally + in-batch InfoNCE.",
    fields=[
        Field("teacher", "", types=(str,),
              doc="teacher encoder, any form `encoder` takes (\"\": = encoder)"),
        Field("student_layers", "", _check_student_layers, types=(str,),
              doc="keep these transformer layers of `encoder`, e.g. 0,2,4 (\"\": all)"),
        Field("student_projection", False, arg="projection",
              doc="a learned linear map to the teacher's size (exported with the student)"),
        Field("distill_target", "auto", DISTILL_TARGET,
              doc="auto (as the teacher's encode) | normalized | raw teacher embeddings"),
        Field("contrastive_weight", 0.0, checks.NON_NEGATIVE, arg="contrastive_weight",
              doc="weight of SimCSE's in-batch InfoNCE on the sentences (0: MSE only)"),
        Field("temperature", 0.05, checks.POSITIVE, arg="temperature",
              doc="tau of the InfoNCE"),
        encoder_dropout_field(None),
        Field("cache_dir", "", types=(str,),
              doc="teacher-embedding cache (\"\": beside the run directory)"),
    ],
    # CPU demo: a 3-layer student cut from minilm-l6 (layers 0, 3, 5: the first, the middle
    # and the last, whose output space the teacher's embeddings live in; measured starts in
    # docs/methods.md "distill") trained on the cached minilm-l6 embeddings of the demo
    # sentences.
    run_defaults={"student_layers": "0,3,5", "learning_rate": 2e-4, "steps": 200,
                  "eval_every": 50, "batch_size": 32, "warmup_ratio": 0.1},
    validate=validate_config, builder=build_for_run)
