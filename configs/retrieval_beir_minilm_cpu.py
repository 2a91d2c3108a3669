"""Training minilm-l6 for search on a BEIR folder's train pairs (README "Search", the runs
of docs/search.md's first table): Climate-FEVER's 1,350 (claim, evidence) pairs, in-batch
negatives, 2 epochs at lr 2e-5 with 10% warm-up, training length 64, selected on the dev
split by nDCG@10 every 42 steps (126 steps: 2 epochs rounded up to a multiple of 42).

For another BEIR-layout folder: --config.train_data=beir:DIR:train
--config.eval_data=beir:DIR:dev (benchmarks/search_training.py runs this recipe's settings).
"""

DATA = "../shared/data/retrieval/climate-fever"


def get_config():
    return {
        "method": "retrieval",
        "encoder": "minilm-l6",
        "pooling": "mean",
        "train_data": f"beir:{DATA}:train",
        "eval_data": f"beir:{DATA}:dev",
        "steps": 0,
        "epochs": 2,
        "learning_rate": 2e-5,
        "warmup_ratio": 0.1,
        "max_seq_length": 64,
        "eval_every": 42,
        "first_eval_step": 0,
    }
