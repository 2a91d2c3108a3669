"""Cross-encoder rerankers: one score per (query, passage) read jointly (docs/methods.md,
"Cross-encoder")."""

import os

import keras
import numpy as np
import tensorflow as tf
from absl import logging

import tfsent.encoders.families as families
from tfsent import checks, formats, losses
from tfsent.checks import Field
import tfsent.encoders.huggingface as huggingface
from tfsent.encoders.huggingface import read_classification_head
from tfsent.encoders.huggingface.tokenizer_files import appended_token
from tfsent.encoders.loading import load_encoder, own_settings
from tfsent.encoders.pooling import LAST_NON_PAD, pair_state
from tfsent.encoders.token_batches import tokenize_in_chunks
from tfsent.errors import ConfigError, InputError
from tfsent.formats.model_paths import check_bi_encoder
from tfsent.encoders import pair_prompts
from tfsent.methods.base import SentenceMethod
from tfsent.methods.distill import same_tokenizer
from tfsent.methods.replicas import global_mean
from tfsent.methods.spec import MethodSpec

LOSSES = ("listwise", "bce", "margin_mse")
LOSS = checks.Choices(LOSSES)
_LOSS_FNS = {"listwise": losses.listwise_cross_entropy,
             "bce": losses.pairwise_binary_cross_entropy}
# Score heads: the families' Hugging Face heads (families.CLASSIFICATION_HEADS), and
# "linear", a Dense(1) on the `cls` pooling (BERT: the pooler's output, so BERT's "pooler"
# head; the head of every cross-encoder saved before the heads followed the family's).
LINEAR_HEAD = "linear"
HEADS = (LINEAR_HEAD,) + tuple(families.CLASSIFICATION_HEADS)
# A checkpoint folder read as a reranker (`reranker_from_checkpoint`) cuts its pairs here
# unless told otherwise (the limit of the BERT-sized rerankers it is made for).
READ_MAX_SEQ_LENGTH = 512


def pair_pooling(encoder):
    """The token a cross-encoder on `encoder` scores: the first (`cls`) where attention is
    bidirectional, the last (`last_token`: the pair template's closing end-of-sequence
    token, the only one that sees the whole pair) where it is causal (qwen3; gemma3
    without use_bidirectional_attention)."""
    causal = families.TABLE[encoder.family].attention == "causal" or not getattr(
        encoder.backbone, "use_bidirectional_attention", True)
    return "last_token" if causal else "cls"


def pooling_for_encoder(name):
    """The pooling a cross_encoder run on the encoder `name` takes when none is given,
    read from its files before it loads: `last_token` on a causal family (qwen3; a
    Hugging Face folder of a family whose `bidirectional_flag` its config.json does not
    set: a gemma3 one without use_bidirectional_attention; a qwen3 keras-hub preset
    name), else `cls` (a gemma3 preset name too: `CrossEncoder` checks it once the model
    loads)."""
    family = own_settings(name).get("family")
    record = families.TABLE.get(family)
    if record is None:
        return "cls"
    if record.attention == "causal":
        return "last_token"
    config = os.path.join(os.fspath(name), "config.json")
    if record.bidirectional_flag and os.path.isfile(config):
        hf = huggingface.read_json(config)
        if isinstance(hf, dict) and "model_type" in hf and not hf.get(
                record.bidirectional_flag):
            return "last_token"
    return "cls"


def family_head(family):
    """The score head kind a `family` cross-encoder gets by default (its Hugging Face
    *ForSequenceClassification head, else "linear")."""
    record = families.TABLE[family].hf_sequence_classification if family else None
    return LINEAR_HEAD if record is None else record[1]


def build_score_head(kind, hidden_dim):
    """The inference-time score head of `kind` on the (B, H) state its token gives: a
    Dense(1) ("linear", "pooler"; "score" without bias), or a keras Sequential [Dense(H,
    activation), Dense(1)] named as the family's Hugging Face modules; built."""
    record = families.CLASSIFICATION_HEADS.get(kind)
    if record is None or record.inner is None:
        head = keras.layers.Dense(1, use_bias=record is None or record.bias, name="score_head")
    else:
        head = keras.Sequential(
            [keras.layers.Dense(hidden_dim, activation=record.inner_activation,
                                name=record.inner.replace(".", "_")),
             keras.layers.Dense(1, name=record.classifier.replace(".", "_"))],
            name="score_head")
    head.build((None, hidden_dim))
    return head


