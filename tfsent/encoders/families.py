"""The encoder families tfsent runs, as data: one record per family, read by loading
(`huggingface`, `loading`, `keras_hub_adapter`) and by publishing (`tfsent.formats`).

    families.FAMILIES              ("bert", "roberta", "xlm-roberta", "distilbert", "qwen3",
                                    "gemma3")
    families.TABLE[name]           the family's `Family` record
    families.family_of(backbone)   the family of a keras-hub backbone (None if not ours)

A family's name is Hugging Face's config.json `model_type` (gemma3: `gemma3_text`, the text
model's; `family_of_model_type`). Each record holds the keras-hub
class names (`keras_hub_adapter` turns them into classes), the settings keras-hub fixes for
the family (feed-forward activation, LayerNorm epsilon), what sets the family's inputs apart
(token types, position ids after padding, the padding id), Hugging Face's naming (model
class, config.json fields, base-model prefix, tokenizer class, MLM head), and the weight map.
Code outside this module asks a record what differs (`has_segments`, `has_pooler`,
`positions_after_padding`, ...), never which family it is: a new family is a new record.

Weight map: the Hugging Face module name of every weight-holding sublayer, by the role
`keras_hub_adapter` gives that sublayer (`EmbeddingParts` / `BlockParts` fields), and of
the pooler Dense; `{i}` stands for the transformer layer's index. Each module has `.weight`
and `.bias` (LayerNorms too), embedding tables `.weight` only. How a role's tensors change
layout between keras-hub and Hugging Face is `huggingface.weights`' (its weight kinds).
Hugging Face tensors with no keras-hub counterpart are `zero_tensors` (written as zeros,
folded or ignored when read).
"""

from typing import NamedTuple


