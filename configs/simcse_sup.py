"""Supervised SimCSE, the paper's BERT-base recipe: NLI triplets, contradiction as hard negative.

    python -m tfsent.train --method=simcse_sup --config=configs/simcse_sup.py \
        --config.eval_data_dir=PATH/TO/SentEval/data/downstream
"""


def get_config():
    return {
        "method": "simcse_sup",
        "encoder": "bert_base_en_uncased",
        "pooling": "cls",
        "export_pooling": "cls",            # supervised SimCSE keeps the MLP at test time
        "train_data": "tfds:multi_nli",     # SNLI + MNLI in the paper; any NLI source works
        "max_seq_length": 32,
        "batch_size": 512,                  # N
        "epochs": 3.0,
        "steps": 0,
        "learning_rate": 5e-5,
        "temperature": 0.05,                # tau
        "hard_negative_weight": 0.0,
        "eval_data": "stsb",
        "eval_every": 125,
        "test_tasks": "sts",
    }
