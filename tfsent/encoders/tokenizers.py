"""In-graph tokenizers: strings -> {"token_ids", "padding_mask"[, "segment_ids"]}.

One per tokenizer kind of the supported encoder families, each reproducing the Hugging Face
tokenizer of the family from the same files, in TF ops only (they are saved inside exported
SavedModels, which load with tensorflow + tensorflow_text alone):

  SentenceTokenizer        WordPiece (bert, distilbert): vocab.txt
  ByteBPETokenizer         byte-level BPE (roberta): vocab.json + merges.txt
  SentencePieceTokenizer   SentencePiece with fairseq's id layout (xlm-roberta):
                           sentencepiece.bpe.model
  GemmaSentencePieceTokenizer  Gemma's SentencePiece, the model's own ids, <bos> ... <eos>
                           (gemma3): tokenizer.model

All of them: `[first] pieces [last]` truncated to `max_seq_length` (special tokens
included), padded with the family's pad id; `padding_mask` is 1 on real tokens. Only
tokenizers of families with token types (BERT) emit `segment_ids` (all zeros: one
sentence). Attributes used by the methods: `cls_id` (first token: [CLS] / <s>), `sep_id`
(last: [SEP] / </s>), `pad_id`, `mask_id`, `unk_id`, `special_ids`, `vocabulary_size`,
`max_seq_length`. Differences from Hugging Face are listed in the README ("Encoder
families"): special-token strings inside the text are tokenized as text, not as specials.

`tokenize_pairs` builds the family's pair template, or with a `pair_prompt` (fixed prefix
ids, the texts around the two inputs, fixed suffix ids: `tfsent.encoders.pair_prompts`) a
prompted reranker's input; the prompt is part of the tokenizer's config.
"""

import base64
import hashlib
import json
import os

import keras
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops import sentencepiece_tokenizer as _tf_text_sp

from tfsent.errors import ConfigError, InputError


# BertNormalizer removes NUL, U+FFFD and control, format and private-use characters (Cc Cf
# Co; not unassigned ones) except \t \n \r.
_BERT_REMOVED = r"[\x{0}-\x{8}\x{B}\x{C}\x{E}-\x{1F}\x{7F}-\x{9F}\x{FFFD}\p{Cf}\p{Co}]"
# BertPreTokenizer's punctuation: ASCII punctuation and Unicode P*.
_BERT_PUNCT = r"[!-/:-@\[-`{-~\p{P}]"
# BertNormalizer's CJK ideograph blocks (split into words of their own).
_CJK = (r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
        r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")
_MAX_WORD_CHARS = 100  # WordPiece's max_input_chars_per_word


def _replace_invalid_utf8(strings):
    """Invalid UTF-8 -> U+FFFD (one per maximal invalid subsequence, as Python's
    bytes.decode("utf-8", "replace"))."""
    return tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)