class _TeacherRef:
    """Holds a MarginMSE teacher outside Keras / TF tracking: it is neither trained,
    checkpointed nor saved with the student."""

    def __init__(self, teacher):
        self.model = teacher


def load_teacher(teacher, encoder, option="teacher"):
    """The MarginMSE teacher: a CrossEncoder, or the path of its `.keras` file, whose
    tokenizer turns text into the student's ids (it scores the student's pair features);
    None (or "") is no teacher. ConfigError / InputError naming `option` otherwise."""
    if teacher is None or isinstance(teacher, str) and not teacher:
        return None
    if isinstance(teacher, str):
        if not (teacher.endswith(".keras") and tf.io.gfile.exists(teacher)):
            raise InputError(f"{option}: no such .keras file (a saved CrossEncoder)",
                             path=teacher)
        teacher = keras.saving.load_model(teacher)
    if not isinstance(teacher, CrossEncoder):
        raise ConfigError(f"{option}: the MarginMSE teacher must be a CrossEncoder (or its "
                          f".keras file), got a {type(teacher).__name__}")
    if not same_tokenizer(encoder.tokenizer, teacher.encoder.tokenizer):
        raise ConfigError(f"{option}: the teacher's tokenizer ({teacher.encoder.family}, "
                          f"{teacher.encoder.tokenizer.vocabulary_size} ids) differs from "
                          f"the student's ({encoder.family}, "
                          f"{encoder.tokenizer.vocabulary_size} ids): the teacher scores "
                          "the student's own pair tokens, so both need one tokenizer")
    return teacher


