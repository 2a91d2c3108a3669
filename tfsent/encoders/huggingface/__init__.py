"""Hugging Face and sentence-transformers directories: reading them into keras-hub backbones
and tfsent tokenizers (every file checked, errors naming the file), and writing a backbone's
config and weights back under Hugging Face's names. One module per file a checkpoint holds:

  config.py                 config.json: `read_hf_config`, `backbone_config` (-> keras-hub),
                            `hf_config` (<- a backbone), `checked_family`, `read_json`
  weights.py                model.safetensors (or a sharded index): `load_weights`,
                            `read_mlm_head`, `hf_state_dict` (<- a backbone)
  tokenizer_files.py        the tokenizer files: `make_tokenizer`, `tokenizer_settings`,
                            `read_hf_tokenizer_files`
  sentence_transformers.py  modules.json and its modules: `read_sentence_transformers`
  writing.py                the files written back: `write_hf_model` (config.json +
                            model.safetensors), `write_tokenizer_files`, `write_transformer`
  decoders.py               config.json and model.safetensors of the families keras-hub
                            runs (qwen3, gemma3): the inverse of keras-hub's converters

Families (config.json `model_type`): bert, roberta, xlm-roberta, distilbert; what differs
between them (field names, token types, position offset, weight names) is
`tfsent.encoders.families.TABLE`'s. Loading puts these together (`tfsent.encoders.loading`);
`tfsent.formats` stages and places what `writing.py` writes.
"""

from tfsent.encoders.huggingface.config import (HF_ACTIVATIONS, backbone_config,
                                                check_keras_hub_fixed, checked_family, hf_config,
                                                keras_hub_overrides, position_offset,
                                                read_hf_config, read_json,
                                                unsupported_family_message)
from tfsent.encoders.huggingface.sentence_transformers import (ST_CONFIG_FILE, check_truncate_dim,
                                                               read_sentence_transformers)
from tfsent.encoders.huggingface.tokenizer_files import (make_tokenizer,
                                                         read_hf_tokenizer_files,
                                                         tokenizer_settings)
from tfsent.encoders.huggingface.weights import (SAFETENSORS_FILE, SAFETENSORS_INDEX,
                                                 SafetensorsCheckpoint, hf_state_dict,
                                                 load_weights, pooler_specs,
                                                 read_classification_head, read_mlm_head,
                                                 weight_specs)

__all__ = ["HF_ACTIVATIONS", "backbone_config", "check_keras_hub_fixed", "checked_family",
           "keras_hub_overrides", "hf_config",
           "position_offset", "read_hf_config", "read_json", "unsupported_family_message",
           "read_sentence_transformers", "ST_CONFIG_FILE", "check_truncate_dim",
           "make_tokenizer", "read_hf_tokenizer_files",
           "tokenizer_settings",
           "SAFETENSORS_FILE", "SAFETENSORS_INDEX", "SafetensorsCheckpoint", "hf_state_dict",
           "load_weights", "pooler_specs", "read_classification_head", "read_mlm_head",
           "weight_specs"]