class _InGraphTokenizer(keras.layers.Layer):
    """Shared part: special tokens around the pieces, truncation, padding, options.

    Subclasses set the special ids and implement `pieces(strings) -> RaggedTensor int32
    (B, None)` (ids of the text, no special tokens) and `_config()`.
    """

    emits_segment_ids = False
    prepends_first = True  # False: no first token, pieces then `sep_id` (decoder families)
    # [SEP]-like tokens between the two texts of a pair: one in BERT's template
    # `[CLS] a [SEP] b [SEP]`, two in RoBERTa's / XLM-R's `<s> a </s></s> b </s>`.
    pair_separators = 1
    # The second text of a pair starts with the first token again (Gemma's
    # `<bos> a <eos> <bos> b <eos>`); Qwen's is `a <eos> b <eos>` (`prepends_first` False).
    pair_restarts = False

    def __init__(self, max_seq_length=128, pad_to_max_length=True, pair_prompt=None,
                 **kwargs):
        super().__init__(**kwargs)
        if int(max_seq_length) < 2:
            raise ConfigError(f"max_seq_length must be >= 2, got {max_seq_length}")
        self.max_seq_length = int(max_seq_length)
        self.pad_to_max_length = bool(pad_to_max_length)
        self.pair_prompt = _checked_pair_prompt(pair_prompt, self.max_seq_length)
        self.built = True  # no variables

    def build(self, input_shape=None):
        self.built = True

    def __call__(self, strings, *args, **kwargs):
        if isinstance(strings, (list, tuple, str, bytes)):
            strings = tf.constant(strings, dtype=tf.string)
        return super().__call__(strings, *args, **kwargs)

    def _set_special_ids(self, cls_id, sep_id, pad_id, mask_id, unk_id):
        self.cls_id, self.sep_id, self.pad_id = int(cls_id), int(sep_id), int(pad_id)
        self.mask_id, self.unk_id = int(mask_id), int(unk_id)
        self.special_ids = sorted({self.cls_id, self.sep_id, self.pad_id, self.mask_id,
                                   self.unk_id})

    def pieces(self, strings):
        """Ids of the text of each string, without special tokens (ragged)."""
        raise NotImplementedError

    def call(self, strings):
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        pieces = self.pieces(strings)[:, : self.max_seq_length - 1 - self.prepends_first]
        n = pieces.nrows()
        first = tf.RaggedTensor.from_tensor(tf.fill([n, 1], self.cls_id))
        last = tf.RaggedTensor.from_tensor(tf.fill([n, 1], self.sep_id))
        parts = [first] if self.prepends_first else []
        ids = tf.concat(parts + [tf.cast(pieces, tf.int32), last], axis=1)
        batch = strings.shape[0] if strings.shape.rank == 1 else None  # keep a static batch
        shape = [batch, self.max_seq_length if self.pad_to_max_length else None]
        token_ids = ids.to_tensor(default_value=self.pad_id, shape=shape)
        padding_mask = tf.ones_like(ids, dtype=tf.int32).to_tensor(0, shape=shape)
        out = {"token_ids": token_ids, "padding_mask": padding_mask}
        if self.emits_segment_ids:
            out["segment_ids"] = tf.zeros_like(token_ids)
        return out

    def tokenize_pairs(self, first, second):
        """(first, second) string tensors (B,) -> the features of the joint pair input, in the
        family's pair template (`[CLS] a [SEP] b [SEP]`; `<s> a </s></s> b </s>`;
        `a <|endoftext|> b <|endoftext|>`; `<bos> a <eos> <bos> b <eos>`), truncated
        longest-first to `max_seq_length` as Hugging Face's tokenizers do
        (`longest_first_lengths`); `segment_ids` (0 on `[CLS] a [SEP]`, 1 on `b [SEP]`)
        when the tokenizer emits them. With a `pair_prompt` (a reranker's chat template,
        `tfsent.encoders.pair_prompts`), the prompt's layout instead."""
        first = tf.convert_to_tensor(first, dtype=tf.string)
        second = tf.convert_to_tensor(second, dtype=tf.string)
        if self.pair_prompt is not None:
            return self._prompted_pairs(first, second)
        specials = self.prepends_first + self.pair_separators + self.pair_restarts + 1
        budget = self.max_seq_length - specials
        if budget < 0:
            raise ConfigError(f"max_seq_length {self.max_seq_length} is too short for a pair "
                              f"(at least {specials})")
        a, b = (tf.cast(self.pieces(s), tf.int32) for s in (first, second))
        keep_a, keep_b = longest_first_lengths(a.row_lengths(), b.row_lengths(), budget)
        a = tf.ragged.boolean_mask(a, tf.ragged.range(a.row_lengths()) < keep_a[:, None])
        b = tf.ragged.boolean_mask(b, tf.ragged.range(b.row_lengths()) < keep_b[:, None])
        n = a.nrows()

        def column(value, width=1):
            return tf.RaggedTensor.from_tensor(tf.fill([n, width], value))

        head = [column(self.cls_id)] if self.prepends_first else []
        head += [a, column(self.sep_id, self.pair_separators)]
        tail = [column(self.cls_id)] if self.pair_restarts else []
        tail += [b, column(self.sep_id)]
        segments = tf.concat([tf.zeros_like(p) for p in head]
                             + [tf.ones_like(p) for p in tail], axis=1)
        return self._pair_features(tf.concat(head + tail, axis=1), segments, first)

    def _pair_features(self, ids, segments, first):
        """Ragged pair ids (and segments) -> the padded features."""
        batch = first.shape[0] if first.shape.rank == 1 else None
        shape = [batch, self.max_seq_length if self.pad_to_max_length else None]
        out = {"token_ids": ids.to_tensor(default_value=self.pad_id, shape=shape),
               "padding_mask": tf.ones_like(ids).to_tensor(0, shape=shape)}
        if self.emits_segment_ids:
            out["segment_ids"] = segments.to_tensor(0, shape=shape)
        return out

    def _prompted_pairs(self, first, second):
        """`prefix_ids + pieces(texts[0] + first + texts[1] + second + texts[2])[:budget] +
        suffix_ids`: the middle text tokenized as one text and cut at its end to what the
        fixed prefix and suffix leave of `max_seq_length` (a reranker model card's
        `truncation` of its formatted text), nothing appended after it."""
        prompt = self.pair_prompt
        budget = self.max_seq_length - len(prompt["prefix_ids"]) - len(prompt["suffix_ids"])
        before, between, after = prompt["texts"]
        middle = tf.strings.join([before, first, between, second, after])
        pieces = tf.cast(self.pieces(middle), tf.int32)[:, :budget]
        n = pieces.nrows()

        def fixed(ids):
            row = tf.constant([ids], tf.int32, shape=[1, len(ids)])
            return tf.RaggedTensor.from_tensor(tf.tile(row, [n, 1]))

        ids = tf.concat([fixed(prompt["prefix_ids"]), pieces, fixed(prompt["suffix_ids"])],
                        axis=1)
        return self._pair_features(ids, tf.zeros_like(ids), first)

    def with_options(self, **overrides):
        """A copy of this tokenizer with some constructor arguments replaced (e.g.
        `max_seq_length=`, `pad_to_max_length=False` for serving)."""
        config = self.get_config()
        config.pop("name", None)
        config.update(overrides)
        # (Keras' from_config hides a ConfigError in a TypeError: checked here first.)
        _checked_pair_prompt(config.get("pair_prompt"), config["max_seq_length"])
        return type(self).from_config(config)

    def _config(self):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config.update(self._config())
        config.update({"max_seq_length": self.max_seq_length,
                       "pad_to_max_length": self.pad_to_max_length})
        if self.pair_prompt is not None:
            config["pair_prompt"] = {k: list(v) if isinstance(v, list) else v
                                     for k, v in self.pair_prompt.items()}
        return config


