"""CMLM-CSE, the paper's BERT-base recipe (Zhang et al., 2023; Tables 4-6).

    python -m tfsent.train --method=cmlm_cse --config=configs/cmlm_cse.py \
        --config.eval_data_dir=PATH/TO/SentEval/data/downstream
"""


def get_config():
    return {
        "method": "cmlm_cse",
        "encoder": "bert_base_en_uncased",
        "pooling": "cls",
        "export_pooling": "cls_before_pooler",
        "train_data": "data/wiki1m_for_simcse.txt",
        "max_seq_length": 32,
        "batch_size": 64,                   # N
        "epochs": 1.0,
        "steps": 0,
        "learning_rate": 3e-5,
        "temperature": 0.05,                # tau
        "extractor_layers": 8,              # k: frozen lexical extractor depth (Table 6: 8-3)
        "fusion_layers": 3,                 # n: fresh fusion blocks
        "mask_rate": 0.15,                  # p (0.40 is best in Table 4)
        "mlm_weight": 0.005,                # lambda, on the MEAN scale: tfsent averages both
                                            # losses where the paper's Eqs. (4)-(6) sum over
                                            # sentences and masked tokens, so this is the
                                            # paper's lambda x (masked tokens per sentence,
                                            # 2.84 on wiki1m at p 0.15): 0.005 here is the
                                            # paper's 0.0018; its 0.005 (Table 5) is 0.014
                                            # here (tfsent.methods.CMLMCSE docstring)
        "eval_data": "stsb",
        "eval_every": 250,
        "test_tasks": "sts",
    }
