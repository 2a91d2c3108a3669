"""ConSERT joint (NLI CE + alpha * NT-Xent), the paper's BERT-base recipe.

    python -m tfsent.train --method=consert_joint --config=configs/consert_joint.py \
        --config.train_data=PATH/TO/NLI --config.eval_data_dir=PATH/TO/SentEval/data/downstream
L = L_ce + 0.15 L_con; CE = linear Dense(3) on concat(u, v, |u-v|) (ce_max_feature adds
max(u, v)^2, a trick of the reference code); the contrastive views are over the premises
and hypotheses of each batch. Stage 2 of joint-unsup:
    python -m tfsent.train --method=consert --config=configs/consert_unsup.py \
        --config.encoder=RUN1/encoder --config.train_data=PATH/TO/target_texts.txt
(sup-unsup: the same with --method=consert_sup in stage 1.)
"""


def get_config():
    return {
        "method": "consert_joint",
        "encoder": "bert_base_en_uncased",
        "train_data": "data/nli",
        "pooling": "mean",
        "export_pooling": "last2_avg",
        "max_seq_length": 64,
        "batch_size": 96,
        "epochs": 1.0,
        "steps": 0,
        "learning_rate": 5e-7,
        "warmup_ratio": 0.1,
        "consert_alpha": 0.15,
        "view1_augmentation": "feature_cutoff",
        "view2_augmentation": "shuffle",
        "feature_cutoff_rate": 0.2,
        "temperature": 0.1,
        "direction_reduction": "sum",
        "ce_max_feature": False,
        "encoder_dropout": 0.0,
        "eval_data": "stsb",
        "eval_every": 200,
        "test_tasks": "sts",
    }