def _checked_pair_prompt(prompt, max_seq_length):
    """None, or {"name": the prompt's name, "instruction": its instruction, "prefix_ids":
    [int], "texts": [3 strings], "suffix_ids": [int], "min_length": the least
    max_seq_length that leaves the query and the document a token each} checked
    (ConfigError naming the part, or a `max_seq_length` below `min_length`)."""
    if prompt is None:
        return None
    parts = {"name", "instruction", "prefix_ids", "texts", "suffix_ids", "min_length"}
    if not isinstance(prompt, dict) or set(prompt) != parts:
        raise ConfigError(f"pair_prompt: a dict of {', '.join(sorted(parts))}, got "
                          f"{prompt!r}")
    texts = list(prompt["texts"])
    if len(texts) != 3 or not all(isinstance(t, str) for t in texts):
        raise ConfigError("pair_prompt texts: the three strings before the first text, "
                          f"between the two and after the second, got {texts!r}")
    out = {"name": str(prompt["name"]), "instruction": str(prompt["instruction"]),
           "texts": texts, "min_length": int(prompt["min_length"])}
    for part in ("prefix_ids", "suffix_ids"):
        ids = list(prompt[part])
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise ConfigError(f"pair_prompt {part}: token ids, got {ids!r}")
        out[part] = ids
    least = max(out["min_length"], len(out["prefix_ids"]) + len(out["suffix_ids"]) + 1)
    if int(max_seq_length) < least:
        raise ConfigError(f"max_seq_length {max_seq_length} leaves no room for the pair: "
                          f"the prompt and its instruction take {least - 2} tokens (a "
                          f"max_seq_length of {least} leaves the query and the document "
                          "one each; a reranker needs far more)")
    return out


@keras.saving.register_keras_serializable(package="tfsent")
class SentenceTokenizer(_InGraphTokenizer):
    """WordPiece (BERT, DistilBERT): strings -> `{"token_ids", "padding_mask"[,
    "segment_ids"]}`, in-graph.

    Reproduces Hugging Face's (fast) BERT tokenizer: invalid UTF-8 becomes U+FFFD, then
    control, format and private-use characters and U+FFFD are dropped and whitespace
    normalised, CJK ideographs split, accents stripped, lowercased (BertNormalizer), split on
    spaces and punctuation (BertPreTokenizer), then WordPiece (TF Text). Sequences are
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
        segment_ids: emit all-zero `segment_ids` (BERT); False for DistilBERT, which has no
            token types.
    """

    def __init__(self, vocabulary, lowercase=True, strip_accents=True, max_seq_length=128,
                 pad_to_max_length=True, segment_ids=True, **kwargs):
        super().__init__(max_seq_length, pad_to_max_length, **kwargs)
        if isinstance(vocabulary, (str, os.PathLike)):
            with open(vocabulary, encoding="utf-8") as f:
                vocabulary = [line.rstrip("\r\n") for line in f]
        self.vocabulary = list(vocabulary)
        self.lowercase = bool(lowercase)
        self.strip_accents = bool(strip_accents)
        self.emits_segment_ids = bool(segment_ids)
        # Normalisation and splitting: `normalize`, `pre_tokenize` (Hugging Face's
        # BertNormalizer and BertPreTokenizer); WordPiece: TF Text's FastWordpieceTokenizer.
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=self.vocabulary, token_out_type=tf.int32, suffix_indicator="##",
            unknown_token="[UNK]", no_pretokenization=True, support_detokenization=False)
        index = {tok: i for i, tok in enumerate(self.vocabulary)}
        for tok in ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"):
            if tok not in index:
                raise InputError(f"vocabulary has no {tok} token")
        self._set_special_ids(index["[CLS]"], index["[SEP]"], index["[PAD]"],
                              index["[MASK]"], index["[UNK]"])

    @property
    def vocabulary_size(self):
        """Number of wordpieces."""
        return len(self.vocabulary)

    def clean(self, strings):
        """Hugging Face's BertNormalizer text cleaning, on a string tensor: invalid UTF-8
        -> U+FFFD; NUL, U+FFFD and control, format and private-use characters but \\t \\n
        \\r removed; Unicode White_Space -> " "."""
        strings = _replace_invalid_utf8(strings)
        strings = tf.strings.regex_replace(strings, _BERT_REMOVED, "")
        return tf.strings.regex_replace(strings, r"[\t\n\r\p{Z}]", " ")

    def normalize(self, strings):
        """BertNormalizer: clean, spaces around CJK ideographs, accents stripped (NFD, drop
        Mn), lowercased character by character (Rust's `char::to_lowercase`)."""
        strings = tf.strings.regex_replace(self.clean(strings), _CJK, r" \0 ")
        if self.strip_accents:
            strings = tf.strings.regex_replace(tf_text.normalize_utf8(strings, "NFD"),
                                               r"\p{Mn}", "")
        if self.lowercase:
            # ICU lowercases a word-final capital sigma to final sigma; Rust, per
            # character, never does.
            strings = tf.strings.lower(tf.strings.regex_replace(strings, "\u03a3", "\u03c3"),
                                       encoding="utf-8")
        return strings

    def pre_tokenize(self, strings):
        """BertPreTokenizer on normalised text: (B,) -> (B, None) words; a word longer than
        100 characters becomes [UNK] (WordPiece's max_input_chars_per_word)."""
        words = tf_text.regex_split(self.normalize(strings), f" |{_BERT_PUNCT}", _BERT_PUNCT)
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > _MAX_WORD_CHARS
        return words.with_flat_values(tf.where(too_long, "[UNK]", words.flat_values))

    def pieces(self, strings):
        return self._wordpiece.tokenize(self.pre_tokenize(strings)).merge_dims(-2, -1)

    def save_files(self, directory):
        """Writes the Hugging Face tokenizer file of this tokenizer (vocab.txt)."""
        with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(self.vocabulary) + "\n")

    def _config(self):
        return {"vocabulary": self.vocabulary, "lowercase": self.lowercase,
                "strip_accents": self.strip_accents, "segment_ids": self.emits_segment_ids}