class CrossEncoder(SentenceMethod):
    """The encoder on the joint pair input `[CLS] query [SEP] passage [SEP]` (the family's
    pair template, `tokenizers.tokenize_pairs`) -> first-token representation (`cls`
    pooling: through the pooler Dense(H, tanh) where the family has one; on a causal
    decoder, qwen3 or gemma3 without bidirectional attention, the last token's,
    `last_token` pooling: the template's closing end-of-sequence token) -> the family's
    Hugging Face sequence-classification head with one label (`head`,
    families.CLASSIFICATION_HEADS; docs/families.md): BERT dropout -> Dense(1); RoBERTa,
    XLM-R dropout -> Dense(H, tanh) -> dropout -> Dense(1); DistilBERT Dense(H, ReLU) ->
    dropout -> Dense(1); Qwen3 and Gemma3 Dense(1) without bias on the rightmost token
    that is not the pad token (`pooling.last_non_pad`: their *ForSequenceClassification's
    reading; Qwen3's pair template closes with `<|endoftext|>`, its pad token too, so the
    last text token; Gemma3's with `<eos>`).
    The relevance logit is its output.

    Batches (`cross_pairs` data: `pipelines.pair_dataset(..., joint=True)`) hold each
    query with its positive and its N negatives, `labels` (B, 1 + N) 1 on the positive.
    Losses (per query, mean over the global batch): "listwise", the cross-entropy of the
    softmax over the query's 1 + N scores with the positive as target; "bce", the binary
    cross-entropy of each pair's sigmoid score against its label; "margin_mse", the mean
    over the N negatives of the squared difference between the student's margin
    s(q, p) - s(q, n_j) and a teacher cross-encoder's on the same pair tokens.

    Args:
        encoder: a SentenceEncoder (with its tokenizer, for `score`).
        loss: one of LOSSES.
        teacher: loss "margin_mse": the teacher, a CrossEncoder or its `.keras` file, with
            the student's tokenizer (not tracked: never trained or saved with the student;
            a student loaded from a file has none until `teacher` is set). "": none.
        train_pooling, export_pooling: None, or the token the head reads (`pair_pooling`):
            "cls" (bidirectional attention), "last_token" (causal), "last_non_pad" (the
            "score" head's; the attention's own token is taken for it).
        seed: seed of the head's dropout stream.
        head: one of HEADS; None: the family's (`family_head`). "linear" is a Dense(1) on
            the `cls` pooling, the head of cross-encoders saved before the heads followed
            the family's (their .keras files load with it).
        prompt: None, or a prompted reranker's chat template (`pair_prompts.PROMPT_NAMES`:
            "qwen3_reranker", a Qwen3-Reranker checkpoint): the encoder's tokenizer builds
            the prompt around each pair, the head (a Dense(1) without bias, as an LM head)
            starts as the LM head's E[yes] - E[no], so the score is the model card's
            log P(yes) - log P(no).
        instruction: with `prompt`, the task description it holds (None: the prompt's
            web-search default).
    """

    metric_names = ("loss", "accuracy")
    input_kind = "cross_pairs"
    scores_pairs = True  # a pair scorer: its `encoder` may be a cross-encoder's folder
    duplicate_free_batches = False  # each query meets only its own passages
    # `python -m tfsent.train` selects its checkpoints by the reranked nDCG@10 of a
    # retriever's dev top N (tfsent.training.rerank_dev) and exports format cross_encoder.
    dev_selection = "reranked"

    def __init__(self, encoder, loss="listwise", train_pooling=None, export_pooling=None,
                 seed=None, teacher=None, head=None, prompt=None, instruction=None,
                 **kwargs):
        pooling = pair_pooling(encoder)
        self.prompt = prompt or None
        self.instruction = instruction or None
        self.head_kind = checks.Choices(HEADS).check(
            "head", LINEAR_HEAD if prompt and head is None
            else family_head(encoder.family) if head is None else head)
        if self.instruction and not self.prompt:
            raise ConfigError("instruction: only a prompted reranker (prompt=...) reads one")
        if not self.prompt and getattr(encoder.tokenizer, "pair_prompt", None) is not None:
            # an encoder a prompted reranker was built on: its family's template again
            encoder.tokenizer = encoder.tokenizer.with_options(pair_prompt=None)
        if self.prompt:
            if self.head_kind != LINEAR_HEAD:
                raise ConfigError(f"head={head!r}: a prompted reranker scores with the LM "
                                  "head's answer rows, a Dense(1) (head='linear')")
            encoder.tokenizer = encoder.tokenizer.with_options(
                pair_prompt=pair_prompts.pair_prompt_config(encoder.tokenizer, self.prompt,
                                                            self.instruction))
        record = families.CLASSIFICATION_HEADS.get(self.head_kind)
        accepted = (None, pooling)
        if record is not None and record.token == LAST_NON_PAD:
            own = family_head(encoder.family)
            if own != self.head_kind:
                owners = [f for f in families.TABLE if family_head(f) == self.head_kind]
                raise ConfigError(
                    f"head={self.head_kind!r} is the Hugging Face head of the "
                    f"{', '.join(owners)} families (on the last non-padding token); a "
                    f"cross-encoder on {encoder.family} takes head "
                    f"{' or '.join(dict.fromkeys((own, LINEAR_HEAD)))}")
            # the attention's own token (a run's pooling) names it too
            accepted = (None, pooling, LAST_NON_PAD)
            pooling = LAST_NON_PAD
        for name, value in (("pooling", train_pooling), ("export_pooling", export_pooling)):
            if value in accepted:
                continue
            own_token = accepted[1]  # the attention's: cls, or last_token (causal)
            if pooling == LAST_NON_PAD and own_token == "cls":
                raise ConfigError(f"{name}={value!r}: head {self.head_kind!r} reads the last "
                                  f"token that is not the pad token ({LAST_NON_PAD}); leave "
                                  f"{name} unset or cls")
            if own_token == "cls":
                raise ConfigError(f"{name}={value!r}: a cross-encoder on {encoder.family} "
                                  "(bidirectional attention) scores the first token's "
                                  "representation; use cls")
            raise ConfigError(
                f"{name}={value!r}: a cross-encoder on {encoder.family} with causal "
                "attention scores the last token (the first sees nothing of the pair: every "
                "pair would get one score); use last_token (--config.pooling=last_token)")
        super().__init__(encoder, pooling, pooling, **kwargs)
        self.loss_name = LOSS.check("loss", loss)
        self.seed = seed
        teacher = load_teacher(teacher, encoder)
        if teacher is not None and self.loss_name != "margin_mse":
            raise ConfigError(f"teacher: only loss='margin_mse' uses a teacher (loss="
                              f"{self.loss_name!r})")
        self._teacher = _TeacherRef(teacher)
        if record is not None and record.on_pooler and \
                not families.TABLE[encoder.family].has_pooler:
            raise ConfigError(f"head={self.head_kind!r} reads the pooler, which the "
                              f"{encoder.family} family has not; heads: {', '.join(HEADS)}")
        self.head_dropout = keras.layers.Dropout(encoder.default_dropout, seed=seed,
                                                 name="head_dropout")
        if self.prompt:  # the LM's answer (an LM head has no bias); a saved reranker's
            # weights replace it when they load
            self.score_head = keras.layers.Dense(1, use_bias=False, name="score_head")
            self.score_head.build((None, encoder.hidden_dim))
            self.score_head.kernel.assign(pair_prompts.answer_head_kernel(encoder,
                                                                         self.prompt))
        else:
            self.score_head = build_score_head(self.head_kind, encoder.hidden_dim)
        # score()'s traced functions by truncation length, outside Keras' tracking: one
        # trace per length, not one per call (a dev evaluation calls score chunk by chunk).
        object.__setattr__(self, "_score_functions", {})

    @property
    def teacher(self):
        """The MarginMSE teacher CrossEncoder (None: none set)."""
        return self._teacher.model

    @teacher.setter
    def teacher(self, teacher):
        self._teacher = _TeacherRef(load_teacher(teacher, self.encoder))

    def call(self, inputs, training=False):
        """(B,) float32 relevance logits of tokenized pair features."""
        x = pair_state(self.encoder, inputs, self.train_pooling, training)
        record = families.CLASSIFICATION_HEADS.get(self.head_kind)
        layers = getattr(self.score_head, "layers", [self.score_head])
        if record is None or record.dropout_first:
            x = self.head_dropout(x, training=training)
        for layer in layers[:-1]:  # Hugging Face's dropout after each hidden Dense
            x = self.head_dropout(layer(x), training=training)
        return tf.cast(layers[-1](x)[:, 0], tf.float32)

    def compute_losses(self, batch, training=True):
        labels = tf.cast(batch["labels"], tf.float32)
        scores = tf.reshape(self(batch["pairs"], training=training), tf.shape(labels))
        if self.loss_name == "margin_mse":
            if self.teacher is None:
                raise ConfigError("loss='margin_mse' needs the teacher cross-encoder "
                                  "(CrossEncoder(..., teacher=...) or model.teacher = ...)")
            target = tf.reshape(self.teacher(batch["pairs"], training=False), tf.shape(labels))
            per_query = losses.margin_mse(scores, tf.stop_gradient(target))
        else:
            per_query = _LOSS_FNS[self.loss_name](scores, labels)
        top_is_positive = tf.cast(tf.equal(tf.argmax(scores, axis=-1),
                                           tf.argmax(labels, axis=-1)), tf.float32)
        share, mean, accuracy = global_mean(tf.reduce_sum(per_query),
                                            tf.cast(tf.shape(per_query)[0], tf.float32),
                                            tf.reduce_sum(top_is_positive))
        return share, {"loss": mean, "accuracy": accuracy}

    def score(self, queries, passages, batch_size=64, max_seq_length=None):
        """Relevance logits (numpy (N,)) of (query, passage) string pairs, in input order.
        The pairs are tokenized first, then scored in batches formed by token count, most
        first (`tfsent.encoders.token_batches`), each padded to its own longest pair.
        `max_seq_length` (None: the tokenizer's) is clamped to the position table, as in
        `encode` and the export."""
        max_seq_length = self.encoder.clamp_length(max_seq_length)
        if len(queries) != len(passages):
            raise ConfigError(f"score: {len(queries)} queries but {len(passages)} passages")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if not len(queries):
            return np.zeros([0], np.float32)
        functions = self._score_functions.get(max_seq_length)
        if functions is None:
            tokenizer = self.encoder.tokenizer.with_options(max_seq_length=max_seq_length)
            functions = self._score_functions[max_seq_length] = _score_functions(
                self, tokenizer)
        tokenize_pairs, score_features = functions
        tokens = tokenize_in_chunks(tokenize_pairs, [list(queries), list(passages)],
                                    {"token_ids": self.encoder.tokenizer.pad_id})
        order = tokens.longest_first()
        out = np.zeros(len(tokens), np.float32)
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            out[idx] = score_features(tokens.batch(idx)).numpy()
        return out

    def export(self, filepath, format="cross_encoder", verbose=None, input_signature=None,
               **kwargs):
        """Writes the cross-encoder through the format registry: format "cross_encoder"
        (`tfsent.formats.cross_encoder`: a SavedModel version under `filepath` with a
        `score(queries, passages)` signature) or "cross_encoder_hf"
        (`tfsent.formats.cross_encoder_hf`: a Hugging Face sequence-classification folder
        for sentence-transformers' CrossEncoder); `kwargs` go to its writer
        (`max_seq_length`, `metadata`, `version`). Returns the path written."""
        entry = formats.get_format(format, "format")
        if not entry.scores_pairs:
            raise ConfigError(f"format={format!r}: a cross-encoder exports as "
                              "format='cross_encoder' or 'cross_encoder_hf' (it has no "
                              "sentence embeddings)")
        defaults = {"head": self.score_head,
                    "metadata": {"method": type(self).__name__, "loss": self.loss_name}}
        if "pooling" in entry.options():  # the token its head reads
            defaults["pooling"] = self.train_pooling
        return formats.keras_export(self.encoder, filepath, format, verbose,
                                    input_signature, defaults, kwargs)

    @property
    def export_head(self):
        """The score head: what the run keeps with the encoder in its best/ weights."""
        return self.score_head

    def read_hf_head(self, directory):
        """Sets the score head's weights from a Hugging Face *ForSequenceClassification
        checkpoint folder of the encoder's family with one label (one tfsent published, a
        reranker from the hub): the classifier, and the inner Dense where the head has
        one. Returns the modules read ([] for a folder without such a head: a base or MLM
        checkpoint, a tfsent folder, another label count; the head stays as initialised,
        logged)."""
        directory = os.fspath(directory)
        record = families.TABLE[self.encoder.family].classification_head
        # A prompted reranker's Dense(1) without bias takes a decoder's `score` (a
        # Qwen3-Reranker converted to Qwen3ForSequenceClassification: its prompt's last
        # token, never the pad token, is the one Hugging Face's head reads).
        answer_head = bool(self.prompt) and record is not None and record.inner is None \
            and not record.bias
        if record is None or (self.head_kind == LINEAR_HEAD and not answer_head) or \
                not os.path.isfile(
                os.path.join(directory, "config.json")) or not any(
                os.path.exists(os.path.join(directory, name))
                for name in ("model.safetensors", "model.safetensors.index.json")):
            return []
        found = read_classification_head(self.encoder.family, directory,
                                         self.encoder.hidden_dim)
        if found is None:
            return []
        labels = found["classifier"][0].shape[1]
        if labels != 1:
            logging.warning("%s: its classifier has %d labels; the cross-encoder scores "
                            "with one, so its head starts fresh", directory, labels)
            return []
        if self.train_pooling == LAST_NON_PAD:
            _check_decoder_classifier(directory, self.encoder.family,
                                      self.encoder.tokenizer.pad_id)
        layers = getattr(self.score_head, "layers", [self.score_head])
        read = [record.classifier]
        layers[-1].kernel.assign(found["classifier"][0])
        if layers[-1].bias is not None:
            layers[-1].bias.assign(found["classifier"][1])
        if len(layers) > 1 and found["inner"] is not None:
            layers[0].kernel.assign(found["inner"][0])
            layers[0].bias.assign(found["inner"][1])
            read.insert(0, record.inner)
        logging.info("cross-encoder head read from %s: %s", directory, ", ".join(read))
        return read

    def encode(self, *args, **kwargs):
        raise ConfigError("a cross-encoder has no sentence embeddings; use score(queries, "
                          "passages)")

    def get_config(self):
        config = super().get_config()
        config.update({"loss": self.loss_name, "seed": self.seed, "head": self.head_kind})
        if self.prompt:
            config.update({"prompt": self.prompt, "instruction": self.instruction})
        return config

    @classmethod
    def from_config(cls, config):
        # Files saved before the head followed the family's record none: a Dense(1) head.
        return super().from_config({"head": LINEAR_HEAD, **config})


