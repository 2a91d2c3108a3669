"""CLSR-STSB, the paper's setting (clsr.txt, Sec. 4; SimCLR's optimiser recipe).

Frozen base m (the paper: BERT-base or SBERT-base, mean pooling) -> e (MLP, 1 hidden layer,
ReLU) -> h (linear); NT-Xent, tau 0.1, on STS-B train pairs with score > 4.

    python -m tfsent.train --method=clsr --config=configs/clsr_stsb.py \
        --config.eval_data_dir=PATH/TO/SentEval/data/downstream
"""


def get_config():
    return {
        "method": "clsr",
        "encoder": "bert_base_en_uncased",  # m (frozen)
        "pooling": "mean",                  # Table 4: mean beats [CLS] by 15 STS-B points
        "train_data": "stsb",               # STS-B train pairs ...
        "positive_threshold": 4.0,          # ... with score > 4
        "clsr_output_dim": 768,             # e's output and h: 768
        "clsr_head_init": "random",         # e starts random, as in the paper
        "temperature": 0.1,                 # tau
        "optimizer": "lars",                # SimCLR's LARS
        "learning_rate": 0.5,
        "weight_decay": 1e-4,
        "lr_schedule": "cosine",
        "warmup_ratio": 0.005,              # 10 warmup epochs of 2000
        "batch_size": 512,                  # Table 2: bigger is better up to 1024
        "steps": 0,
        "epochs": 2000.0,
        "eval_data": "stsb",
        "eval_every": 500,
        "steps_per_execution": 50,
        "test_tasks": "sts",
    }
