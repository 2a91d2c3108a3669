"""Rerankers that read a (query, document) pair through a chat prompt and answer "yes" or
"no" (docs/methods.md, "Cross-encoder": "Prompted rerankers"): Qwen3-Reranker.

Such a reranker is a causal language model (Qwen3ForCausalLM, the same files as a base
model or Qwen3-Embedding: a folder cannot tell them apart, so the prompt is an explicit
option). Its model card scores a pair as follows: the fixed prefix (system message, user
turn opened) and suffix (user turn closed, assistant turn opened, an empty thinking block)
are tokenized once with special tokens split out; the middle,
`<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>: {document}`, is tokenized as one
text and cut at its end to what the prefix and suffix leave of the length limit; the score
is P(yes) = softmax over the LM's (no, yes) logits at the last position.

tfsent runs it as a cross-encoder: the tokenizer's `pair_prompt` builds that input in the
graph (`tokenizers._InGraphTokenizer.tokenize_pairs`), the pooling is the last token, and the
score head is a Dense(1) without bias (as an LM head) whose kernel starts as E[yes] - E[no]
(the LM head's rows; the token embeddings when tied). Its logit is log P(yes) - log P(no), so
sigmoid(score) is the model card's P(yes) and the order of the documents is the same.
"""

import json
import re
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from tfsent.errors import ConfigError


class PairPrompt(NamedTuple):
    """A reranker's prompt: `prefix + middle + suffix`, `middle` with the {instruction},
    {query} and {document} fields; `special_tokens`, the added tokens its prefix and suffix
    hold (split out as single ids, as Hugging Face's tokenizers do); `answers`, the
    (positive, negative) answer tokens the score contrasts."""
    prefix: str
    middle: str
    suffix: str
    default_instruction: str
    special_tokens: tuple
    answers: tuple


PAIR_PROMPTS = {
    # Qwen3-Reranker's model card (0.6B / 4B / 8B share it).
    "qwen3_reranker": PairPrompt(
        prefix="<|im_start|>system\nJudge whether the Document meets the requirements based "
               "on the Query and the Instruct provided. Note that the answer can only be "
               "\"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n",
        middle="<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}",
        suffix="<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        default_instruction="Given a web search query, retrieve relevant passages that "
                            "answer the query",
        special_tokens=("<|im_start|>", "<|im_end|>", "<think>", "</think>"),
        answers=("yes", "no")),
}
PROMPT_NAMES = tuple(PAIR_PROMPTS)


def get_prompt(name, option="prompt"):
    """The PairPrompt called `name` (ConfigError naming `option` and the choices)."""
    if name not in PAIR_PROMPTS:
        raise ConfigError(f"{option}={name!r}: no such reranker prompt; prompts: "
                          f"{', '.join(PROMPT_NAMES)}")
    return PAIR_PROMPTS[name]


def _vocabulary(tokenizer, prompt, name):
    """The tokenizer's {token: id}, holding the prompt's special and answer tokens."""
    vocabulary = getattr(tokenizer, "vocabulary", None)
    if not isinstance(vocabulary, dict):
        raise ConfigError(f"prompt={name!r} runs on a byte-level BPE tokenizer (Qwen3's); "
                          f"this encoder's is a {type(tokenizer).__name__}")
    missing = [t for t in prompt.special_tokens + prompt.answers if t not in vocabulary]
    if missing:
        raise ConfigError(f"prompt={name!r}: the tokenizer has no token {missing[0]!r} "
                          f"(its prompt needs {', '.join(prompt.special_tokens)} and the "
                          f"answers {', '.join(prompt.answers)}): not a Qwen3 chat "
                          "vocabulary")
    return vocabulary


def text_ids(tokenizer, text, special_tokens):
    """Ids of `text` as Hugging Face's tokenizers give them without a template: each of
    `special_tokens` one id, the text between them through the tokenizer's pieces."""
    vocabulary = tokenizer.vocabulary
    pattern = "(" + "|".join(re.escape(t) for t in sorted(special_tokens, key=len,
                                                           reverse=True)) + ")"
    ids = []
    for part in re.split(pattern, text):
        if part in special_tokens:
            ids.append(vocabulary[part])
        elif part:
            ids.extend(int(i) for i in tokenizer.pieces(tf.constant([part]))[0].numpy())
    return ids


