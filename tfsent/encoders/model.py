"""`SentenceEncoder`: a keras-hub backbone's weights run by our own transformer forward.

The forward exists (rather than calling the backbone) so that callers can
  - get every layer's hidden states (poolers such as `last2_avg` need them),
  - choose the dropout rate of each dropout site per call (SCD trains two views with
    different rates; keras-hub's layers fix the rate at construction),
  - transform the embedding-layer output and the position ids (ConSERT's augmentations).
With all rates at the backbone's own value the forward equals keras-hub's (tested).

One forward serves every family (bert, roberta, xlm-roberta, distilbert: all post-LayerNorm
encoders); what differs is read through `keras_hub_adapter.embedding_parts`: BERT adds
token-type embeddings, the others have no token-type input (`segment_ids` is ignored);
only BERT has a pooler. Position ids are 0-based token positions for every family:
RoBERTa / XLM-R checkpoints number them from padding_idx + 1, and their tables lose those
leading rows when loaded (as keras-hub's converters do), so position p reads the row
Hugging Face reads for p + padding_idx + 1.
"""

import math

import keras
import numpy as np
import tensorflow as tf

import tfsent.encoders.encoder_dir as encoder_dir
import tfsent.encoders.families as families
import tfsent.encoders.keras_hub_adapter as kh
from tfsent.encoders.buckets import call_in_buckets
from tfsent.encoders.pooling import LAYERWISE_POOLINGS, check_pooling, pool
from tfsent.encoders.token_batches import tokenize_in_chunks
from tfsent import cpu_settings
from tfsent.errors import ConfigError, InputError
from tfsent.matryoshka import resolve_truncate_dim

DROPOUT_SITES = ("embeddings", "attention_probs", "attention_output", "ffn_output")


def in_xla_compilation():
    """True while tracing a function XLA compiles (`jit_compile=True`, or inside one)."""
    try:
        from tensorflow.python.ops import control_flow_util
        in_xla = control_flow_util.GraphOrParentsInXlaContext
    except (ImportError, AttributeError):  # a TF without this private helper: Keras's dropout
        return False
    return in_xla(tf.compat.v1.get_default_graph())


def threefry_dropout(x, rate, seed):
    """Inverted dropout as `keras.random.dropout` computes it (keep where a uniform
    [0, 1) draw >= rate, scale kept values by 1 / (1 - rate)), with the uniforms made by
    the Threefry-2x32 generator (float32 whatever x's dtype) instead of TF's default
    Philox. For XLA only (TF's own CPU kernels have no Threefry): XLA:CPU runs its Philox
    (64-bit products of 32-bit words) 5.3x slower than its Threefry (32-bit adds,
    rotations and xors): the 19 masks of a minilm SimCSE step took 47.6 ms instead of
    253.9 on machine C (docs/methods.md, "Dropout masks under XLA"). Call it only while XLA
    compiles: a plain `tf.function` first traced inside a jit-compiled one and then called
    on its own reuses that trace, which TF's kernels cannot run."""
    if not in_xla_compilation():
        raise ValueError("threefry_dropout runs only inside an XLA-compiled function "
                         "(tf.function(jit_compile=True)); TF's own kernels have no Threefry: "
                         "use keras.random.dropout elsewhere")
    seed = tf.cast(seed, tf.int32)
    uniform = tf.random.stateless_uniform(tf.shape(x), seed, dtype=tf.float32,
                                          alg="threefry")
    kept = tf.cast(uniform >= rate, x.dtype)
    return x * tf.cast(1.0 / (1.0 - rate), x.dtype) * kept


def _gelu_exact(x):
    return keras.activations.gelu(x, approximate=False)


def _gelu_approx(x):
    return keras.activations.gelu(x, approximate=True)