# --------------------------------------------------------------------------------------
# Byte-level BPE (RoBERTa)
# --------------------------------------------------------------------------------------

# Unicode White_Space, what `\s` matches in the regex engine of Hugging Face's tokenizers
# (RE2's `\s` is ASCII-only).
_WS = r"\t\n\x0B\f\r\x{85}\p{Z}"
# GPT-2's pre-tokenization pattern without its lookahead alternative `\s+(?!\S)`: the
# lookahead is applied by cutting whitespace runs first (`ByteBPETokenizer.pre_tokenize`).
_GPT2_SPLIT = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^" + _WS + r"\p{L}\p{N}]+|["
               + _WS + r"]+")
# Qwen2 / Qwen3's pattern, likewise without `\s+(?!\S)`; RE2's \s lacks \x0B and Unicode
# spaces, so \s is spelled out as `_WS`.
_QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^" + _WS
               + r"\p{L}\p{N}]+[\r\n]*|[" + _WS + r"]*[\r\n]+|[" + _WS + r"]+")
_INT32_MAX = 2 ** 31 - 1


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map (a list of 256 characters):
    printable Latin-1 bytes map to themselves, the others to U+0100 onwards."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _static_table(keys, values, default):
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(keys), tf.constant(values)), default)


@keras.saving.register_keras_serializable(package="tfsent")
class ByteBPETokenizer(_InGraphTokenizer):
    """Byte-level BPE (RoBERTa): strings -> `{"token_ids", "padding_mask"}`, in-graph.

    Reproduces Hugging Face's RoBERTa tokenizer (ByteLevel pre-tokenizer with GPT-2's
    pattern, BPE merges by rank, `<s> ... </s>`): invalid UTF-8 becomes U+FFFD (as Python's
    decode with errors="replace"); no other normalisation (control characters, accents and
    case are kept, as bytes). Pre-tokenization follows GPT-2's regex exactly: its lookahead
    `\\s+(?!\\S)` (unavailable in RE2) is applied by first cutting every whitespace run of
    two or more characters that precedes a non-space before its last character.

    Args:
        vocabulary: dict token -> id, or the path of a vocab.json.
        merges: list of "a b" merge rules in rank order, or the path of a merges.txt.
        add_prefix_space: prepend a space unless the text starts with one (HF's option).
        special_tokens: dict with the strings of `cls`, `sep`, `pad`, `mask`, `unk`
            (default RoBERTa's <s> </s> <pad> <mask> <unk>).
        max_seq_length, pad_to_max_length: as `SentenceTokenizer`.
    """

    DEFAULT_SPECIALS = {"cls": "<s>", "sep": "</s>", "pad": "<pad>", "mask": "<mask>",
                        "unk": "<unk>"}
    split_pattern = _GPT2_SPLIT
    line_breaks_end_runs = False  # the pattern has no `\s*[\r\n]+` before `\s+(?!\S)`
    lowercase = False  # recorded in export metadata, like the WordPiece tokenizer's
    strip_accents = False
    pair_separators = 2

    def __init__(self, vocabulary, merges, add_prefix_space=False, special_tokens=None,
                 max_seq_length=128, pad_to_max_length=True, **kwargs):
        super().__init__(max_seq_length, pad_to_max_length, **kwargs)
        vocab_path = merges_path = None
        if isinstance(vocabulary, (str, os.PathLike)):
            vocab_path = os.fspath(vocabulary)
            vocabulary = _read_json(vocab_path)
        if isinstance(merges, (str, os.PathLike)):
            merges_path = os.fspath(merges)
            with open(merges_path, encoding="utf-8") as f:
                merges = [line.rstrip("\r\n") for line in f]
        self.vocabulary = {str(k): int(v) for k, v in dict(vocabulary).items()}
        numbered = [(n, m) for n, m in enumerate(merges, 1)
                    if m and not m.startswith("#version")]
        self.merges = [m for _, m in numbered]
        self.add_prefix_space = bool(add_prefix_space)
        self.special_tokens = dict(self.DEFAULT_SPECIALS, **(special_tokens or {}))
        where = vocab_path or "vocabulary"
        for role, token in self.special_tokens.items():
            if token not in self.vocabulary:
                raise InputError(f"the {role} token {token!r} is not in the vocabulary",
                                 path=vocab_path)
        byte_chars = bytes_to_unicode()
        missing = [c for c in byte_chars if c not in self.vocabulary]
        if missing:
            raise InputError(f"{where} lacks {len(missing)} of the 256 byte symbols of "
                             f"byte-level BPE (e.g. {missing[0]!r})", path=vocab_path)
        for line, merge in numbered:
            parts = merge.split(" ")
            if len(parts) != 2 or "".join(parts) not in self.vocabulary:
                raise InputError(f"merge rule {merge!r} is not two symbols whose join is in "
                                 "the vocabulary", path=merges_path or "merges", line=line)
        ids = set(self.vocabulary.values())
        if len(ids) != len(self.vocabulary) or ids != set(range(len(ids))):
            raise InputError("vocabulary ids are not 0..N-1, each used once", path=vocab_path)
        s = self.special_tokens
        self._set_special_ids(self.vocabulary[s["cls"]], self.vocabulary[s["sep"]],
                              self.vocabulary[s["pad"]], self.vocabulary[s["mask"]],
                              self.vocabulary[s["unk"]])
        self._byte_chars = tf.constant(byte_chars)
        self._token_ids = _static_table(list(self.vocabulary), list(self.vocabulary.values()),
                                        self.unk_id)
        self._merge_ranks = _static_table(self.merges, list(range(len(self.merges))),
                                          _INT32_MAX)

    @property
    def vocabulary_size(self):
        """Number of tokens."""
        return len(self.vocabulary)

    def pre_tokenize(self, strings):
        """GPT-2's pre-tokenization: (B,) strings -> (B, None) ragged word strings."""
        strings = _replace_invalid_utf8(strings)
        if self.add_prefix_space:
            strings = tf.where(tf.strings.regex_full_match(strings, "(?s) .*"), strings,
                               tf.strings.join([" ", strings]))
        # 1. Cut each whitespace run of >= 2 characters that a non-space follows before its
        #    last character (what `\s+(?!\S)` leaves to the next token); with
        #    `line_breaks_end_runs` (Qwen), not a run ending in a line break, which Qwen's
        #    `\s*[\r\n]+`, tried first, takes whole ("\n\n" is one token there).
        # TF Text's regex ops stop at a NUL byte: they split a copy whose NULs are \x01
        # (the same regex class, the same length) and the pieces are cut from `strings`.
        masked = tf.strings.regex_replace(strings, r"\x00", "\x01")
        parts, _, ends = tf_text.regex_split_with_offsets(masked, f"[{_WS}]+", f"[{_WS}]+")
        flat = parts.flat_values
        is_space = tf.strings.regex_full_match(flat, f"[{_WS}]+")
        n_chars = tf.strings.length(flat, unit="UTF8_CHAR")
        last_char = tf.strings.substr(flat, tf.maximum(n_chars - 1, 0), tf.ones_like(n_chars),
                                     unit="UTF8_CHAR")
        lengths = tf.strings.length(strings)
        row_len = tf.gather(tf.cast(lengths, tf.int64), parts.value_rowids())
        ends = ends.flat_values
        cut = is_space & (n_chars >= 2) & (ends < row_len)
        if self.line_breaks_end_runs:  # `\s*[\r\n]+` keeps such a run whole
            cut &= ~tf.strings.regex_full_match(last_char, r"[\r\n]")
        cut_at = ends - tf.cast(tf.strings.length(last_char), tf.int64)
        cuts = tf.ragged.boolean_mask(parts.with_flat_values(cut_at),
                                      parts.with_flat_values(cut))  # (B, None) byte offsets
        n = tf.shape(strings, out_type=tf.int64)[0]
        bounds = tf.concat([tf.RaggedTensor.from_tensor(tf.zeros([n, 1], tf.int64)), cuts,
                            tf.RaggedTensor.from_tensor(tf.expand_dims(
                                tf.cast(lengths, tf.int64), -1))], axis=1)
        seg_start = bounds[:, :-1]
        seg_len = bounds[:, 1:] - seg_start
        rows = seg_start.value_rowids()
        segments = tf.strings.substr(tf.gather(strings, rows), seg_start.flat_values,
                                     seg_len.flat_values)
        masked = tf.strings.substr(tf.gather(masked, rows), seg_start.flat_values,
                                   seg_len.flat_values)
        # 2. The split pattern on each piece (no lookahead needed any more).
        _, begins, ends = tf_text.regex_split_with_offsets(masked, self.split_pattern,
                                                           self.split_pattern)
        words = begins.with_flat_values(tf.strings.substr(
            tf.gather(segments, begins.value_rowids()), begins.flat_values,
            ends.flat_values - begins.flat_values))
        return tf.RaggedTensor.from_row_splits(words, seg_start.row_splits).merge_dims(1, 2)

    def _bpe(self, chars):
        """BPE merges on (N, None) ragged symbols -> (N, None) ragged merged symbols:
        repeatedly merges the adjacent pair of lowest merge rank, the leftmost on ties (the
        same result as merging every occurrence at once: a pair a merge creates always
        ranks after the merge). Each iteration works on the words still merging only."""
        words = chars.to_tensor("")
        full_width = tf.shape(words)[1]
        lengths = tf.cast(chars.row_lengths(), tf.int32)
        active = tf.cast(tf.where(lengths > 1)[:, 0], tf.int32)

        def step(words, lengths, active):
            sub_len = tf.gather(lengths, active)
            width = tf.reduce_max(sub_len)
            sub = tf.gather(words, active)[:, :width]
            j = tf.range(width - 1)[None, :]
            ranks = self._merge_ranks.lookup(tf.strings.join([sub[:, :-1], sub[:, 1:]], " "))
            ranks = tf.where(j < sub_len[:, None] - 1, ranks, _INT32_MAX)
            merging = tf.reduce_min(ranks, axis=1) < _INT32_MAX
            pos = tf.argmin(ranks, axis=1, output_type=tf.int32)[:, None]
            k = tf.range(width)[None, :]
            shifted = tf.gather(sub, tf.minimum(k + tf.cast(k > pos, tf.int32), width - 1),
                                batch_dims=1)
            shifted = tf.where(k >= sub_len[:, None] - 1, "", shifted)
            merged = tf.strings.join([tf.gather(sub, pos, batch_dims=1),
                                      tf.gather(sub, pos + 1, batch_dims=1)])
            shifted = tf.where(k == pos, merged, shifted)
            sub = tf.where(merging[:, None], shifted, sub)
            sub_len = sub_len - tf.cast(merging, tf.int32)
            sub = tf.pad(sub, [[0, 0], [0, full_width - width]], constant_values="")
            words = tf.tensor_scatter_nd_update(words, active[:, None], sub)
            lengths = tf.tensor_scatter_nd_update(lengths, active[:, None], sub_len)
            return words, lengths, tf.boolean_mask(active, merging & (sub_len > 1))

        words, lengths, _ = tf.while_loop(
            lambda words, lengths, active: tf.size(active) > 0, step,
            (words, lengths, active),
            shape_invariants=(tf.TensorShape([None, None]), tf.TensorShape([None]),
                              tf.TensorShape([None])))
        return tf.RaggedTensor.from_tensor(words, lengths=lengths)

    def pieces(self, strings):
        words = self.pre_tokenize(strings)
        unique, index = tf.unique(words.flat_values)
        raw = tf.strings.bytes_split(unique)
        # fixed_length: (N, 1) even when N == 0 (a batch of only empty strings)
        codes = tf.io.decode_raw(raw.flat_values, tf.uint8, fixed_length=1)[:, 0]
        symbols = raw.with_flat_values(tf.gather(self._byte_chars, tf.cast(codes, tf.int32)))
        ids = self._token_ids.lookup(self._bpe(symbols))
        per_word = tf.gather(ids, index)
        return words.with_flat_values(per_word).merge_dims(1, 2)

    def save_files(self, directory):
        """Writes the Hugging Face tokenizer files of this tokenizer (vocab.json,
        merges.txt)."""
        with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(self.vocabulary, f, ensure_ascii=False)
        with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n" + "".join(m + "\n" for m in self.merges))

    def _config(self):
        return {"vocabulary": self.vocabulary, "merges": self.merges,
                "add_prefix_space": self.add_prefix_space,
                "special_tokens": self.special_tokens}


