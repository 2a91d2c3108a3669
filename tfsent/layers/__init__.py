"""Layers of tfsent's methods (heads and auxiliary networks)."""

from tfsent.layers.augment import Augmentation
from tfsent.layers.cmlm import Fusioner, LexicalExtractor
from tfsent.layers.heads import MLPEncoder
from tfsent.layers.projector import Projector

__all__ = ["Augmentation", "Fusioner", "LexicalExtractor", "MLPEncoder", "Projector"]
