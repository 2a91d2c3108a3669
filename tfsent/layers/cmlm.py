"""CMLM-CSE's auxiliary network: a frozen lexical extractor and a trainable fusioner."""

import keras
import keras_hub
import tensorflow as tf
from absl import logging

from tfsent.encoders.encoder_dir import backbone_config as backbone_config_of
from tfsent.encoders.families import TABLE, UNRECORDED_FAMILY
from tfsent.encoders.keras_hub_adapter import make_backbone
from tfsent.encoders.model import SentenceEncoder
from tfsent.errors import ConfigError


@keras.saving.register_keras_serializable(package="tfsent")
class LexicalExtractor(keras.layers.Layer):
    """Embeddings + the first `num_layers` transformer layers of the initial encoder, frozen.

    Build it with `LexicalExtractor.from_encoder(encoder, k)` before training starts: it
    copies the encoder's weights into a backbone of the same family (BERT, RoBERTa, XLM-R,
    DistilBERT) with k layers, so later updates to the encoder do not reach it. It owns
    no trainable variable, runs in inference mode (no dropout: its features are a fixed
    function of the masked input) and stops gradients at its output.
    Call: `{"token_ids", "padding_mask"}` -> last hidden states (B, L, H).

    Args:
        backbone_config: the keras-hub backbone config of the source encoder.
        num_layers: k, the number of transformer layers kept.
        activation: feed-forward activation name of the source encoder.
        family: the source encoder's family (`UNRECORDED_FAMILY` for configs saved before
            families).
    """

    def __init__(self, backbone_config, num_layers, activation="gelu",
                 family=UNRECORDED_FAMILY, **kwargs):
        super().__init__(**kwargs)
        if not 1 <= num_layers <= backbone_config["num_layers"]:
            raise ConfigError(f"extractor_layers must be in [1, {backbone_config['num_layers']}]"
                              f", got {num_layers}")
        self.backbone_config = dict(backbone_config)
        self.num_layers = int(num_layers)
        self.activation = activation
        self.family = family
        config = dict(backbone_config, num_layers=self.num_layers)
        backbone = make_backbone(family, config)
        self.encoder = SentenceEncoder(backbone, None, "cls_before_pooler", activation)
        self.encoder.trainable = False
        self.trainable = False

    @classmethod
    def from_encoder(cls, encoder, num_layers):
        """A frozen copy of `encoder`'s embeddings and first `num_layers` layers."""
        layer = cls(backbone_config_of(encoder.backbone), num_layers, encoder.activation,
                    encoder.family, dtype=encoder.backbone.dtype_policy)
        src, dst = encoder.backbone, layer.encoder.backbone
        for sub in dst.layers:  # same names in both: embeddings, norms, transformer_layer_i
            if sub.weights:
                sub.set_weights(src.get_layer(sub.name).get_weights())
        return layer

    def call(self, inputs):
        out = self.encoder(inputs, training=False)["sequence_output"]
        return tf.stop_gradient(out)

    def get_config(self):
        config = super().get_config()
        config.update({"backbone_config": self.backbone_config, "num_layers": self.num_layers,
                       "activation": self.activation, "family": self.family})
        return config