def _check_decoder_classifier(directory, family, pad_id):
    """What a decoder sequence-classification folder read without a prompt must hold for
    tfsent to score its pairs as transformers does (`pooling.last_non_pad`), InputError
    otherwise: config.json's `pad_token_id` equal to the tokenizer's pad id (the token
    Hugging Face's head skips; without one it reads the last position and refuses
    batches), and for a Qwen tokenizer one that appends `<|endoftext|>` to each text (the
    pair template `a <|endoftext|> b <|endoftext|>` tfsent builds; a tokenizer appending
    nothing, a Qwen3-Reranker's or a base model's, joins the two texts directly; Gemma's
    loader checks its own template). A chat template, which sentence-transformers renders
    pairs with instead, is warned about."""
    path = os.path.join(directory, "config.json")
    config = huggingface.read_json(path)
    pad = config.get("pad_token_id") if isinstance(config, dict) else None
    if pad is None or int(pad) != int(pad_id):
        raise InputError(f"pad_token_id {pad} is not the tokenizer's pad token (id {pad_id}): "
                         "the sequence-classification head reads the last token that is "
                         "not the pad token, so they must agree", path=path)
    record = families.TABLE[family]
    if record.tokenizer_kind == "qwen_bpe" and appended_token(directory) is None:
        raise InputError(
            "tokenizer.json appends no token to a text, so Hugging Face joins a pair's texts "
            f"directly, where tfsent's {family} pair template puts {record.appended_token} "
            "after each: a Qwen3-Reranker converted to sequence classification is read with "
            f"its prompt (prompt={pair_prompts.PROMPT_NAMES[0]!r}, --rerank_prompt)",
            path=os.path.join(directory, "tokenizer.json"))
    settings_path = os.path.join(directory, "tokenizer_config.json")
    settings = huggingface.read_json(settings_path) if os.path.isfile(settings_path) else {}
    if (isinstance(settings, dict) and settings.get("chat_template")) or os.path.exists(
            os.path.join(directory, "chat_template.jinja")):
        logging.warning("%s has a chat template: tfsent scores a pair as transformers' "
                        "tokenizer(query, passage) builds it; sentence-transformers renders "
                        "pairs through the chat template instead", directory)