# The Hugging Face tokenizer files a decoder family's tokenizer was read from (tokenizer.json,
# tokenizer_config.json, special_tokens_map.json): kept as text, written into tfsent encoder
# directories and into sentence-transformers / Hugging Face exports, so that Hugging Face's
# clients tokenize an export exactly as the source folder did.
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _checked_hf_files(hf_files):
    """{file name: text} of `HF_TOKENIZER_FILES` (ConfigError for another name)."""
    hf_files = dict(hf_files or {})
    unknown = sorted(set(hf_files) - set(HF_TOKENIZER_FILES))
    if unknown:
        raise ConfigError(f"hf_files: {unknown} are not Hugging Face tokenizer files tfsent "
                          f"keeps ({', '.join(HF_TOKENIZER_FILES)})")
    return {name: str(text) for name, text in hf_files.items()}


def _write_hf_files(hf_files, directory):
    for name, text in hf_files.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(text)


@keras.saving.register_keras_serializable(package="tfsent")
class QwenBPETokenizer(ByteBPETokenizer):
    """Qwen2 / Qwen3's byte-level BPE as Qwen3-Embedding's tokenizer.json sets it up:
    NFC normalisation, Qwen's split pattern (single digits, a non-letter joined to the
    letters after it), no first token, `<|endoftext|>` appended after the pieces (after
    truncation too, as Hugging Face's post-processor does: the text is cut to
    max_seq_length - 1 pieces) and used for padding. `<|endoftext|>` stands in for the
    roles a decoder vocabulary has no token for (cls, mask, unk: byte-level BPE never
    needs an unknown token).

    Args:
        vocabulary: dict token -> id (tokenizer.json's model vocab plus its added tokens).
        merges: "a b" merge rules in rank order.
        special_tokens: dict role -> token string (default: `<|endoftext|>` for all).
        max_seq_length, pad_to_max_length: as `SentenceTokenizer`.
        hf_files: {file name: text} of the Hugging Face tokenizer files it was read from
            (`HF_TOKENIZER_FILES`), written back by `save_files` and by the exports.
    """

    DEFAULT_SPECIALS = dict.fromkeys(("cls", "sep", "pad", "mask", "unk"), "<|endoftext|>")
    split_pattern = _QWEN_SPLIT
    line_breaks_end_runs = True
    prepends_first = False
    pair_separators = 1  # pairs: `a <|endoftext|> b <|endoftext|>` (tokenizer.json's)

    def __init__(self, vocabulary, merges, special_tokens=None, max_seq_length=128,
                 pad_to_max_length=True, add_prefix_space=False, hf_files=None, **kwargs):
        if add_prefix_space:
            raise ConfigError("QwenBPETokenizer has no add_prefix_space option")
        self.hf_files = _checked_hf_files(hf_files)
        super().__init__(vocabulary, merges, False, special_tokens, max_seq_length,
                         pad_to_max_length, **kwargs)

    def save_files(self, directory):
        """Writes vocab.json, merges.txt and the kept Hugging Face tokenizer files."""
        super().save_files(directory)
        _write_hf_files(self.hf_files, directory)

    def _config(self):
        return {**super()._config(), "hf_files": dict(self.hf_files)}

    def pre_tokenize(self, strings):
        """NFC, then Qwen's pre-tokenization: (B,) strings -> (B, None) words."""
        return super().pre_tokenize(tf_text.normalize_utf8(_replace_invalid_utf8(strings),
                                                           "NFC"))