def pair_prompt_config(tokenizer, name, instruction=None):
    """The tokenizer's `pair_prompt` (prefix ids, the three middle texts, suffix ids) of
    the prompt `name` with `instruction` (None or "": the prompt's default)."""
    prompt = get_prompt(name)
    _vocabulary(tokenizer, prompt, name)
    instruction = instruction or prompt.default_instruction
    if "{query}" in instruction or "{document}" in instruction:
        raise ConfigError("instruction: a task description; the query and the document "
                          "take their own places in the prompt")
    middle = prompt.middle.replace("{instruction}", instruction)
    before, rest = middle.split("{query}")
    between, after = rest.split("{document}")
    prefix = text_ids(tokenizer, prompt.prefix, prompt.special_tokens)
    suffix = text_ids(tokenizer, prompt.suffix, prompt.special_tokens)
    # The middle's own text (with the instruction) is cut with the query and document:
    # counted here so that a length it fills is refused, not every pair scored alike.
    own = sum(len(text_ids(tokenizer, text, prompt.special_tokens))
              for text in (before, between, after))
    return {"name": name, "instruction": instruction, "prefix_ids": prefix,
            "texts": [before, between, after], "suffix_ids": suffix,
            "min_length": len(prefix) + len(suffix) + own + 2}


def answer_ids(tokenizer, name):
    """(positive, negative) answer token ids of the prompt `name`."""
    prompt = get_prompt(name)
    vocabulary = _vocabulary(tokenizer, prompt, name)
    return tuple(vocabulary[t] for t in prompt.answers)


def lm_head_table(encoder, name="prompt", rows=None):
    """(V, H) float32: the LM head of the encoder's backbone (`token_embedding`: its
    reverse embeddings when the checkpoint has its own lm_head, else the tied token
    embeddings); `rows`: only those token ids' rows, (len(rows), H), gathered before
    anything leaves the variable (a real vocabulary's table is ~150k rows)."""
    layer = getattr(encoder.backbone, "token_embedding", None)
    if layer is None:
        raise ConfigError(f"{name}: the {encoder.family} backbone has no token embedding "
                          "to read the LM head from")
    if getattr(layer, "reverse_embeddings", None) is not None and not layer.tie_weights:
        table = keras.ops.transpose(layer.reverse_embeddings)
    else:
        table = layer.embeddings
    if rows is not None:
        table = keras.ops.take(table, list(rows), axis=0)
    return np.asarray(keras.ops.convert_to_numpy(table), np.float32)


def answer_head_kernel(encoder, name):
    """(H, 1) float32: the LM head's row of the prompt's positive answer minus its negative
    one's (`lm_head_table`)."""
    yes, no = lm_head_table(encoder, f"prompt={name!r}",
                            rows=answer_ids(encoder.tokenizer, name))
    return (yes - no)[:, None]


def chat_template(pair_prompt):
    """The Jinja chat template that renders a tokenizer's `pair_prompt` for the messages of
    a pair with the roles "query" and "document" (sentence-transformers' CrossEncoder
    passes a pair so to a causal LM; content a string or a list of text parts): the
    prompt's prefix, its middle with the instruction, the suffix. The fixed text is written
    as Jinja string literals (JSON's escapes, which Jinja decodes), so no block trimming
    touches its line breaks."""
    prompt = get_prompt(pair_prompt["name"])
    before, between, after = pair_prompt["texts"]
    literal = [prompt.prefix + before, between, after + prompt.suffix]

    def raw(text):
        return "{{ " + json.dumps(text, ensure_ascii=False) + " }}" if text else ""

    return ("{%- set ns = namespace(query='', document='') -%}\n"
            "{%- for message in messages -%}\n"
            "{%- if message.content is string -%}{%- set text = message.content -%}\n"
            "{%- else -%}{%- set text = message.content | selectattr('type', 'eq', 'text')"
            " | map(attribute='text') | join('') -%}{%- endif -%}\n"
            "{%- if message.role == 'query' -%}{%- set ns.query = text -%}\n"
            "{%- elif message.role == 'document' -%}{%- set ns.document = text -%}"
            "{%- endif -%}\n"
            "{%- endfor -%}\n"
            + raw(literal[0]) + "{{ ns.query }}" + raw(literal[1]) + "{{ ns.document }}"
            + raw(literal[2]))