class Family(NamedTuple):
    """Everything tfsent knows about one encoder family."""

    name: str  # Hugging Face model_type
    keras_hub_backbone: str  # keras_hub.models class names
    keras_hub_tokenizer: str
    keras_hub_text_embedder: object  # str, or None: keras-hub has no TextEmbedder for it
    activation: str  # the feed-forward activation keras-hub builds the backbone with
    layer_norm_epsilon: float  # fixed by keras-hub's backbone class
    positions_after_padding: bool  # position ids start at pad_token_id + 1 (fairseq's)
    pad_token_id: int  # Hugging Face's padding id when config.json does not give one
    tokenizer_kind: str  # wordpiece | byte_bpe | sentencepiece
    hf_model_class: str  # `architectures` of a base model's config.json
    hf_tokenizer_class: str  # tokenizer_config.json's tokenizer_class
    hf_config_keys: dict  # backbone setting (keras-hub's name) -> config.json field
    hf_config_fixed: dict  # config.json fields with a value fixed for the family
    base_prefix: str  # names of the base model inside a *ForMaskedLM checkpoint
    embeddings: dict  # role -> Hugging Face module name
    pooler: object  # Hugging Face module name of the pooler Dense, or None (no pooler)
    layer: dict  # role -> Hugging Face module name template ("{i}": layer index)
    zero_tensors: dict  # Hugging Face tensor name -> rows (of hidden_dim zeros)
    mlm_head: tuple  # (dense module, LayerNorm module, output-bias names, first found)
    # What sets the decoder-based embedders (Qwen3-Embedding) apart; the defaults are the
    # post-LayerNorm encoders'.
    forward: str = "tfsent"  # tfsent: our own forward (`model`); keras_hub: the backbone's
    attention: str = "bidirectional"  # bidirectional | causal
    # config.json's field that makes a decoder's attention bidirectional (causal when it
    # is absent or false); "" when `attention` holds for every checkpoint.
    bidirectional_flag: str = ""
    block: str = "post_layernorm"  # post_layernorm | pre_rmsnorm (RMSNorm, gated SiLU MLP)
    positions: str = "absolute"  # absolute (a learned table) | rope (rotary)
    default_pooling: str = "mean"  # what a bare Hugging Face folder is pooled with
    hf_padding_side: str = "right"  # tokenizer_config.json's padding_side of releases
    appended_token: object = None  # the token a decoder family's tokenizer appends
    export_formats: object = None  # the tfsent.formats names it writes (None: every one)
    # A cross-encoder's head, as the family's AutoModelForSequenceClassification has it:
    # (architecture, head kind), the kind a key of CLASSIFICATION_HEADS. None: not mapped
    # (the cross-encoder scores with a Dense(1) on the first token, published as SavedModel).
    hf_sequence_classification: object = None
    # The family's causal-LM architecture (a prompted reranker, `pair_prompts`, is published
    # as one: sentence-transformers scores it with the answer tokens' logits). None: none.
    hf_causal_lm: object = None
    # The `pair_prompts` prompts whose reranker releases are checkpoints of this family.
    pair_prompts: tuple = ()
    hf_model_type: object = None  # config.json's model_type when it is not the family name
    # keras-hub settings its Hugging Face converter gets wrong for sentence-transformers
    # folders, passed to `Backbone.from_preset` (gemma3: no embedding head inside the
    # backbone; tfsent runs the folder's Dense modules, `dense_head`).
    keras_hub_overrides: object = None
    # What keras-hub's backbone fixes that config.json could set otherwise (checked when a
    # folder loads, `huggingface.check_keras_hub_fixed`): the period of `layer_types`
    # (sliding layers, then one full-attention layer) and the rotary base per layer type.
    layer_type_period: object = None
    rope_thetas: object = None
    # The rotary scaling kinds (`rope_type` in rope_scaling / rope_parameters; "default":
    # none) keras-hub's converter applies, and config.json fields it never reads with the
    # one value its backbone computes (also checked by `check_keras_hub_fixed`).
    rope_types: tuple = ("default",)
    keras_hub_unread: object = None
    # config.json's field setting the attention's query scale 1 / sqrt(field): keras-hub's
    # blocks apply head_dim only (0.32's Gemma3DecoderBlock builds its attention with
    # `query_head_dim_normalize=True` whatever the backbone says, so Gemma 3 27B's 168 would
    # load and compute 1 / sqrt(128)); any other value is refused.
    query_scale_field: object = None
    # keras-hub's backbone takes `tie_word_embeddings`, its converter then reading
    # `lm_head.weight` (absent from a base model's file: `keras_hub_overrides` ties).
    keras_hub_ties_flag: bool = False
    # The layer names keras-hub's `Backbone.enable_lora` adapts (`tfsent.encoders.lora`):
    # every family's attention query and value projections (EinsumDense layers named
    # "query" / "value" in keras' MultiHeadAttention and keras-hub's Qwen3 / Gemma3
    # attention). Empty: the family takes no LoRA.
    lora_targets: tuple = ("query", "value")
    # float16 compute (mixed_float16) is safe for the family's activations.
    float16_safe: bool = True

    @property
    def runs_own_forward(self):
        """True when tfsent runs its own transformer forward over the backbone's weights
        (per-site dropout, embedding hooks, every layer's states); False when it calls the
        keras-hub backbone (its sequence output only)."""
        return self.forward == "tfsent"

    @property
    def has_segments(self):
        """True when the model takes token types (segment ids: BERT's token_type_ids) and
        its tokenizer emits them; the weight map then names a `segment` table."""
        return "segment" in self.embeddings

    @property
    def has_pooler(self):
        """True when the backbone has a pooler Dense(H, tanh) on the first token (`cls`
        pooling's)."""
        return self.pooler is not None

    @property
    def classification_head(self):
        """The `ClassificationHead` of the family's *ForSequenceClassification (None: not
        mapped)."""
        record = self.hf_sequence_classification
        return None if record is None else CLASSIFICATION_HEADS[record[1]]

    def position_offset(self, pad_token_id=None):
        """Rows of the Hugging Face position table before position 0 (RoBERTa, XLM-R:
        pad_token_id + 1; keras-hub's positions, like tfsent's, start at 0). None: the
        family's own padding id."""
        if not self.positions_after_padding:
            return 0
        return int(self.pad_token_id if pad_token_id is None else pad_token_id) + 1


class ClassificationHead(NamedTuple):
    """Hugging Face's sequence-classification head of a kind, on the first token's state
    (or, `on_pooler`, on the pooler's output; or, `token` "last_non_pad", on the state a
    decoder's classifier reads): [dropout] -> [inner Dense(H, activation) -> dropout] ->
    classifier Dense(labels). Module names are the checkpoint's (no prefix)."""

    inner: object  # Hugging Face module of the hidden Dense(H -> H), or None
    inner_activation: object  # its activation (keras name), or None
    dropout_first: bool  # dropout on the first token's state before the first Dense
    classifier: str  # Hugging Face module of the output Dense(H -> labels)
    on_pooler: bool = False  # reads the pooler's output (the family's `cls` pooling)
    bias: bool = True  # the classifier has a bias
    # The token it reads: "first" (the `cls` pooling), or "last_non_pad" (decoders'
    # GenericForSequenceClassification: the rightmost token whose id is not config.json's
    # pad_token_id; `pooling.last_non_pad`).
    token: str = "first"