def _score_functions(model, tokenizer):
    """(tokenize_pairs, score): tf.functions strings (B,), (B,) -> the pair features, and
    features (B, L) -> (B,) logits."""
    # Made outside the graph: a SentencePiece tokenizer's config holds its model's bytes,
    # read in Python.
    tokenizer = tokenizer.with_options(pad_to_max_length=False)
    strings = tf.TensorSpec([None], tf.string)
    tokenize_pairs = tf.function(tokenizer.tokenize_pairs, input_signature=[strings] * 2)
    names = ["token_ids", "padding_mask"] + ["segment_ids"] * tokenizer.emits_segment_ids
    features = {name: tf.TensorSpec([None, None], tf.int32) for name in names}

    @tf.function(input_signature=[features])
    def score(features):
        return model(features, training=False)
    return tokenize_pairs, score


def _validate(config):
    if config.get("pooling", "cls") not in ("cls", "last_token"):
        raise ConfigError(f"pooling={config['pooling']!r}: the cross_encoder method scores "
                          "the first token's representation (cls), or the last token's on "
                          "a causal decoder (last_token)")
    if config.get("instruction") and not config.get("prompt"):
        raise ConfigError("instruction goes with prompt (a prompted reranker's template "
                          f"holds it; prompts: {', '.join(pair_prompts.PROMPT_NAMES)})")
    if config.get("prompt") and not config.get("retriever"):
        raise ConfigError(f"prompt={config['prompt']}: set retriever, the bi-encoder whose "
                          "dev top rerank_top the reranker reorders (the run's encoder is a "
                          "language model, not an embedding model)")
    check_bi_encoder(config.get("retriever"), "retriever",
                     hint=": the dev top N comes from a bi-encoder's search")
    if (config.get("loss") == "margin_mse") != bool(config.get("teacher")):
        raise ConfigError("loss=margin_mse and teacher go together: the teacher "
                          "CrossEncoder's .keras file gives the score margins")


