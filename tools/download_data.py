"""Fetches evaluation and training data into SentEval's `data/downstream` layout.

    python tools/download_data.py --out_dir=data [--tasks=sts,transfer,wiki1m,nli]

An unknown group, a failed download or a file that fails its check ends the tool with
`error: ...` and exit status 2 (`tfsent.cli.run_command`, as tfsent's commands do).

Needs internet (the sources are the ones SentEval and SimCSE download from). Each archive
is downloaded to OUT_DIR/_raw/, unpacked, and the files are moved to the layout tfsent's
readers (and SentEval) expect:

    STS/STS1X-en-test/STS.{input,gs}.NAME.txt    STS/STSBenchmark/sts-{train,dev,test}.csv
    SICK/SICK_{train,trial,test_annotated}.txt   MR/ CR/ SUBJ/ MPQA/ TREC/ MRPC/ SST/binary/
    wiki/wiki1m_for_simcse.txt                   SNLI/*.jsonl  MNLI/*.jsonl

The placing step (`organize`) is separate from downloading so it can be tested offline.

Every URL is https. All hosts but one are known to serve https; ixa2.si.ehu.es (the STS
archives) serves its wiki pages over https, but its file downloads over https could not be
confirmed when this was written (no internet where it was written).

Integrity: after placing, the files listed in PINNED_SHA256 are checked against their sha256
(a mismatch or a missing file is an InputError naming the file and both digests). Only
files whose bytes are known are pinned: the digests were computed from the project's shared
copy of SentEval's `data/downstream` (../shared/data, see its README), and only the files
SentEval's own download script leaves byte for byte as the sources ship them -- the STS12
gold scores and the two MRPC files. The other files in that copy (STS inputs, STS-B, SICK,
MR, CR, TREC, SNLI) were tokenized or otherwise rewritten by SentEval, so they are not what
this tool writes, and their digests would be wrong; the archives themselves and the full
wiki1m / NLI files could not be fetched to be hashed. Those files are not checked.
"""

import hashlib
import os
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile

from absl import flags, logging

from tfsent import cli
from tfsent.errors import ConfigError, InputError, did_you_mean

FLAGS = flags.FLAGS
GROUPS = ("sts", "transfer", "wiki1m", "nli")

STS_URLS = {
    "STS12": "https://ixa2.si.ehu.es/stswiki/images/4/40/STS2012-en-test.zip",
    "STS13": "https://ixa2.si.ehu.es/stswiki/images/2/2f/STS2013-en-test.zip",
    "STS14": "https://ixa2.si.ehu.es/stswiki/images/8/8c/STS2014-en-test.zip",
    "STS15": "https://ixa2.si.ehu.es/stswiki/images/d/da/STS2015-en-test.zip",
    "STS16": "https://ixa2.si.ehu.es/stswiki/images/9/98/STS2016-en-test.zip",
    "STSBenchmark": "https://ixa2.si.ehu.es/stswiki/images/4/48/Stsbenchmark.tar.gz",
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

# sha256 of placed files, by task group, relative to OUT_DIR (see the module docstring for
# why only these): computed from ../shared/data, which holds them as the sources ship them.
PINNED_SHA256 = {
    "sts": {
        "STS/STS12-en-test/STS.gs.MSRpar.txt":
            "5526be59228bc34ccb3cb6f1f56c0d7278d3419b8886713ae016fd92b151f19c",
        "STS/STS12-en-test/STS.gs.MSRvid.txt":
            "9c6096c6bcfb0144c8bbddb00900ca9198c88498630cd0c8f08d18365f1d7150",
        "STS/STS12-en-test/STS.gs.SMTeuroparl.txt":
            "708530c4d006d06881f3289fce35d624d7efe562dcf0fe5f8aa0eec3a135f6d4",
        "STS/STS12-en-test/STS.gs.surprise.OnWN.txt":
            "088d8ca22c0aa406e4a5d2e6e308a4f38b482b8e736c2445a38ffb6e4c4fb4fd",
        "STS/STS12-en-test/STS.gs.surprise.SMTnews.txt":
            "aa6dfc868db333c43dc59be14d46fa6587c7ebddc0d497e717f647bf35121cf1",
    },
    "transfer": {
        "MRPC/msr_paraphrase_train.txt":
            "60a9b09084528f0673eedee2b69cb941920f0b8cd0eeccefc464a98768457f89",
        "MRPC/msr_paraphrase_test.txt":
            "a04e271090879aaba6423d65b94950c089298587d9c084bf9cd7439bd785f784",
    },
}


def _download(url, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        logging.info("already downloaded: %s", path)
        return path
    logging.info("downloading %s", url)
    tmp = path + ".part"
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as f:
            shutil.copyfileobj(response, f)
    except (urllib.error.URLError, OSError) as e:
        raise InputError(f"download failed ({e}); run the tool again to retry",
                         path=url) from None
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


def sha256_of(path):
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_pinned(out_dir, pins):
    """Checks the files `pins` names ({path relative to out_dir: sha256}) under `out_dir`.

    Returns the paths checked; raises InputError naming the first file that is missing or
    whose sha256 differs (with both digests)."""
    checked = []
    for rel, expected in sorted(pins.items()):
        path = os.path.join(out_dir, rel)
        if not os.path.exists(path):
            raise InputError(f"expected after download and placing, but missing (sha256 "
                             f"{expected} expected); the source archive's layout may have "
                             f"changed", path=path)
        got = sha256_of(path)
        if got != expected:
            raise InputError(f"sha256 mismatch: expected {expected}, got {got}; the source "
                             f"changed or the download is corrupt (delete it and the archive "
                             f"under _raw/ to fetch again)", path=path)
        checked.append(path)
    return checked


def fetch(out, groups):
    """Downloads the task `groups` (sts, transfer, wiki1m, nli) into `out`, places the files
    and verifies the pinned ones; returns the paths placed from archives."""
    raw = os.path.join(out, "_raw")
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
    for group in sorted(groups):
        checked = verify_pinned(out, PINNED_SHA256.get(group, {}))
        logging.info("%s: sha256 of %d pinned files verified", group, len(checked))
    return written


def parse_groups(spec):
    """The task groups of a comma-separated --tasks; ConfigError on an unknown or no group."""
    groups = [g.strip() for g in spec.split(",") if g.strip()]
    for group in groups:
        if group not in GROUPS:
            raise ConfigError(f"--tasks: unknown group {group!r}{did_you_mean(group, GROUPS)}; "
                              f"choose from {', '.join(GROUPS)}")
    if not groups:
        raise ConfigError(f"--tasks is empty; choose from {', '.join(GROUPS)}")
    return set(groups)


def main(argv):
    """Downloads the requested groups and organizes them."""
    cli.run_command(lambda: fetch(FLAGS.out_dir, parse_groups(FLAGS.tasks)), argv)


if __name__ == "__main__":
    flags.DEFINE_string("out_dir", "data", "Where the SentEval layout is written.")
    flags.DEFINE_string("tasks", ",".join(GROUPS), "Groups to fetch.")
    cli.start(main)
