"""Unsupervised SimCSE on RoBERTa-base, the paper's recipe (Gao et al., 2021, Appendix A:
RoBERTa-base unsupervised, batch 512, learning rate 1e-5; the rest as for BERT-base).

    python -m tfsent.train --method=simcse_unsup --config=configs/simcse_unsup_roberta.py \
        --config.eval_data_dir=PATH/TO/SentEval/data/downstream
Needs internet for the preset (or point --config.encoder at a local Hugging Face roberta-base
directory) and the data (tools/download_data.py).

Pooling: the reference code trains with a fresh MLP on <s> and drops it at test time. tfsent's
`cls` pooling is BERT's pooler; RoBERTa has none (keras-hub's RobertaBackbone carries no
pooler weights), so `cls` and `cls_before_pooler` are both the raw <s> state here: the run
trains without the MLP. Figures to compare with: SimCSE-RoBERTa-base STS avg 76.57 (as
quoted in the CMLM-CSE paper, Table 1).
"""


def get_config():
    return {
        "method": "simcse_unsup",
        "encoder": "roberta_base_en",
        "pooling": "cls_before_pooler",     # raw <s> (no pooler in RoBERTa; see above)
        "export_pooling": "cls_before_pooler",
        "train_data": "data/wiki1m_for_simcse.txt",
        "max_seq_length": 32,
        "batch_size": 512,                  # N (RoBERTa-base; BERT-base uses 64)
        "epochs": 1.0,
        "steps": 0,
        "learning_rate": 1e-5,              # RoBERTa-base (BERT-base: 3e-5)
        "lr_schedule": "linear",            # linear decay, no warmup
        "warmup_ratio": 0.0,
        "temperature": 0.05,                # tau
        "encoder_dropout": 0.1,             # p, the only augmentation
        "eval_data": "stsb",                # STS-B dev, best checkpoint kept
        "eval_every": 125,                  # 250 at batch 64 -> about 1950 steps in all here
        "test_tasks": "sts",
    }