@keras.saving.register_keras_serializable(package="tfsent")
class Fusioner(keras.layers.Layer):
    """`num_layers` fresh transformer blocks + a BERT MLM head, predicting masked tokens.

    Call: `(h2, padding_mask, mask_positions, embedding_matrix=None, training)` where h2
    (B, L, H) is [h ; h'[:, 1:]]; returns logits (B, P, V) at the P `mask_positions`.
    The head is Dense(H) + GELU + LayerNorm, then the vocabulary projection: tied to the
    encoder's token embedding (`embedding_matrix` (V, H), plus a bias) when
    `tie_embeddings`, else its own Dense(V). `init_mlm_head(encoder)` starts the head from
    the encoder checkpoint's own MLM head when it has one (Hugging Face *ForMaskedLM
    checkpoints of every family do), else it stays freshly initialised; either is logged.

    Args:
        vocabulary_size, hidden_dim, num_heads, intermediate_dim: sizes (the encoder's).
        num_layers: n, number of fresh transformer blocks (3 in the paper).
        dropout: dropout inside the blocks.
        tie_embeddings: share the vocabulary projection with the token embedding.
        layer_norm_epsilon: epsilon of the head's LayerNorm (the checkpoint family's when its
            head is loaded).
    """

    def __init__(self, vocabulary_size, hidden_dim, num_heads, intermediate_dim, num_layers=3,
                 dropout=0.1, tie_embeddings=True, layer_norm_epsilon=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.hidden_dim = int(hidden_dim)
        self.num_heads = int(num_heads)
        self.intermediate_dim = int(intermediate_dim)
        self.num_layers = int(num_layers)
        self.dropout = float(dropout)
        self.tie_embeddings = bool(tie_embeddings)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        init = keras.initializers.TruncatedNormal(stddev=0.02)
        self.blocks = [
            keras_hub.layers.TransformerEncoder(
                intermediate_dim=intermediate_dim, num_heads=num_heads, dropout=dropout,
                activation="gelu", layer_norm_epsilon=1e-12, kernel_initializer=init,
                dtype=self.dtype_policy, name=f"fusion_block_{i}")
            for i in range(self.num_layers)]
        self.transform = keras.layers.Dense(hidden_dim, activation="gelu", kernel_initializer=init,
                                            dtype=self.dtype_policy, name="mlm_transform")
        self.layer_norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon,
                                                          dtype=self.dtype_policy,
                                                          name="mlm_layer_norm")
        if not self.tie_embeddings:
            self.projection = keras.layers.Dense(vocabulary_size, kernel_initializer=init,
                                                 dtype=self.dtype_policy, name="mlm_projection")

    def build(self, input_shape=None):
        shape = (None, None, self.hidden_dim)
        for block in self.blocks:
            block.build(shape)
        self.transform.build(shape)
        self.layer_norm.build(shape)
        if self.tie_embeddings:
            self.output_bias = self.add_weight(name="mlm_output_bias",
                                               shape=(self.vocabulary_size,),
                                               initializer="zeros")
        else:
            self.projection.build(shape)
        self.built = True

    def init_mlm_head(self, encoder):
        """Copies `encoder.mlm_head` (the checkpoint's MLM head: transform Dense, LayerNorm,
        output bias) into this head when there is one and the projection is tied; logs
        which head is used. Returns True when the checkpoint's head was loaded."""
        head = encoder.mlm_head
        if head is None:
            logging.info("CMLM-CSE: new MLM head (the %s checkpoint has none)", encoder.family)
            return False
        if not self.tie_embeddings:
            logging.info("CMLM-CSE: new MLM head (the checkpoint's head has a tied projection; "
                         "tie_mlm_embeddings is False)")
            return False
        self.transform.kernel.assign(head["kernel"])
        self.transform.bias.assign(head["bias"])
        self.layer_norm.gamma.assign(head["gamma"])
        self.layer_norm.beta.assign(head["beta"])
        self.output_bias.assign(head["output_bias"])
        self.layer_norm_epsilon = TABLE[encoder.family].layer_norm_epsilon
        self.layer_norm.epsilon = self.layer_norm_epsilon
        logging.info("CMLM-CSE: MLM head from the %s checkpoint", encoder.family)
        return True

    def call(self, h2, padding_mask, mask_positions, embedding_matrix=None, training=False):
        x = h2
        for block in self.blocks:
            x = block(x, padding_mask=padding_mask, training=training)
        x = tf.gather(x, mask_positions, batch_dims=1)  # (B, P, H): only where needed
        x = self.layer_norm(self.transform(x))
        if self.tie_embeddings:
            if embedding_matrix is None:
                raise ConfigError("Fusioner with tie_embeddings needs embedding_matrix")
            logits = tf.einsum("bph,vh->bpv", x, tf.cast(embedding_matrix, x.dtype))
            return tf.cast(logits, tf.float32) + self.output_bias
        return tf.cast(self.projection(x), tf.float32)

    def get_config(self):
        config = super().get_config()
        config.update({"vocabulary_size": self.vocabulary_size, "hidden_dim": self.hidden_dim,
                       "num_heads": self.num_heads, "intermediate_dim": self.intermediate_dim,
                       "num_layers": self.num_layers, "dropout": self.dropout,
                       "tie_embeddings": self.tie_embeddings,
                       "layer_norm_epsilon": self.layer_norm_epsilon})
        return config
