"""ConSERT unsupervised from minilm-l6 on a CPU, on the paper's data: the unlabeled
sentences of the STS tasks (here STS12, STS-B and SICK, all splits), written first by

    python tools/sts_text.py --data_dir=../shared/data --out=runs/sts_text.txt

lr 5e-6 instead of the paper's 5e-7: 150 steps from an already trained sentence encoder,
where 5e-7 moves nothing measurable; pooling `mean` for training, dev and export (minilm-l6
is a mean-pooled model). Batch 32 instead of 96 for CPU time. The objective is L_con; the
reference's is 0.15 x L_con (configs/consert_unsup.py explains why that constant factor
changes only the logged loss, the logged gradient norm and clipping, which is off here).
"""


def get_config():
    return {
        "method": "consert",
        "encoder": "minilm-l6",
        "pooling": "mean",
        "train_data": "runs/sts_text.txt",  # tools/sts_text.py (above)
        "max_seq_length": 32,
        "batch_size": 32,
        "steps": 150,
        "eval_every": 50,
        "learning_rate": 5e-6,
        "warmup_ratio": 0.1,
        "view1_augmentation": "feature_cutoff",
        "view2_augmentation": "shuffle",
        "feature_cutoff_rate": 0.2,
        "temperature": 0.1,
        "direction_reduction": "sum",
        "encoder_dropout": 0.0,
        "eval_data": "stsb",
        "eval_data_dir": "../shared/data",
        "test_tasks": "STS12,STSBenchmark,SICKRelatedness",
    }