# The head kinds of `Family.hf_sequence_classification` (docs/families.md, "Cross-encoder
# heads").
CLASSIFICATION_HEADS = {
    # BertForSequenceClassification: pooler (Dense + tanh) -> dropout -> classifier.
    "pooler": ClassificationHead(None, None, True, "classifier", on_pooler=True),
    # RobertaClassificationHead (RoBERTa, XLM-R): dropout -> dense + tanh -> dropout ->
    # out_proj.
    "dense_tanh": ClassificationHead("classifier.dense", "tanh", True, "classifier.out_proj"),
    # DistilBertForSequenceClassification: pre_classifier -> ReLU -> dropout -> classifier.
    "pre_classifier": ClassificationHead("pre_classifier", "relu", False, "classifier"),
    # Qwen3ForSequenceClassification, Gemma3TextForSequenceClassification (transformers'
    # GenericForSequenceClassification): `score`, a Dense(labels) without bias and without
    # dropout, on the rightmost token that is not the pad token (whatever the attention).
    "score": ClassificationHead(None, None, False, "score", bias=False, token="last_non_pad"),
}

# Post-LayerNorm encoder blocks under BERT's names (BERT, RoBERTa, XLM-R).
_BERT_LAYER = {
    "query": "encoder.layer.{i}.attention.self.query",
    "key": "encoder.layer.{i}.attention.self.key",
    "value": "encoder.layer.{i}.attention.self.value",
    "attention_output": "encoder.layer.{i}.attention.output.dense",
    "attention_norm": "encoder.layer.{i}.attention.output.LayerNorm",
    "ffn_inner": "encoder.layer.{i}.intermediate.dense",
    "ffn_output": "encoder.layer.{i}.output.dense",
    "ffn_norm": "encoder.layer.{i}.output.LayerNorm",
}
_DISTILBERT_LAYER = {
    "query": "transformer.layer.{i}.attention.q_lin",
    "key": "transformer.layer.{i}.attention.k_lin",
    "value": "transformer.layer.{i}.attention.v_lin",
    "attention_output": "transformer.layer.{i}.attention.out_lin",
    "attention_norm": "transformer.layer.{i}.sa_layer_norm",
    "ffn_inner": "transformer.layer.{i}.ffn.lin1",
    "ffn_output": "transformer.layer.{i}.ffn.lin2",
    "ffn_norm": "transformer.layer.{i}.output_layer_norm",
}
# config.json fields of BERT's layout (BERT, RoBERTa, XLM-R) and of DistilBERT's.
_BERT_CONFIG_KEYS = {
    "vocabulary_size": "vocab_size", "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads", "hidden_dim": "hidden_size",
    "intermediate_dim": "intermediate_size", "activation": "hidden_act",
    "dropout": "hidden_dropout_prob", "attention_dropout": "attention_probs_dropout_prob",
    "max_sequence_length": "max_position_embeddings", "layer_norm_epsilon": "layer_norm_eps",
    "num_segments": "type_vocab_size"}
_DISTILBERT_CONFIG_KEYS = {
    "vocabulary_size": "vocab_size", "num_layers": "n_layers", "num_heads": "n_heads",
    "hidden_dim": "dim", "intermediate_dim": "hidden_dim", "activation": "activation",
    "dropout": "dropout", "attention_dropout": "attention_dropout",
    "max_sequence_length": "max_position_embeddings"}  # no epsilon field: fixed at 1e-12
_EMBEDDINGS = {"token": "embeddings.word_embeddings",
               "position": "embeddings.position_embeddings",
               "norm": "embeddings.LayerNorm"}
_ROBERTA = Family(
    name="roberta", keras_hub_backbone="RobertaBackbone", keras_hub_tokenizer="RobertaTokenizer",
    keras_hub_text_embedder=None, activation="gelu", layer_norm_epsilon=1e-5,
    positions_after_padding=True, pad_token_id=1, tokenizer_kind="byte_bpe",
    hf_model_class="RobertaModel", hf_tokenizer_class="RobertaTokenizer",
    hf_config_keys=_BERT_CONFIG_KEYS,
    # One token-type row (see zero_tensors), fairseq's <s> and </s> ids.
    hf_config_fixed={"position_embedding_type": "absolute", "type_vocab_size": 1,
                     "bos_token_id": 0, "eos_token_id": 2},
    base_prefix="roberta.", embeddings=_EMBEDDINGS,
    pooler=None, layer=_BERT_LAYER,
    # A single token-type row: keras-hub's RoBERTa has no token types (Hugging Face adds row
    # 0 to every token; zero in converted fairseq checkpoints).
    zero_tensors={"embeddings.token_type_embeddings.weight": 1},
    mlm_head=("lm_head.dense", "lm_head.layer_norm", ("lm_head.bias", "lm_head.decoder.bias")),
    hf_sequence_classification=("RobertaForSequenceClassification", "dense_tanh"))