_ACTIVATIONS = {"gelu": _gelu_exact, "gelu_new": _gelu_approx, "gelu_approximate": _gelu_approx,
                "relu": keras.activations.relu,
                "silu": keras.activations.silu}  # qwen3: inside keras-hub's own blocks


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
    """A transformer encoder backbone (BERT, RoBERTa, XLM-R, DistilBERT) plus a named
    pooler, with a tokenizer for raw strings.

    Call it on `{"token_ids", "padding_mask"[, "segment_ids"]}` (int32, (B, L)); it returns
    a dict with
    `embedding` (B, H) and, with `output_hidden_states=True`, `hidden_states` (a list of
    num_layers + 1 tensors (B, L, H), the embedding output first).

    Extra call arguments (all optional):
        dropout: None, a float, or a dict site -> rate over DROPOUT_SITES, used when
            `training=True` (SCD's per-view rates; 0.0 switches dropout off, as ConSERT does).
        embedding_fn: `fn(x, padding_mask) -> x` applied to the embedding-layer output
            (after its LayerNorm and dropout), e.g. ConSERT's augmentations.
        position_ids: (B, L) int32 position ids replacing 0..L-1 (ConSERT's shuffle); 0 is
            the first token's position in every family (see the module docstring).
        pooling: override the encoder's pooling for this call.

    Pooling `cls` is the pooler Dense(H, tanh) on the first token's state for BERT; the
    other families have no pooler (keras-hub's RoBERTa, XLM-R and DistilBERT backbones have
    none), so there `cls` is the first token's (<s> / [CLS]) last hidden state, the same as
    `cls_before_pooler`.

    Args:
        backbone: a keras-hub `BertBackbone`, `RobertaBackbone`, `XLMRobertaBackbone` or
            `DistilBertBackbone`.
        tokenizer: the family's in-graph tokenizer (`tfsent.encoders.tokenizers`; may be
            None for id-only use).
        pooling: one of POOLINGS.
        activation: the feed-forward activation of the checkpoint ("gelu" = exact, as in
            Hugging Face checkpoints; keras-hub's own BERT presets use "gelu_approximate").
        seed: seed of the dropout random stream.
        normalize: `encode` L2-normalises by default (a sentence-transformers model with a
            Normalize module); the forward itself never normalises.
        mlm_head: the checkpoint's MLM head weights (numpy dict, `huggingface.read_mlm_head`)
            or None; CMLM-CSE starts its prediction head from them.
        dense_head: a `dense_head.DenseHead` run on the pooled vector (a
            sentence-transformers folder's Dense modules: EmbeddingGemma's), trained with
            the encoder; None: none. Families that run keras-hub's forward only.
        truncate_dim: the number of leading dimensions `encode` returns by default (a
            Matryoshka model's own size: a sentence-transformers folder's `truncate_dim`);
            None: all. Only `encode` and the exports cut; the forward and training use the
            whole embedding. Kept by the encoder directory and the exports
            (docs/export.md, "A model's own truncate_dim").
        prompts: the model's own {"query_prompt", "document_prompt"} (a
            sentence-transformers folder's `prompts`), what training, `encode_query` and
            the exports use when not told otherwise; None: none.
    """

    def __init__(self, backbone, tokenizer=None, pooling="mean", activation="gelu", seed=None,
                 normalize=False, mlm_head=None, dense_head=None, truncate_dim=None,
                 prompts=None, **kwargs):
        super().__init__(**kwargs)
        family = families.family_of(backbone)
        if family is None:
            raise ConfigError(f"unsupported backbone {type(backbone).__name__}; supported: "
                              f"{', '.join(families.backbone_class_names())}")
        self.family = family
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
        self.num_heads = getattr(backbone, "num_heads", None) or backbone.num_query_heads
        self.default_dropout = float(backbone.dropout)
        self.normalize = bool(normalize)
        self._encode_cache = _FunctionCache()
        self._encode_cache.mlm_head = mlm_head
        if dense_head is not None and families.TABLE[family].runs_own_forward:
            raise ConfigError(f"a Dense head after pooling is not supported for the {family} "
                              "family")
        self.dense_head = dense_head
        self.prompts = dict(prompts) if prompts else None
        # its own size (None: all); `resolve_truncate_dim` checks it against the width
        self.truncate_dim = resolve_truncate_dim(truncate_dim, None, self.hidden_dim)
        self.built = True  # the backbone owns every variable and is built already

    @property
    def pooler_dense(self):
        """BERT's pooler Dense(H, tanh), used by `cls` pooling; None for families without
        a pooler."""
        return kh.pooler_dense(self.backbone)

    @property
    def mlm_head(self):
        """The checkpoint's MLM head weights (numpy dict) or None."""
        return self._encode_cache.mlm_head

    @property
    def token_embedding_matrix(self):
        """The (V, H) token embedding variable (tied MLM output projections use it)."""
        return kh.token_embedding(self.backbone).embeddings

    # -- forward ------------------------------------------------------------------------
    def _dropout(self, x, rate, training):
        if not training or rate == 0.0:
            return x
        if in_xla_compilation():
            return threefry_dropout(x, rate, self.seed_generator.next())
        return keras.random.dropout(x, rate, seed=self.seed_generator)

    def embed(self, token_ids, segment_ids=None, position_ids=None, training=False,
              rates=None):
        """The embedding layer: token + position (+ segment for BERT), LayerNorm, dropout.
        `segment_ids` is ignored by families without token types."""
        emb = kh.embedding_parts(self.backbone)
        rates = rates or resolve_dropout_rates(None, self.default_dropout)
        tokens = emb.token(token_ids)
        if position_ids is None:
            positions = emb.position(tokens)
        else:
            table = tf.convert_to_tensor(emb.position.position_embeddings)
            positions = tf.cast(tf.gather(table, position_ids), tokens.dtype)
        if emb.segment is not None:
            if segment_ids is None:
                segment_ids = tf.zeros_like(token_ids)
            x = emb.add((tokens, positions, emb.segment(segment_ids)))
        else:
            x = tokens + positions
        x = emb.norm(x)
        return self._dropout(x, rates["embeddings"], training)

    def transformer_block(self, index, x, attention_bias, training=False, rates=None):
        """Transformer layer `index` (post-LayerNorm block, every family) with per-site
        dropout."""
        rates = rates or resolve_dropout_rates(None, self.default_dropout)
        parts = kh.transformer_block_parts(self.backbone.transformer_layers[index])
        query = parts.query(x)  # (B, L, heads, head_dim)
        key = parts.key(x)
        value = parts.value(x)
        head_dim = query.shape[-1]
        query = query * tf.cast(1.0 / math.sqrt(head_dim), query.dtype)
        scores = tf.einsum("bqhd,bkhd->bhqk", query, key)
        scores = tf.cast(scores, tf.float32) + attention_bias
        probs = tf.cast(tf.nn.softmax(scores, axis=-1), x.dtype)
        probs = self._dropout(probs, rates["attention_probs"], training)
        context = tf.einsum("bhqk,bkhd->bqhd", probs, value)
        attn_out = parts.attention_output(context)
        attn_out = self._dropout(attn_out, rates["attention_output"], training)
        x = parts.attention_norm(x + attn_out)
        inner = parts.ffn_inner
        hidden = tf.matmul(x, tf.cast(inner.kernel, x.dtype)) + tf.cast(inner.bias, x.dtype)
        hidden = self._act(hidden)
        ffn = parts.ffn_output(hidden)
        ffn = self._dropout(ffn, rates["ffn_output"], training)
        return parts.ffn_norm(x + ffn)

    @staticmethod
    def attention_bias(padding_mask):
        """(B, L) mask -> additive (B, 1, 1, L) float32 bias: 0 for real tokens, -1e9 for
        padding."""
        mask = tf.cast(padding_mask, tf.float32)
        # expand_dims, not [:, None, None, :]: TFLite has no builtin kernel for a strided
        # slice adding axes to a dynamic shape (tfsent.formats.litert converts this).
        return tf.expand_dims(tf.expand_dims(1.0 - mask, 1), 1) * -1e9

    def require_own_forward(self, what):
        """ConfigError unless tfsent runs this family's forward itself (`what` needs its
        layers one by one: a student cut from it, CMLM-CSE's extractor)."""
        if not families.TABLE[self.family].runs_own_forward:
            raise ConfigError(f"{what} needs tfsent's own transformer forward, which the "
                              f"{self.family} family does not run (docs/methods.md, "
                              "\"Decoder families\")")

    def _call_backbone(self, inputs, training, dropout, embedding_fn, position_ids, pooling,
                       output_hidden_states, num_layers):
        """The forward of a family tfsent does not run itself (`Family.runs_own_forward`):
        keras-hub's backbone, its final sequence output pooled."""
        asked = [name for name, value in (
            ("dropout", dropout), ("embedding_fn", embedding_fn),
            ("position_ids", position_ids), ("output_hidden_states", output_hidden_states),
            ("num_layers", num_layers)) if value is not None and value is not False]
        if pooling in LAYERWISE_POOLINGS:
            asked.append(f"pooling={pooling}")
        if asked:
            raise ConfigError(f"the {self.family} encoder runs keras-hub's forward, which "
                              f"does not support {', '.join(asked)} (docs/methods.md, "
                              f"\"Decoder families\")")
        x = self.backbone({"token_ids": inputs["token_ids"],
                           "padding_mask": inputs["padding_mask"]}, training=training)
        embedding = pool(pooling, [x], inputs["padding_mask"], None)
        if self.dense_head is not None:
            embedding = self.dense_head(embedding)
        return {"sequence_output": x, "embedding": embedding}

    def call(self, inputs, training=False, dropout=None, embedding_fn=None, position_ids=None,
             pooling=None, output_hidden_states=False, num_layers=None):
        if not families.TABLE[self.family].runs_own_forward:
            pooling = self.pooling if pooling is None else check_pooling(pooling)
            return self._call_backbone(inputs, training, dropout, embedding_fn, position_ids,
                                       pooling, output_hidden_states, num_layers)
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
                                        self.pooler_dense)
        if output_hidden_states:
            outputs["hidden_states"] = hidden_states
        return outputs

    # -- strings in -----------------------------------------------------------------------
    def tokenize(self, sentences):
        """Strings -> token ids / padding mask (the encoder's tokenizer)."""
        if self.tokenizer is None:
            raise ConfigError("this SentenceEncoder has no tokenizer")
        return self.tokenizer(sentences)

    def encode(self, sentences, batch_size=64, normalize=None, verbose="auto",
               pooling=None, max_seq_length=None, jit_compile=None, truncate_dim=None):
        """Embeds a list of strings; returns a float32 array (N, H) in input order,
        L2-normalised when `normalize` (default: the encoder's `normalize`).
        `truncate_dim` keeps the first D dimensions, before normalisation (Matryoshka
        embeddings); the array is then (N, D). None (default): the encoder's own
        `truncate_dim` (None: all H); 0 (`matryoshka.FULL_DIM`) or H: all H, whatever the
        encoder's own.

        `max_seq_length` overrides the tokenizer's truncation length (e.g. to evaluate a
        model trained on short sequences at full length). `jit_compile=True` runs the
        encoder under XLA, batches padded to bucketed shapes (`WIDTH_BUCKETS`): faster per
        sentence once each shape is compiled (a few seconds each), so worth it for large
        corpora. None (default): the choice measured for this CPU (`tfsent.cpu_settings`).

        All sentences are tokenized first (`tokenize_all`), then batched by token count,
        most tokens first, each batch padded to its own longest sentence: on 2,000 wiki
        sentences this pads 24% fewer token slots than batching by character count
        (sentence-transformers' order; benchmarks/README.md, "Machine C, 2026-11-28").
        A progress bar is shown for more than 4 batches (`verbose=0` silences it). An
        empty list gives an array of shape (0, H).
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
        truncate_dim = resolve_truncate_dim(truncate_dim, self.truncate_dim, dim)
        if not sentences:
            return np.zeros((0, truncate_dim or dim), np.float32)
        if jit_compile is None:
            jit_compile = cpu_settings.jit_encode()
        fn = self.encode_ids_function(pooling, max_seq_length, jit_compile)  # checks pooling
        tokens = self.tokenize_all(sentences, max_seq_length)
        order = tokens.longest_first()
        out = np.zeros((len(sentences), dim), np.float32)
        n_batches = (len(sentences) + batch_size - 1) // batch_size
        show = verbose == 1 or (verbose == "auto" and n_batches > 4)
        bar = keras.utils.Progbar(len(sentences), unit_name="sentence") if show else None
        for start in range(0, len(sentences), batch_size):
            idx = order[start:start + batch_size]
            features = tokens.batch(idx)
            out[idx] = fn(features["token_ids"], features["padding_mask"]).numpy()
            if bar is not None:
                bar.add(len(idx))
        if truncate_dim is not None:
            out = np.ascontiguousarray(out[:, :truncate_dim])
        if self.normalize if normalize is None else normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None,
               **kwargs):
        """Writes this encoder (with its `pooling`) as `format` through the registry
        `tfsent.formats.FORMATS` (tf_saved_model, onnx, litert, sentence_transformers,
        ...); returns the path written. The writing is `tfsent.formats.keras_export`,
        reached through the exporter hook (`set_exporter`). Keras' `Model.export`
        signature, with the differences `SentenceMethod.export` lists (tf_saved_model:
        `filepath` holds TF Serving's versions; `input_signature` must be None; `kwargs`
        go to the writer)."""
        if _EXPORTER[0] is None:
            raise RuntimeError("no exporter installed: import tfsent.formats (`import "
                               "tfsent` does) before SentenceEncoder.export")
        return _EXPORTER[0](self, filepath, format, verbose, input_signature,
                            {"pooling": self.pooling}, kwargs)

    def clamp_length(self, max_seq_length=None):
        """A truncation length the position embeddings cover (default: the tokenizer's)."""
        length = max_seq_length or self.tokenizer.max_seq_length
        limit = getattr(self.backbone, "max_sequence_length", None)  # None: rotary positions
        return int(length) if limit is None else min(int(length), int(limit))

    def _encode_key(self, pooling, max_seq_length, jit_compile):
        """(pooling checked, length clamped, jit_compile as bool)."""
        pooling = self.pooling if pooling is None else check_pooling(pooling)
        return pooling, self.clamp_length(max_seq_length), bool(jit_compile)

    def _forward_function(self, pooling, max_seq_length, jit_compile):
        """(token_ids, padding_mask) -> float32 embeddings (B, H), traced in the caller's
        tf.function; under XLA each batch is padded to its bucket (`call_in_buckets`) and
        runs one XLA function per (pooling, length), shared by `encode` and
        `encode_function` (one compilation per bucket shape for both)."""

        def forward(token_ids, padding_mask):
            features = {"token_ids": token_ids, "padding_mask": padding_mask}
            emb = self(features, training=False, pooling=pooling)["embedding"]
            return {"embedding": tf.cast(emb, tf.float32)}

        if not jit_compile:
            return lambda token_ids, padding_mask: forward(token_ids, padding_mask)["embedding"]
        key = ("xla_forward", pooling, max_seq_length)
        if key not in self._encode_cache.functions:
            self._encode_cache.functions[key] = tf.function(forward, jit_compile=True)
        xla_forward = self._encode_cache.functions[key]

        def bucketed(token_ids, padding_mask):
            features = {"token_ids": token_ids, "padding_mask": padding_mask}
            return call_in_buckets(xla_forward, features, max_seq_length)["embedding"]

        return bucketed

    def encode_ids_function(self, pooling=None, max_seq_length=None, jit_compile=False):
        """The traced function `encode` runs on each batch: a `tf.function` from int32
        `token_ids` and `padding_mask` (B, L), padded on the right as the tokenizer pads,
        to float32 embeddings (B, H); not normalised, not cut to `truncate_dim`. Cached per
        (pooling, length, jit_compile); arguments as in `encode_function`."""
        key = ("ids",) + self._encode_key(pooling, max_seq_length, jit_compile)
        if key not in self._encode_cache.functions:
            forward = self._forward_function(*key[1:])
            spec = tf.TensorSpec([None, None], tf.int32)
            self._encode_cache.functions[key] = tf.function(
                forward, input_signature=[spec, spec], reduce_retracing=True)
        return self._encode_cache.functions[key]

    def encode_function(self, pooling=None, max_seq_length=None, jit_compile=False):
        """Strings in, embeddings out, in one traced call: a `tf.function` from a 1-D string
        tensor to float32 embeddings (N, H), the in-graph tokenizer included; not
        normalised, not cut to `truncate_dim`. For a user's own graph code (e.g. a
        `tf.data` map); `encode` itself tokenizes first (`tokenize_all`) and runs
        `encode_ids_function` on batches formed by token count. Cached per (pooling,
        length, jit_compile). `pooling` and `max_seq_length` as in `encode`; `jit_compile`
        is False unless given (not the machine's choice)."""
        key = ("strings",) + self._encode_key(pooling, max_seq_length, jit_compile)
        if key not in self._encode_cache.functions:
            tokenizer = self.tokenizer.with_options(max_seq_length=key[2],
                                                    pad_to_max_length=False)
            forward = self._forward_function(*key[1:])

            @tf.function(input_signature=[tf.TensorSpec([None], tf.string)],
                         reduce_retracing=True)
            def encode_fn(strings):
                features = tokenizer(strings)
                return forward(features["token_ids"], features["padding_mask"])

            self._encode_cache.functions[key] = encode_fn
        return self._encode_cache.functions[key]

    def tokenize_all(self, sentences, max_seq_length=None, keep_ids=True):
        """Every string of `sentences` through the in-graph tokenizer (truncated to
        `max_seq_length`, clamped as in `encode`), `token_batches.TOKENIZE_CHUNK` strings
        per call: a `token_batches.TokenizedTexts` of their token ids, unpadded
        (`keep_ids=False`: their token counts alone, `.lengths`)."""
        max_seq_length = self.clamp_length(max_seq_length)
        key = ("tokenize", max_seq_length)
        if key not in self._encode_cache.functions:
            tokenizer = self.tokenizer.with_options(max_seq_length=max_seq_length,
                                                    pad_to_max_length=False)
            self._encode_cache.functions[key] = tf.function(
                tokenizer.__call__, input_signature=[tf.TensorSpec([None], tf.string)])
        return tokenize_in_chunks(self._encode_cache.functions[key], [sentences],
                                  {"token_ids": self.tokenizer.pad_id},
                                  keep=["token_ids"] if keep_ids else [])

    # -- persistence ----------------------------------------------------------------------
    def save_encoder_dir(self, directory):
        """Writes a tfsent encoder directory that `load_encoder(directory)` reads back
        (format (c)); atomic: written beside `directory` and renamed into place.
        (`keras.Model.save` keeps its Keras meaning: a `.keras` archive.)"""
        encoder_dir.save_encoder_dir(self, directory)

    _SEED_KEY = "dropout_seed_state"

    def save_own_variables(self, store):
        """Also saves the dropout stream's position, so a model loaded from a `.keras`
        archive continues training with the same dropout masks as the original."""
        super().save_own_variables(store)
        store[self._SEED_KEY] = keras.ops.convert_to_numpy(self.seed_generator.state)

    def load_own_variables(self, store):
        """Restores what `save_own_variables` wrote."""
        keys = list(store.keys())
        if self._SEED_KEY in keys:
            self.seed_generator.state.assign(store[self._SEED_KEY])
        super().load_own_variables({k: store[k] for k in keys if k != self._SEED_KEY})

    def get_config(self):
        return {"backbone": keras.saving.serialize_keras_object(self.backbone),
                "tokenizer": (None if self.tokenizer is None
                              else keras.saving.serialize_keras_object(self.tokenizer)),
                "pooling": self.pooling, "activation": self.activation, "seed": self.seed,
                "normalize": self.normalize, "truncate_dim": self.truncate_dim,
                "dense_head": (None if self.dense_head is None
                               else keras.saving.serialize_keras_object(self.dense_head)),
                "prompts": self.prompts, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        for key in ("tokenizer", "dense_head"):
            if config.get(key) is not None:
                config[key] = keras.saving.deserialize_keras_object(config[key])
        head = config.get("dense_head")
        if head is not None and not head.built:  # built, so that its weights load
            head.build((None, config["backbone"].hidden_dim))
        return cls(**config)


# The function `SentenceEncoder.export` calls: tfsent.formats installs its `keras_export`
# here when it is imported (tfsent/__init__.py imports it, so it is always installed). The
# formats import the encoders; through this hook the encoders never import the formats.
_EXPORTER = [None]


def set_exporter(function):
    """Installs `function(encoder, filepath, format, verbose, input_signature, defaults,
    kwargs)` as the body of `SentenceEncoder.export` (`tfsent.formats` does on import)."""
    _EXPORTER[0] = function


class _FunctionCache:
    """Holds `encode`'s tf.functions (and the checkpoint's MLM head arrays) outside TF/Keras
    object tracking (so they are neither checkpointed nor saved into an exported
    SavedModel)."""

    def __init__(self):
        self.functions = {}
        self.mlm_head = None