def reranker_from_checkpoint(directory, prompt=None, instruction=None, max_seq_length=None,
                             option="--rerank"):
    """A CrossEncoder that scores as the Hugging Face checkpoint folder `directory` does,
    ready to rerank without training: a one-label *ForSequenceClassification reranker
    (its head read, `CrossEncoder.read_hf_head`: ms-marco-MiniLM and the like, or a
    `cross_encoder_hf` folder tfsent published), or a causal LM read through `prompt`
    (Qwen3-Reranker: `prompt="qwen3_reranker"`; a prompted folder tfsent published records
    its prompt and instruction, used when none is given). `max_seq_length`: the pair's
    token limit (clamped to the position table; None: the one a tfsent-published folder
    records, else READ_MAX_SEQ_LENGTH). ConfigError naming `option` for a folder with no
    score to give: a base or embedding checkpoint without a prompt."""
    directory = os.fspath(directory)
    published = formats.metadata.read_metadata(directory, required=False)
    max_seq_length = max_seq_length or published.get("max_seq_length") or READ_MAX_SEQ_LENGTH
    if published.get("prompt") and prompt in (None, published["prompt"]):
        prompt = published["prompt"]
        instruction = published.get("instruction") if instruction is None else instruction
    if prompt:
        pair_prompts.get_prompt(prompt, f"{option}_prompt")
    encoder = load_encoder(directory, pooling=pooling_for_encoder(directory),
                           max_seq_length=max_seq_length, pad_to_max_length=False)
    model = CrossEncoder(encoder, prompt=prompt, instruction=instruction)
    if model.read_hf_head(directory) or prompt:
        logging.info("%s: a %s reranker (%s), pairs cut at %d tokens", directory,
                     encoder.family, f"prompt {prompt}" if prompt else "its score head",
                     encoder.clamp_length(max_seq_length))
        return model
    config = huggingface.read_json(os.path.join(directory, "config.json"))
    architectures = (config.get("architectures") if isinstance(config, dict) else None) \
        or ["no architecture named"]
    hint = (f"; a reranker that answers through a prompt (Qwen3-Reranker) needs "
            f"{option}_prompt={pair_prompts.PROMPT_NAMES[0]}"
            if families.TABLE[encoder.family].attention == "causal" else "")
    raise ConfigError(f"{option}={directory}: a {encoder.family} checkpoint "
                      f"({architectures[0]}) without a one-label sequence-classification "
                      f"head, so it has no relevance score{hint}; to train one: python -m "
                      f"tfsent.train --method=cross_encoder --config.encoder={directory}")