# --------------------------------------------------------------------------------------
# SentencePiece (XLM-RoBERTa)
# --------------------------------------------------------------------------------------

# TF Text's SentencePiece op keeps its model in a resource private to the op's kernel,
# which dies with the eager kernel cache (`tf.random.set_seed`, hence
# `keras.utils.set_random_seed`, clears it): a tokenizer made before then, and every
# function traced with it, would fail ("Resource ... does not exist"). tfsent's
# SentencePiece tokenizers name the resource (`shared_name`: the model's digest), so it
# lives in the resource manager instead, one per model, whatever happens to the kernels.
class _NamedSentencepieceResource(_tf_text_sp._SentencepieceModelResource):

    def _create_resource(self):
        shared_name = "tfsent_sentencepiece_" + hashlib.sha1(self._model).hexdigest()
        with tf.name_scope(self._name or "SentenceTokenizerInitializer"):
            return _tf_text_sp.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model, shared_name=shared_name)


def _sentencepiece_op(model):
    """A TF Text SentencepieceTokenizer of `model` whose resource is named (see above)."""
    op = tf_text.SentencepieceTokenizer(model=model, out_type=tf.int32)
    op._model_resource = _NamedSentencepieceResource(model, None)
    return op



def _sentencepiece_model_bytes(model, model_base64, owner):
    """(the serialized SentencePiece model, its path or None) from exactly one of `model`
    (bytes or a path) and `model_base64` (a layer config's copy)."""
    if (model is None) == (model_base64 is None):
        raise ConfigError(f"{owner} takes one of model= or model_base64=")
    if model_base64 is not None:
        return base64.b64decode(model_base64.encode("ascii")), None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        with open(path, "rb") as f:
            return f.read(), path
    return bytes(model), None


