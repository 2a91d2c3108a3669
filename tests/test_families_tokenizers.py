"""In-graph tokenizers of every encoder family against Hugging Face's tokenizers, on the demo
corpus and hard cases, from the files of the tiny checkpoints (tests/hf_checkpoints.py)."""

import pytest
import tensorflow as tf

from hf_checkpoints import FAMILIES, demo_corpus, hf_tokenizer
from tfsent.encoders.huggingface import make_tokenizer
from tfsent.encoders.tokenizers import (ByteBPETokenizer, SentencePieceTokenizer,
                                        SentenceTokenizer)
from tfsent.errors import InputError

MAX_LEN = 32

HARD_CASES = [
    # accents, case, compatibility forms
    "Café crème à la française, naïve résumé", "Ångström Zürich ÉCOLE", "e\u0301 combining",
    "ﬁ ligature", "ｆｕｌｌｗｉｄｔｈ", "İstanbul", "ΣΟΦΟΣ Σ ς", "Straße ß",
    # emoji, CJK, other scripts
    "emoji 😀🎉 party 👍🏽", "東京は日本の首都です。", "北京是中国的首都", "서울은 한국의 수도입니다.",
    "Ελληνικά και русский язык", "\U0001F600x", "x\u0378y\ue000z",
    # control and format characters, unusual whitespace
    "ctrl\x00\x07char", "a\x0cb a\x0bb", "tab\tand\nnewline\r\n", "\u200bzero width",
    "nbsp\xa0here", "x\u3000y", "a\u2028b", "a \u1680 b", "x\x1cy", "soft\xadhyphen",
    "deva ६ digit",
    # leading / trailing / repeated spaces, contractions
    " leading space", "  two leading", "trailing  ", "multiple   spaces here", "a \n\n b",
    "x \xa0 y", "'s start", "it's we're I'll IT'S", "  's a  'sup", "", "   ",
    # long text: truncation, and a 150-character word
    "word " * 60, "x" * 150, "é" * 120 + " ok",
]
INVALID_UTF8 = [b"bad \xff utf8", b"trunc \xe6\x97", b"\xed\xa0\x80 surrogate", b"ok\xc3\x28x",
                b"\xf0\x9f\x98"]
# Hugging Face's fast XLM-R tokenizer (tokenizer.json built from the sentencepiece model)
# splits on Unicode whitespace before the model, and U+0085 (NEL) is whitespace to it but
# not to sentencepiece; tfsent runs sentencepiece itself, so it follows the slow tokenizer.
XLMR_FAST_DIFFERS = {"\x85"}


def _inputs():
    texts = demo_corpus() + HARD_CASES + ["a \x85b"]
    return [t.encode("utf-8") for t in texts] + INVALID_UTF8


def _tfsent_ids(tokenizer, inputs, graph=True):
    """Real token ids per input; in a tf.function (as training and serving run it), or
    eagerly for a handful of inputs (no tracing cost)."""
    call = tf.function(lambda x: tokenizer(x)) if graph else tokenizer
    out = call(tf.constant(inputs))
    ids, mask = out["token_ids"].numpy(), out["padding_mask"].numpy()
    return [row[m == 1].tolist() for row, m in zip(ids, mask)]


