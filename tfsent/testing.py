"""Helpers for tests and smoke runs: tiny randomly initialised encoders."""

import keras
import keras_hub

from tfsent.encoders import SentenceEncoder, SentenceTokenizer


def tiny_encoder(vocabulary, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32,
                 max_seq_length=16, pooling="mean", dropout=0.1, seed=0, lowercase=True):
    """A small randomly initialised BERT `SentenceEncoder` (tests, smoke runs)."""
    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(vocabulary), num_layers=num_layers, num_heads=num_heads,
        hidden_dim=hidden_dim, intermediate_dim=intermediate_dim, dropout=dropout,
        max_sequence_length=max(64, max_seq_length))
    tokenizer = SentenceTokenizer(vocabulary, lowercase, lowercase, max_seq_length)
    return SentenceEncoder(backbone, tokenizer, pooling, "gelu", seed)