@keras.saving.register_keras_serializable(package="tfsent")
class SentencePieceTokenizer(_InGraphTokenizer):
    """SentencePiece with fairseq's id layout (XLM-RoBERTa), in-graph.

    The model's own normaliser and segmentation (TF Text's SentencepieceTokenizer runs the
    sentencepiece library); ids follow fairseq / Hugging Face's XLMRobertaTokenizer:
    <s>=0, <pad>=1, </s>=2, <unk>=3, piece i (i >= 3) -> i + 1, the model's own <unk>
    (piece 0) -> 3, <mask> = number of pieces + 1. Sequences are `<s> pieces </s>`.
    Invalid UTF-8 becomes U+FFFD first.

    Args:
        model: the serialized model proto (bytes), or the path of sentencepiece.bpe.model.
        max_seq_length, pad_to_max_length: as `SentenceTokenizer`.
        model_base64: the proto as base64 text instead of `model` (what `get_config` holds).
    """

    FAIRSEQ_OFFSET = 1
    lowercase = False  # recorded in export metadata, like the WordPiece tokenizer's
    strip_accents = False
    pair_separators = 2

    def __init__(self, model=None, max_seq_length=128, pad_to_max_length=True,
                 model_base64=None, **kwargs):
        super().__init__(max_seq_length, pad_to_max_length, **kwargs)
        self.model, path = _sentencepiece_model_bytes(model, model_base64,
                                                      type(self).__name__)
        try:
            self._sp = _sentencepiece_op(self.model)
            size = int(self._sp.vocab_size())
            first = self._sp.id_to_string(tf.constant([0, 1, 2])).numpy().tolist()
        except Exception as e:  # noqa: BLE001  (TF raises several kinds on a bad proto)
            raise InputError(f"not a SentencePiece model ({type(e).__name__}: {e})",
                             path=path) from None
        if first != [b"<unk>", b"<s>", b"</s>"]:
            raise InputError("not an XLM-R SentencePiece model: pieces 0-2 are "
                             f"{[p.decode('utf-8', 'replace') for p in first]}, expected "
                             "<unk> <s> </s>", path=path)
        self.num_pieces = size
        self._set_special_ids(cls_id=0, sep_id=2, pad_id=1, mask_id=size + self.FAIRSEQ_OFFSET,
                              unk_id=3)

    @property
    def vocabulary_size(self):
        """Number of ids: the pieces, fairseq's <pad> slot and <mask>."""
        return self.num_pieces + self.FAIRSEQ_OFFSET + 1

    def pieces(self, strings):
        ids = self._sp.tokenize(_replace_invalid_utf8(strings))
        return tf.where(ids == 0, self.unk_id, ids + self.FAIRSEQ_OFFSET)

    def save_files(self, directory):
        """Writes the Hugging Face tokenizer file of this tokenizer
        (sentencepiece.bpe.model)."""
        with open(os.path.join(directory, "sentencepiece.bpe.model"), "wb") as f:
            f.write(self.model)

    def _config(self):
        return {"model_base64": base64.b64encode(self.model).decode("ascii")}


