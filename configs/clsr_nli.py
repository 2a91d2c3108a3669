"""CLSR-NLI, the paper's setting: entailment pairs of SNLI + MNLI as positives.

The paper trains on SNLI+MNLI; with TFDS here `multi_nli` (or point train_data at a
directory/jsonl). Epoch count: the paper trains "up to 2000 epochs" on STS-B; NLI is ~300x
larger, so this recipe uses far fewer passes (an assumption, not the paper's figure).
"""


def get_config():
    return {
        "method": "clsr",
        "encoder": "bert_base_en_uncased",
        "pooling": "mean",
        "train_data": "tfds:multi_nli",     # entailment pairs
        "clsr_output_dim": 768,
        "clsr_head_init": "random",         # e starts random, as in the paper
        "temperature": 0.1,
        "optimizer": "lars",
        "learning_rate": 0.5,
        "weight_decay": 1e-4,
        "lr_schedule": "cosine",
        "warmup_ratio": 0.1,
        "batch_size": 512,
        "steps": 0,
        "epochs": 20.0,
        "eval_data": "stsb",
        "eval_every": 500,
        "steps_per_execution": 50,
        "test_tasks": "sts",
    }
