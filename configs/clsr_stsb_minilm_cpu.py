"""CLSR-STSB on frozen minilm-l6 (an SBERT-like base, the paper's Table 1 setting), on a CPU.

Batch 256 rather than 512: STS-B train has ~1.1k pairs with score > 4, and every batch
drops its remainder.
"""


def get_config():
    return {
        "method": "clsr",
        "encoder": "minilm-l6",
        "pooling": "mean",
        "train_data": "stsb",
        "eval_data_dir": "../shared/data",
        "eval_data": "stsb",
        "clsr_head_init": "random",         # e starts random, as in the paper
        "temperature": 0.1,
        "optimizer": "lars",
        "learning_rate": 0.5,
        "weight_decay": 1e-4,
        "lr_schedule": "cosine",
        "warmup_ratio": 0.1,
        "batch_size": 256,
        "max_seq_length": 128,
        "steps": 2000,
        "eval_every": 500,
        "steps_per_execution": 50,
        "test_tasks": "STS12,STSBenchmark,SICKRelatedness",
    }