@pytest.fixture(scope="module")
def tokenizers_by_family(hf_checkpoint_dirs):
    return {family: make_tokenizer(family, path, MAX_LEN, False, 10 ** 6)
            for family, path in hf_checkpoint_dirs.items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_ids_equal_hugging_face(family, hf_checkpoint_dirs, tokenizers_by_family):
    reference = hf_tokenizer(hf_checkpoint_dirs[family])
    inputs = _inputs()
    ours = _tfsent_ids(tokenizers_by_family[family], inputs)
    differ = []
    for raw, got in zip(inputs, ours):
        text = raw.decode("utf-8", "replace")
        want = reference(text, truncation=True, max_length=MAX_LEN)["input_ids"]
        if got != want:
            differ.append(text)
    if family == "xlm-roberta":
        assert differ == [t for t in differ if set(t) & XLMR_FAST_DIFFERS] and differ, differ
    else:
        assert differ == []
    assert any(len(ids) == MAX_LEN for ids in ours)  # truncation was exercised


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_of_only_empty_strings(family, hf_checkpoint_dirs, tokenizers_by_family):
    """A batch with no text at all (no word to merge or look up) still gives each row the
    family's special tokens, as Hugging Face does (RoBERTa's byte-level BPE once failed)."""
    reference = hf_tokenizer(hf_checkpoint_dirs[family])
    want = reference("", truncation=True, max_length=MAX_LEN)["input_ids"]
    assert _tfsent_ids(tokenizers_by_family[family], [b"", b""], graph=False) == [want, want]


def test_xlmr_equals_sentencepiece_library(hf_checkpoint_dirs, tokenizers_by_family):
    """Against the sentencepiece library with fairseq's id layout (what Hugging Face's slow
    XLMRobertaTokenizer computes): identical everywhere, U+0085 included."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(
        model_file=f"{hf_checkpoint_dirs['xlm-roberta']}/sentencepiece.bpe.model")
    inputs = _inputs()
    ours = _tfsent_ids(tokenizers_by_family["xlm-roberta"], inputs)
    for raw, got in zip(inputs, ours):
        pieces = [i + 1 if i else 3 for i in sp.encode(raw.decode("utf-8", "replace"))]
        assert got == [0] + pieces[:MAX_LEN - 2] + [2], raw


@pytest.mark.parametrize("family", FAMILIES)
def test_special_token_strings_are_text(family, hf_checkpoint_dirs, tokenizers_by_family,
                                        tmp_path):
    """A special token's string inside the text is text to tfsent: the same ids as Hugging
    Face with split_special_tokens=True (without it, HF maps the string to the special id)."""
    reference = hf_tokenizer(hf_checkpoint_dirs[family])
    texts = ["a <mask> b <s> c </s>", "a [MASK] b [CLS] [SEP] [PAD]"]
    ours = _tfsent_ids(tokenizers_by_family[family], [t.encode() for t in texts], graph=False)
    for text, got in zip(texts, ours):
        if family == "xlm-roberta":  # HF's fast XLM-R ignores split_special_tokens
            import sentencepiece as spm

            sp = spm.SentencePieceProcessor(
                model_file=f"{hf_checkpoint_dirs[family]}/sentencepiece.bpe.model")
            want = [0] + [i + 1 if i else 3 for i in sp.encode(text)] + [2]
        else:
            want = reference(text, split_special_tokens=True)["input_ids"]
        assert got == want
    special = texts[0] if family in ("roberta", "xlm-roberta") else texts[1]
    assert reference(special)["input_ids"] != ours[texts.index(special)]
    # The tokenizer files tfsent exports set split_special_tokens: transformers, loading
    # them with no option, tokenizes such text as tfsent does (XLM-R's fast tokenizer
    # ignores the setting: it keeps mapping the strings to the special ids).
    from tfsent.encoders.huggingface.writing import write_tokenizer_files

    write_tokenizer_files(tokenizers_by_family[family], str(tmp_path), family, MAX_LEN)
    exported = hf_tokenizer(str(tmp_path))
    for text, got in zip(texts, ours):
        if family != "xlm-roberta":
            assert exported(text)["input_ids"] == got, text
    assert (exported(special)["input_ids"] == ours[texts.index(special)]) == (
        family != "xlm-roberta")


@pytest.mark.parametrize("family", FAMILIES)
def test_special_ids_and_layout(family, hf_checkpoint_dirs, tokenizers_by_family):
    tok = tokenizers_by_family[family]
    ref = hf_tokenizer(hf_checkpoint_dirs[family])
    assert (tok.cls_id, tok.sep_id, tok.pad_id, tok.mask_id, tok.unk_id) == (
        ref.cls_token_id, ref.sep_token_id, ref.pad_token_id, ref.mask_token_id,
        ref.unk_token_id)
    assert tok.vocabulary_size == len(ref)
    assert set(tok.special_ids) == {ref.cls_token_id, ref.sep_token_id, ref.pad_token_id,
                                    ref.mask_token_id, ref.unk_token_id}
    padded = tok.with_options(pad_to_max_length=True, max_seq_length=12)(["a b", ""])
    assert padded["token_ids"].shape == (2, 12)
    assert padded["token_ids"].numpy()[1].tolist() == [tok.cls_id, tok.sep_id] + [tok.pad_id] * 10
    assert padded["padding_mask"].numpy()[1].tolist() == [1, 1] + [0] * 10
    # Token types only where the family has them (BERT).
    assert ("segment_ids" in padded) == (family == "bert")


@pytest.mark.parametrize("family", FAMILIES)
def test_config_and_files_round_trip(family, tokenizers_by_family, tmp_path):
    tok = tokenizers_by_family[family]
    texts = [t.encode() for t in HARD_CASES[:12]]
    want = _tfsent_ids(tok, texts, graph=False)
    again = type(tok).from_config(tok.get_config())
    assert _tfsent_ids(again, texts, graph=False) == want
    tok.save_files(str(tmp_path))
    reread = make_tokenizer(family, str(tmp_path), MAX_LEN, False, 10 ** 6)
    assert _tfsent_ids(reread, texts, graph=False) == want
    short = tok.with_options(max_seq_length=5)
    assert max(len(ids) for ids in _tfsent_ids(short, texts, graph=False)) == 5


def test_bad_tokenizer_files_name_the_file(hf_checkpoint_dirs, tmp_path):
    import json
    import shutil

    src = hf_checkpoint_dirs["roberta"]
    vocab = json.load(open(f"{src}/vocab.json", encoding="utf-8"))
    del vocab["Ġ"]  # a byte symbol
    json.dump(vocab, open(tmp_path / "vocab.json", "w", encoding="utf-8"))
    shutil.copy(f"{src}/merges.txt", tmp_path / "merges.txt")
    with pytest.raises(InputError, match="vocab.json.*256 byte symbols"):
        ByteBPETokenizer(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    (tmp_path / "merges.txt").write_text("#version: 0.2\nq z\n", encoding="utf-8")
    vocab = json.load(open(f"{src}/vocab.json", encoding="utf-8"))
    with pytest.raises(InputError, match="merges.txt.*'q z'"):
        ByteBPETokenizer(vocab, str(tmp_path / "merges.txt"))
    (tmp_path / "sentencepiece.bpe.model").write_bytes(b"not a proto")
    with pytest.raises(InputError, match="sentencepiece.bpe.model.*not a SentencePiece model"):
        SentencePieceTokenizer(str(tmp_path / "sentencepiece.bpe.model"))
    with pytest.raises(InputError, match="vocabulary has no \\[MASK\\]"):
        SentenceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"])


def test_vocab_txt_byte_for_byte_unchanged_by_save(hf_checkpoint_dirs, tokenizers_by_family,
                                                    tmp_path):
    """save_files writes the Hugging Face files back (WordPiece: the same vocab.txt)."""
    tokenizers_by_family["bert"].save_files(str(tmp_path))
    original = open(f"{hf_checkpoint_dirs['bert']}/vocab.txt", encoding="utf-8").read()
    assert (tmp_path / "vocab.txt").read_text(encoding="utf-8") == original
    tokenizers_by_family["xlm-roberta"].save_files(str(tmp_path))
    model = open(f"{hf_checkpoint_dirs['xlm-roberta']}/sentencepiece.bpe.model", "rb").read()
    assert (tmp_path / "sentencepiece.bpe.model").read_bytes() == model
