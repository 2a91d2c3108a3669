"""Unsupervised SimCSE, the paper's BERT-base recipe (Gao et al., 2021, Sec. 3 / App. A).

    python -m tfsent.train --method=simcse_unsup --config=configs/simcse_unsup.py \
        --config.eval_data_dir=PATH/TO/SentEval/data/downstream
Needs internet for the preset and the data (tools/download_data.py).
"""


def get_config():
    return {
        "method": "simcse_unsup",
        "encoder": "bert_base_en_uncased",
        "pooling": "cls",                   # MLP on [CLS] during training ...
        "export_pooling": "cls_before_pooler",  # ... dropped at test time
        "train_data": "data/wiki1m_for_simcse.txt",
        "max_seq_length": 32,
        "batch_size": 64,                   # N
        "epochs": 1.0,
        "steps": 0,
        "learning_rate": 3e-5,
        "lr_schedule": "linear",            # linear decay, no warmup
        "warmup_ratio": 0.0,
        "temperature": 0.05,                # tau
        "encoder_dropout": 0.1,             # p, the only augmentation
        "eval_data": "stsb",                # STS-B dev, best checkpoint kept
        "eval_every": 250,
        "test_tasks": "sts",
    }
