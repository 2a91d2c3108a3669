"""CMLM-CSE on RoBERTa-base (Zhang et al., 2023).

    python -m tfsent.train --method=cmlm_cse --config=configs/cmlm_cse_roberta.py \
        --config.eval_data_dir=PATH/TO/SentEval/data/downstream

The paper (Sec. 4.1): "we adopted the same settings as the unsupervised SimCSE" with BERT and
RoBERTa; extractor = the first 8 layers of the pretrained model (frozen), fusioner = 3
transformer blocks; lambda 0.005 (Table 5), mask rate 0.15 (Table 4's best is 0.40).
Unsupervised SimCSE's RoBERTa-base settings (Gao et al., 2021, Appendix A): batch 512,
learning rate 1e-5. The extractor here is the first 8 layers of the same RoBERTa; the MLM
head starts from roberta-base's own lm_head when the checkpoint has it (logged).
Pooling: RoBERTa has no pooler, so `cls` is the raw <s> state (see simcse_unsup_roberta.py).
Paper figures: CMLM-CSE-RoBERTa-base STS avg 76.87 (SimCSE-RoBERTa-base 76.57).
"""


def get_config():
    return {
        "method": "cmlm_cse",
        "encoder": "roberta_base_en",
        "pooling": "cls_before_pooler",
        "export_pooling": "cls_before_pooler",
        "train_data": "data/wiki1m_for_simcse.txt",
        "max_seq_length": 32,
        "batch_size": 512,                  # N (SimCSE's RoBERTa-base setting)
        "epochs": 1.0,
        "steps": 0,
        "learning_rate": 1e-5,              # SimCSE's RoBERTa-base setting
        "temperature": 0.05,                # tau
        "extractor_layers": 8,              # k (Table 6: 8-3)
        "fusion_layers": 3,                 # n
        "mask_rate": 0.15,                  # p (0.40 is best in Table 4)
        "mlm_weight": 0.005,                # lambda (Table 5)
        "eval_data": "stsb",
        "eval_every": 125,
        "test_tasks": "sts",
    }
