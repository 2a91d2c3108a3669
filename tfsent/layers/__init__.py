"""Layers of tfsent's methods (heads and auxiliary networks)."""

from tfsent.layers.cmlm import Fusioner, LexicalExtractor

__all__ = ["Fusioner", "LexicalExtractor"]
