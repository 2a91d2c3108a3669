"""Unsupervised SimCSE from minilm-l6 on a CPU (the run reported in docs/results.md).

minilm-l6 is already a mean-pooled sentence encoder, so training and export keep `mean`
pooling (switching to [CLS] would throw its training away).
"""


def get_config():
    return {
        "method": "simcse_unsup",
        "encoder": "minilm-l6",
        "pooling": "mean",
        "train_data": "../shared/data/wiki/wiki1m_prefix.txt",
        "max_seq_length": 32,
        "batch_size": 64,
        "steps": 150,
        "eval_every": 50,
        "learning_rate": 3e-5,
        "temperature": 0.05,
        "eval_data": "stsb",
        "eval_data_dir": "../shared/data",
        "test_tasks": "STS12,STSBenchmark,SICKRelatedness",
    }
