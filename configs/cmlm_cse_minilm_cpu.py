"""CMLM-CSE from minilm-l6 on a CPU (the run reported in docs/results.md).

(extractor, fusion) = (4, 2): the paper's 8-3 on 12 layers keeps two thirds of the encoder
as the frozen extractor and a fusioner a quarter as deep; on the 6-layer MiniLM that is 4
extractor layers and 2 fusion blocks (docs/methods.md "CMLM-CSE": the same), which also keeps
the auxiliary network cheap on a CPU. minilm-l6 is a mean-pooled sentence encoder, so the
sentence embedding h is mean-pooled. mlm_weight is lambda on tfsent's mean scale (both
losses averaged, where the paper sums them): 0.005 here is the paper's lambda 0.0018 (x 2.84
masked tokens per sentence on wiki1m at p 0.15); see configs/cmlm_cse.py.
"""


def get_config():
    return {
        "method": "cmlm_cse",
        "encoder": "minilm-l6",
        "pooling": "mean",
        "train_data": "../shared/data/wiki/wiki1m_prefix.txt",
        "max_seq_length": 32,
        "batch_size": 64,
        "steps": 150,
        "eval_every": 50,
        "learning_rate": 3e-5,
        "temperature": 0.05,
        "extractor_layers": 4,
        "fusion_layers": 2,
        "mask_rate": 0.15,
        "mlm_weight": 0.005,
        "eval_data": "stsb",
        "eval_data_dir": "../shared/data",
        "test_tasks": "STS12,STSBenchmark,SICKRelatedness",
    }
