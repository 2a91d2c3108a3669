"""In-graph tokenizers: strings -> {"token_ids", "padding_mask", "segment_ids"}."""

import os

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from tfsent.encoders.keras_hub_adapter import pretokenize
from tfsent.errors import ConfigError, InputError


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

    def with_options(self, **overrides):
        """A copy of this tokenizer with some constructor arguments replaced (e.g.
        `max_seq_length=`, `pad_to_max_length=False` for serving)."""
        config = self.get_config()
        config.pop("name", None)
        config.update(overrides)
        return type(self).from_config(config)

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary": self.vocabulary, "lowercase": self.lowercase,
                       "strip_accents": self.strip_accents,
                       "max_seq_length": self.max_seq_length,
                       "pad_to_max_length": self.pad_to_max_length})
        return config