def _build_for_run(config, load):
    """The run's CrossEncoder on `load(config.encoder)`, its head read from that folder
    when it is a *ForSequenceClassification checkpoint (`CrossEncoder.read_hf_head`)."""
    model = SPEC.build(load(config.encoder), config)
    if isinstance(config.encoder, str) and os.path.isdir(config.encoder):
        model.read_hf_head(config.encoder)
    return model


SPEC = MethodSpec(
    "cross_encoder", CrossEncoder, "cross_pairs",
    "Cross-encoder reranker: (query, passage) read jointly -> a relevance score; rows "
    "(query, positive, negative_1..N) from a mined-negatives file (python -m tfsent.mine); "
    "selected by the reranked dev nDCG@10 of a retriever's top rerank_top.",
    fields=[Field("loss", "listwise", LOSS, arg="loss",
                  doc="listwise: softmax cross-entropy over the positive and its negatives; "
                      "bce: binary cross-entropy per pair; margin_mse: the teacher's score "
                      "margins (needs teacher)"),
            Field("teacher", "", types=(str,), arg="teacher",
                  doc="loss=margin_mse: the teacher CrossEncoder's .keras file (the "
                      "student's tokenizer)"),
            Field("prompt", "", checks.Choices(("",) + pair_prompts.PROMPT_NAMES),
                  arg="prompt",
                  doc="a prompted reranker's chat template (qwen3_reranker: a "
                      "Qwen3-Reranker checkpoint; its head starts as the LM's yes - no "
                      "answer); \"\": the family's pair template"),
            Field("instruction", "", types=(str,), arg="instruction",
                  doc="with prompt: the task description in it (\"\": the prompt's "
                      "web-search default)"),
            Field("retriever", "", types=(str,),
                  doc="dev selection: the bi-encoder whose top rerank_top documents of each "
                      "dev query are reranked (\"\": the run's encoder); searched once per run"),
            Field("rerank_top", 20, checks.Range(1, integer=True),
                  doc="dev selection: documents per dev query reranked (selection by the "
                      "reranked nDCG@10 of eval_data=beir:DIR:dev)")],
    run_args={"seed": "seed"},
    run_defaults={"pooling": "cls", "learning_rate": 2e-5, "warmup_ratio": 0.1,
                  "first_eval_step": 0},
    validate=_validate, builder=_build_for_run, encoder_pooling=pooling_for_encoder)