@keras.saving.register_keras_serializable(package="tfsent")
class GemmaSentencePieceTokenizer(_InGraphTokenizer):
    """Gemma's SentencePiece (EmbeddingGemma, Gemma3), in-graph: the model's own ids
    (<pad>=0, <eos>=1, <bos>=2, <unk>=3; byte fallback, no dummy prefix, whitespace kept),
    sequences `<bos> pieces <eos>` as Hugging Face's GemmaTokenizer with add_bos_token and
    add_eos_token builds them: a text longer than `max_seq_length` keeps its first
    `max_seq_length - 2` pieces and still ends with <eos>. Padded with <pad>; <mask> is
    the model's `<mask>` piece when it has one, else <unk>. Invalid UTF-8 becomes U+FFFD.

    Args:
        model: the serialized model proto (bytes), or the path of tokenizer.model.
        max_seq_length, pad_to_max_length: as `SentenceTokenizer`.
        model_base64: the proto as base64 text instead of `model` (what `get_config` holds).
        hf_files: {file name: text} of the Hugging Face tokenizer files it was read from
            (`HF_TOKENIZER_FILES`), written back by `save_files` and by the exports.
        pair_restarts: pairs as `<bos> a <eos> <bos> b <eos>` (tokenizer.json's); False:
            `<bos> a <eos> b <eos>` (configs saved before 2026-11-28 load with False).
    """

    lowercase = False
    strip_accents = False
    SPECIALS = (b"<pad>", b"<eos>", b"<bos>", b"<unk>")

    def __init__(self, model=None, max_seq_length=128, pad_to_max_length=True,
                 model_base64=None, hf_files=None, pair_restarts=True, **kwargs):
        super().__init__(max_seq_length, pad_to_max_length, **kwargs)
        self.hf_files = _checked_hf_files(hf_files)
        # Pairs as tokenizer.json's template, `<bos> a <eos> <bos> b <eos>`; False: without
        # the second <bos>, what tfsent built before 2026-11-28 (`from_config` of a config
        # saved then: a cross-encoder keeps the pairs it was trained on).
        self.pair_restarts = bool(pair_restarts)
        self.model, path = _sentencepiece_model_bytes(model, model_base64,
                                                      type(self).__name__)
        try:
            self._sp = _sentencepiece_op(self.model)
            self.num_pieces = int(self._sp.vocab_size())
            first = self._sp.id_to_string(tf.constant([0, 1, 2, 3])).numpy().tolist()
            mask = int(self._sp.string_to_id(tf.constant("<mask>")).numpy())
        except Exception as e:  # noqa: BLE001  (TF raises several kinds on a bad proto)
            raise InputError(f"not a SentencePiece model ({type(e).__name__}: {e})",
                             path=path) from None
        if tuple(first) != self.SPECIALS:
            raise InputError("not a Gemma SentencePiece model: pieces 0-3 are "
                             f"{[p.decode('utf-8', 'replace') for p in first]}, expected "
                             "<pad> <eos> <bos> <unk>", path=path)
        self._set_special_ids(cls_id=2, sep_id=1, pad_id=0, mask_id=mask, unk_id=3)

    @property
    def vocabulary_size(self):
        """Number of ids: the model's pieces."""
        return self.num_pieces

    def pieces(self, strings):
        return self._sp.tokenize(_replace_invalid_utf8(strings))

    def save_files(self, directory):
        """Writes the Hugging Face tokenizer files of this tokenizer (tokenizer.model and
        the kept tokenizer.json / tokenizer_config.json / special_tokens_map.json)."""
        with open(os.path.join(directory, "tokenizer.model"), "wb") as f:
            f.write(self.model)
        _write_hf_files(self.hf_files, directory)

    def _config(self):
        return {"model_base64": base64.b64encode(self.model).decode("ascii"),
                "hf_files": dict(self.hf_files), "pair_restarts": self.pair_restarts}

    @classmethod
    def from_config(cls, config):
        return cls(**{"pair_restarts": False, **config})  # saved before it was recorded


def longest_first_lengths(len_a, len_b, budget):
    """How many pieces of each text of a pair Hugging Face's `longest_first` truncation
    keeps, for (B,) piece counts and a budget of `budget` pieces in all: nothing is cut when
    both fit; else a text no longer than half the budget is kept whole and the other fills
    the rest; else both get half (the longer text the odd piece; the second one on a
    tie)."""
    len_a, len_b = tf.cast(len_a, tf.int64), tf.cast(len_b, tf.int64)
    budget = tf.constant(budget, tf.int64)
    short, long = tf.minimum(len_a, len_b), tf.maximum(len_a, len_b)
    halves = 2 * short > budget
    short_kept = tf.where(halves, budget // 2, short)
    long_kept = tf.where(halves, budget - budget // 2, budget - short)
    a_longer = len_a > len_b
    fits = len_a + len_b <= budget
    keep_a = tf.where(fits, len_a, tf.where(a_longer, long_kept, short_kept))
    keep_b = tf.where(fits, len_b, tf.where(a_longer, short_kept, long_kept))
    return keep_a, keep_b


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e.msg}", path=path, line=e.lineno) from None
