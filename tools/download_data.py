"""Fetches evaluation and training data into SentEval's `data/downstream` layout.

    python tools/download_data.py --out_dir=data [--tasks=sts,transfer,wiki1m,nli]

Needs internet (the sources are the ones SentEval and SimCSE download from). Each archive
is downloaded to OUT_DIR/_raw/, unpacked, and the files are moved to the layout tfsent's
readers (and SentEval) expect:

    STS/STS1X-en-test/STS.{input,gs}.NAME.txt    STS/STSBenchmark/sts-{train,dev,test}.csv
    SICK/SICK_{train,trial,test_annotated}.txt   MR/ CR/ SUBJ/ MPQA/ TREC/ MRPC/ SST/binary/
    wiki/wiki1m_for_simcse.txt                   SNLI/*.jsonl  MNLI/*.jsonl

The placing step (`organize`) is separate from downloading so it can be tested offline.
"""

import os
import shutil
import tarfile
import urllib.request
import zipfile

from absl import app, flags, logging

FLAGS = flags.FLAGS

STS_URLS = {
    "STS12": "http://ixa2.si.ehu.es/stswiki/images/4/40/STS2012-en-test.zip",
    "STS13": "http://ixa2.si.ehu.es/stswiki/images/2/2f/STS2013-en-test.zip",
    "STS14": "http://ixa2.si.ehu.es/stswiki/images/8/8c/STS2014-en-test.zip",
    "STS15": "http://ixa2.si.ehu.es/stswiki/images/d/da/STS2015-en-test.zip",
    "STS16": "http://ixa2.si.ehu.es/stswiki/images/9/98/STS2016-en-test.zip",
    "STSBenchmark": "http://ixa2.si.ehu.es/stswiki/images/4/48/Stsbenchmark.tar.gz",
    "SICK": "https://zenodo.org/record/2787612/files/SICK.zip",
}
TRANSFER_URLS = {
    "binary": "https://dl.fbaipublicfiles.com/senteval/senteval_data/datasmall_NB_ACL12.zip",
    "TREC/train_5500.label": "https://cogcomp.seas.upenn.edu/Data/QA/QC/train_5500.label",
    "TREC/TREC_10.label": "https://cogcomp.seas.upenn.edu/Data/QA/QC/TREC_10.label",
    "MRPC/msr_paraphrase_train.txt":
        "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_train.txt",
    "MRPC/msr_paraphrase_test.txt":
        "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_test.txt",
    "SST/binary/sentiment-train":
        "https://raw.githubusercontent.com/PrincetonML/SIF/master/data/sentiment-train",
    "SST/binary/sentiment-dev":
        "https://raw.githubusercontent.com/PrincetonML/SIF/master/data/sentiment-dev",
    "SST/binary/sentiment-test":
        "https://raw.githubusercontent.com/PrincetonML/SIF/master/data/sentiment-test",
}
WIKI_URL = ("https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/"
            "wiki1m_for_simcse.txt")
NLI_URLS = {"SNLI": "https://nlp.stanford.edu/projects/snli/snli_1.0.zip",
            "MNLI": "https://cims.nyu.edu/~sbowman/multinli/multinli_1.0.zip"}

# Which raw file names go where (matched by base name anywhere under the unpacked tree).
BINARY_FILES = {"rt-polarity.pos": "MR", "rt-polarity.neg": "MR", "custrev.pos": "CR",
                "custrev.neg": "CR", "subj.objective": "SUBJ", "subj.subjective": "SUBJ",
                "mpqa.pos": "MPQA", "mpqa.neg": "MPQA"}
SICK_FILES = ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt")
STSB_FILES = ("sts-train.csv", "sts-dev.csv", "sts-test.csv")


def _download(url, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        logging.info("already downloaded: %s", path)
        return path
    logging.info("downloading %s", url)
    tmp = path + ".part"
    with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as f:
        shutil.copyfileobj(response, f)
    os.replace(tmp, path)
    return path


def _unpack(archive, into):
    os.makedirs(into, exist_ok=True)
    if archive.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            z.extractall(into)
    elif archive.endswith((".tar.gz", ".tgz")):
        with tarfile.open(archive) as t:
            t.extractall(into, filter="data")
    return into


def _walk(root):
    for folder, _, files in os.walk(root):
        for name in files:
            yield folder, name


def organize(raw_dir, out_dir):
    """Moves unpacked files under `raw_dir` into the SentEval layout under `out_dir`.

    Returns the list of destination paths written. STS year folders are recognised from
    their names (e.g. `STS2012-en-test`, `test-gold`, `sts2016-english-with-gs-v1.0`) by
    the STS.input files' year key in the parent path; files are matched by base name.
    """
    written = []

    def place(src, *dest):
        path = os.path.join(out_dir, *dest)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copyfile(src, path)
        written.append(path)

    for folder, name in _walk(raw_dir):
        src = os.path.join(folder, name)
        year = _sts_year(folder)
        if year and (name.startswith("STS.input.") or name.startswith("STS.gs.")):
            if name.endswith(".txt") and not name.startswith("STS.gs.ALL"):
                place(src, "STS", f"{year}-en-test", name)
        elif name in STSB_FILES:
            place(src, "STS", "STSBenchmark", name)
        elif name in SICK_FILES:
            place(src, "SICK", name)
        elif name in BINARY_FILES:
            place(src, BINARY_FILES[name], name)
        elif name.endswith(".jsonl") and ("snli" in name or "multinli" in name):
            place(src, "SNLI" if "snli" in name else "MNLI", name)
    return sorted(written)


def _sts_year(folder):
    low = folder.lower()
    for year in ("2012", "2013", "2014", "2015", "2016"):
        if f"sts{year}" in low.replace("-", "") or f"sts-{year}" in low or \
                f"sts_{year}" in low:
            return f"STS{year[2:]}"
    return None


def main(argv):
    """Downloads the requested groups and organizes them."""
    del argv
    out = FLAGS.out_dir
    raw = os.path.join(out, "_raw")
    groups = set(FLAGS.tasks.split(","))
    if "sts" in groups:
        for key, url in STS_URLS.items():
            archive = _download(url, os.path.join(raw, os.path.basename(url)))
            # Unpack each STS year under raw/STS20XX: the archives' own folder names vary
            # (test-gold, test-gs, sts2016-english-with-gs-v1.0, ...).
            folder = f"STS20{key[3:]}" if key[3:].isdigit() else key
            _unpack(archive, os.path.join(raw, folder))
    if "transfer" in groups:
        for key, url in TRANSFER_URLS.items():
            if key == "binary":
                _unpack(_download(url, os.path.join(raw, os.path.basename(url))),
                        os.path.join(raw, "binary"))
            else:
                _download(url, os.path.join(out, key))
    if "wiki1m" in groups:
        _download(WIKI_URL, os.path.join(out, "wiki", "wiki1m_for_simcse.txt"))
    if "nli" in groups:
        for key, url in NLI_URLS.items():
            _unpack(_download(url, os.path.join(raw, os.path.basename(url))),
                    os.path.join(raw, key))
    written = organize(raw, out)
    logging.info("placed %d files under %s", len(written), out)


if __name__ == "__main__":
    flags.DEFINE_string("out_dir", "data", "Where the SentEval layout is written.")
    flags.DEFINE_string("tasks", "sts,transfer,wiki1m,nli", "Groups to fetch.")
    app.run(main)