# What the families keras-hub runs export as (ONNX: not yet; tfsent's ONNX writer builds
# post-LayerNorm encoder graphs only, docs/families.md); cross_encoder, cross_encoder_hf: a
# reranker on them (the latter with the family's Hugging Face head, or a prompted
# reranker's causal LM, `hf_causal_lm`).
_DECODER_EXPORT_FORMATS = ("tf_saved_model", "sentence_transformers", "huggingface", "litert",
                           "keras_hub", "cross_encoder", "cross_encoder_hf", "onnx")

TABLE = {
    "bert": Family(
        name="bert", keras_hub_backbone="BertBackbone", keras_hub_tokenizer="BertTokenizer",
        keras_hub_text_embedder="BertTextEmbedder",
        # keras-hub's BERT presets were converted for its tanh-approximate GELU.
        activation="gelu_approximate", layer_norm_epsilon=1e-12,
        positions_after_padding=False, pad_token_id=0, tokenizer_kind="wordpiece",
        hf_model_class="BertModel", hf_tokenizer_class="BertTokenizer",
        hf_config_keys=_BERT_CONFIG_KEYS,
        hf_config_fixed={"position_embedding_type": "absolute"}, base_prefix="bert.",
        embeddings={**_EMBEDDINGS, "segment": "embeddings.token_type_embeddings"},
        pooler="pooler.dense", layer=_BERT_LAYER, zero_tensors={},
        mlm_head=("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                  ("cls.predictions.bias", "cls.predictions.decoder.bias")),
        hf_sequence_classification=("BertForSequenceClassification", "pooler")),
    "roberta": _ROBERTA,
    # XLM-R is RoBERTa's architecture with a SentencePiece vocabulary.
    "xlm-roberta": _ROBERTA._replace(
        name="xlm-roberta", keras_hub_backbone="XLMRobertaBackbone",
        keras_hub_tokenizer="XLMRobertaTokenizer",
        keras_hub_text_embedder="XLMRobertaTextEmbedder", tokenizer_kind="sentencepiece",
        hf_model_class="XLMRobertaModel", hf_tokenizer_class="XLMRobertaTokenizer",
        hf_sequence_classification=("XLMRobertaForSequenceClassification", "dense_tanh")),
    "distilbert": Family(
        name="distilbert", keras_hub_backbone="DistilBertBackbone",
        keras_hub_tokenizer="DistilBertTokenizer", keras_hub_text_embedder=None,
        activation="gelu", layer_norm_epsilon=1e-12, positions_after_padding=False,
        pad_token_id=0, tokenizer_kind="wordpiece", hf_model_class="DistilBertModel",
        hf_tokenizer_class="DistilBertTokenizer", hf_config_keys=_DISTILBERT_CONFIG_KEYS,
        hf_config_fixed={"sinusoidal_pos_embds": False}, base_prefix="distilbert.",
        embeddings=_EMBEDDINGS, pooler=None, layer=_DISTILBERT_LAYER, zero_tensors={},
        mlm_head=("vocab_transform", "vocab_layer_norm", ("vocab_projector.bias",)),
        hf_sequence_classification=("DistilBertForSequenceClassification", "pre_classifier")),
    # Qwen3 (Qwen3-Embedding): a causal decoder with pre-RMSNorm blocks, rotary positions,
    # grouped-query attention; pooled at the last token, the <|endoftext|> its tokenizer
    # appends. Loaded by keras-hub's own Hugging Face converter (no weight map here).
    "qwen3": Family(
        name="qwen3", keras_hub_backbone="Qwen3Backbone", keras_hub_tokenizer="Qwen3Tokenizer",
        keras_hub_text_embedder="Qwen3TextEmbedder", activation="silu",
        layer_norm_epsilon=1e-6, positions_after_padding=False, pad_token_id=None,
        tokenizer_kind="qwen_bpe", hf_model_class="Qwen3Model",
        hf_tokenizer_class="Qwen2Tokenizer", hf_config_keys={}, hf_config_fixed={},
        base_prefix="model.", embeddings={}, pooler=None, layer={}, zero_tensors={},
        mlm_head=None, forward="keras_hub", attention="causal", block="pre_rmsnorm",
        positions="rope", default_pooling="last_token", hf_padding_side="left",
        appended_token="<|endoftext|>",
        export_formats=_DECODER_EXPORT_FORMATS,
        keras_hub_unread={"attention_bias": False, "hidden_act": "silu"},
        keras_hub_ties_flag=True, hf_causal_lm="Qwen3ForCausalLM",
        hf_sequence_classification=("Qwen3ForSequenceClassification", "score"),
        pair_prompts=("qwen3_reranker",)),
    # Gemma3 text (EmbeddingGemma): a decoder with pre- and post-RMSNorm (1 + scale)
    # blocks, grouped-query attention with query / key norms, rotary positions (base 10k
    # on sliding-window layers, 1M on every sixth, full, layer), token embeddings scaled
    # by sqrt(hidden); attention bidirectional when config.json's
    # use_bidirectional_attention says so (EmbeddingGemma). Mean-pooled, then the folder's
    # Dense modules (768 -> 3072 -> 768) and Normalize. Its SentencePiece tokenizer
    # prepends <bos> and appends <eos>. Loaded by keras-hub's converter.
    "gemma3": Family(
        name="gemma3", keras_hub_backbone="Gemma3Backbone", keras_hub_tokenizer="Gemma3Tokenizer",
        keras_hub_text_embedder="Gemma3TextEmbedder", activation="gelu_approximate",
        layer_norm_epsilon=1e-6, positions_after_padding=False, pad_token_id=0,
        tokenizer_kind="gemma_sentencepiece", hf_model_class="Gemma3TextModel",
        hf_tokenizer_class="GemmaTokenizer", hf_config_keys={}, hf_config_fixed={},
        base_prefix="model.", embeddings={}, pooler=None, layer={}, zero_tensors={},
        mlm_head=None, forward="keras_hub", attention="bidirectional", block="pre_rmsnorm",
        bidirectional_flag="use_bidirectional_attention",
        positions="rope", default_pooling="mean", hf_padding_side="right",
        appended_token="<eos>", export_formats=_DECODER_EXPORT_FORMATS,
        hf_model_type="gemma3_text",
        hf_sequence_classification=("Gemma3TextForSequenceClassification", "score"),
        # keras-hub's converter builds EmbeddingGemma's head inside the backbone with a
        # hard-coded 3072-wide Dense, its own mean pooling and an L2 norm always on.
        keras_hub_overrides={"is_embedding_model": False, "pooling_intermediate_dim": None,
                             "embedding_dim": None},
        layer_type_period=6,
        rope_thetas={"sliding_attention": 10000.0, "full_attention": 1000000.0},
        rope_types=("default", "linear"),
        # rms_norm_eps: keras-hub passes it to the final norm only; its blocks keep 1e-6.
        keras_hub_unread={"attention_bias": False, "hidden_activation": "gelu_pytorch_tanh",
                          "rms_norm_eps": 1e-6},
        query_scale_field="query_pre_attn_scalar",
        # Gemma's residual stream grows past float16's 65504 (Google trains and serves it
        # in bfloat16 or float32): mixed_float16 is refused (mixed_bfloat16 works).
        float16_safe=False),
}
FAMILIES = tuple(TABLE)
# The family of files saved before tfsent recorded one (format-1 encoder directories, CMLM
# extractor configs): BERT, then the only family.
UNRECORDED_FAMILY = "bert"


def family_of_model_type(model_type):
    """The family whose config.json `model_type` this is (None: not one of ours)."""
    return {(f.hf_model_type or f.name): f.name for f in TABLE.values()}.get(model_type)


def family_of(backbone):
    """The family of a keras-hub backbone instance, by its class or the nearest keras-hub
    class it derives from (XLMRobertaBackbone before RobertaBackbone); None for others."""
    by_class = {f.keras_hub_backbone: f.name for f in TABLE.values()}
    for cls in type(backbone).__mro__:
        if cls.__name__ in by_class:
            return by_class[cls.__name__]
    return None


def backbone_class_names():
    """The keras-hub backbone class names tfsent runs, in FAMILIES order."""
    return [f.keras_hub_backbone for f in TABLE.values()]
