"""Retrieval data in BEIR's layout (the format of BEIR, MTEB's retrieval tasks and
sentence-transformers' `InformationRetrievalEvaluator` data).

    DIR/corpus.jsonl        one JSON object a line: "_id", "text", optional "title"
    DIR/queries.jsonl       one JSON object a line: "_id", "text"
    DIR/qrels/<split>.tsv   a header line, then `query-id <TAB> corpus-id <TAB> score`
                            (integer scores; graded relevance allowed)

Each file may instead be gzipped beside its name (corpus.jsonl.gz, qrels/test.tsv.gz, as
some mirrors ship them): `data_file` finds it, and it is read decompressed.

A document's text is `title + " " + text`, stripped (what MTEB and BEIR's
sentence-transformers wrapper embed). Qrels with score > 0 are relevant; queries of the
split without a relevant document are dropped, and qrels naming an unknown query or
document are ignored (both counted in the log; when no qrel matches, the split is refused:
a wrong folder or split). BEIR's own loader keeps queries whose judgements are all 0 and
qrels naming documents missing from the corpus; pytrec_eval then scores such a query 0
and counts a missing relevant document in recall and in nDCG's ideal ranking: on folders
that have them, tfsent's figures are over the judged, findable part only
(docs/search.md); Climate-FEVER has neither.
"""

import os

from absl import logging

from tfsent.data.textio import read_json_lines, read_lines, tab_rows
from tfsent.errors import InputError

SPLITS = ("train", "dev", "test")


class Corpus:
    """Documents in file order: `ids` (list of str) and `texts` (title + " " + text)."""

    def __init__(self, ids, texts):
        self.ids = list(ids)
        self.texts = list(texts)

    def __len__(self):
        return len(self.ids)


class RetrievalSplit:
    """One split of a BEIR folder.

    Attributes:
        corpus: the whole corpus (every split searches all of it).
        query_ids, query_texts: the split's queries that have a relevant document, in
            the order of queries.jsonl.
        qrels: {query id: {document id: integer score}} (scores <= 0 kept: they are
            judged non-relevant, which graded measures need).
        directory, split: where it came from.
    """

    def __init__(self, corpus, query_ids, query_texts, qrels, directory, split):
        self.corpus = corpus
        self.query_ids = query_ids
        self.query_texts = query_texts
        self.qrels = qrels
        self.directory = directory
        self.split = split

    def with_corpus_subset(self, doc_ids):
        """This split searching only the documents `doc_ids` (in corpus order; ids not in
        the corpus are an error): a candidate pool (`evaluation.retrieval.candidate_pool`).
        The qrels are kept whole, so a relevant document left out still counts as missed."""
        keep = set(doc_ids)
        unknown = keep.difference(self.corpus.ids)
        if unknown:
            raise InputError(f"{len(unknown)} pool document ids are not in the corpus, "
                             f"e.g. {sorted(unknown)[0]!r}", path=self.directory)
        rows = [(i, t) for i, t in zip(self.corpus.ids, self.corpus.texts) if i in keep]
        return RetrievalSplit(Corpus([i for i, _ in rows], [t for _, t in rows]),
                              self.query_ids, self.query_texts, self.qrels, self.directory,
                              self.split)


def check_folder(directory, split):
    """Refuses, naming the missing file, a folder that lacks corpus.jsonl, queries.jsonl or
    qrels/<split>.tsv (cheap: run before any model is loaded)."""
    if not os.path.isdir(directory):
        raise InputError("not a folder (a BEIR dataset folder holds corpus.jsonl, "
                         "queries.jsonl and qrels/)", path=directory)
    for path in (data_file(directory, "corpus.jsonl"),
                 data_file(directory, "queries.jsonl"), qrels_path(directory, split)):
        if not os.path.isfile(path):
            have = sorted(f.split(".")[0] for f in os.listdir(os.path.join(directory, "qrels"))
                          if f.endswith((".tsv", ".tsv.gz"))) if os.path.isdir(
                              os.path.join(directory, "qrels")) else []
            extra = f" (qrels splits here: {', '.join(have)})" if have and "qrels" in path \
                else ""
            raise InputError(f"missing BEIR file{extra}", path=path)


def data_file(directory, name):
    """DIR/name, or DIR/name.gz when only the gzipped file is there."""
    path = os.path.join(directory, name)
    if not os.path.exists(path) and os.path.isfile(path + ".gz"):
        return path + ".gz"
    return path


def qrels_path(directory, split):
    """DIR/qrels/<split>.tsv (or its .gz)."""
    return data_file(directory, os.path.join("qrels", f"{split}.tsv"))


def _unique_ids(rows, path, what):
    """{id: (line, object)}; InputError on a duplicated `_id`."""
    seen = {}
    for number, obj in rows:
        key = obj["_id"]
        if key in seen:
            raise InputError(f"duplicate {what} _id {key!r} (first on line {seen[key][0]})",
                             path=path, line=number)
        seen[key] = (number, obj)
    return seen


def read_corpus(path):
    """The documents of a corpus.jsonl file (or of a BEIR folder) as a Corpus."""
    if os.path.isdir(path):
        path = data_file(path, "corpus.jsonl")
    rows = _unique_ids(read_json_lines(path, ("_id", "text")), path, "document")
    if not rows:
        raise InputError("the corpus is empty", path=path)
    ids, texts = [], []
    for key, (_, obj) in rows.items():
        title = obj.get("title")
        title = "" if title is None else title
        if not isinstance(title, str):
            raise InputError(f"document {key!r}: title is not a string", path=path)
        ids.append(key)
        texts.append(f"{title} {obj['text']}".strip())
    return Corpus(ids, texts)


def read_queries(path):
    """{query id: text} of a queries.jsonl file, in file order."""
    rows = _unique_ids(read_json_lines(path, ("_id", "text")), path, "query")
    return {key: obj["text"] for key, (_, obj) in rows.items()}


def qrel_rows(path):
    """Yields (line number, query id, document id, integer score) of a qrels TSV (header
    line first; a first line with an integer score is read as a judgement, with a
    warning); InputError naming the line for a malformed row."""
    lines = read_lines(path)
    if not lines:
        raise InputError("empty qrels file (expected the header query-id, corpus-id, "
                         "score)", path=path)
    # BEIR's qrels start with a header; a first line whose score column is an integer is
    # a judgement (a file written without the header), not one to drop.
    first = lines[0].split("\t")
    headerless = len(first) == 3 and first[2].strip().lstrip("-").isdigit()
    if headerless:
        logging.warning("%s has no header line (query-id, corpus-id, score): line 1 is read "
                        "as a judgement", path)
    for number, (query, doc, score) in tab_rows(path, ("query-id", "corpus-id", "score"),
                                                lines[0 if headerless else 1:],
                                                first_number=1 if headerless else 2):
        try:
            value = int(score)
        except ValueError:
            raise InputError(f"score {score!r} is not an integer", path=path,
                             line=number) from None
        yield number, query, doc, value


def read_qrels(path):
    """{query id: {document id: score}} of a qrels TSV (header line first); InputError
    naming the line for a malformed row or a pair given twice."""
    qrels = {}
    for number, query, doc, value in qrel_rows(path):
        judged = qrels.setdefault(query, {})
        if doc in judged:
            raise InputError(f"query {query!r} and document {doc!r} are judged twice",
                             path=path, line=number)
        judged[doc] = value
    return qrels


def read_split(directory, split="test", corpus=None):
    """The queries, qrels and corpus of one split of a BEIR folder (`corpus`: an already
    read Corpus of the same folder, to read it once for several splits)."""
    check_folder(directory, split)
    corpus = corpus or read_corpus(data_file(directory, "corpus.jsonl"))
    queries = read_queries(data_file(directory, "queries.jsonl"))
    path = qrels_path(directory, split)
    raw = read_qrels(path)
    doc_ids = set(corpus.ids)
    unknown_queries = [q for q in raw if q not in queries]
    unknown_docs = sum(1 for judged in raw.values() for d in judged if d not in doc_ids)
    qrels = {q: {d: s for d, s in judged.items() if d in doc_ids}
             for q, judged in raw.items() if q in queries}
    qrels = {q: judged for q, judged in qrels.items() if any(s > 0 for s in judged.values())}
    total = sum(len(j) for j in raw.values())
    if unknown_queries or unknown_docs:
        logging.warning("%s: %d of %d qrels name a query not in queries.jsonl, %d a document "
                        "not in corpus.jsonl; they are ignored", path,
                        sum(len(raw[q]) for q in unknown_queries), total, unknown_docs)
    if not qrels:
        raise InputError(f"no qrel names a known query and document with score > 0 "
                         f"({total} rows, {len(unknown_queries)} unknown queries, "
                         f"{unknown_docs} unknown documents): wrong folder or split?",
                         path=path)
    dropped = len(raw) - len(unknown_queries) - len(qrels)
    if dropped:
        logging.info("%s: %d queries without a relevant document dropped", path, dropped)
    query_ids = [q for q in queries if q in qrels]
    return RetrievalSplit(corpus, query_ids, [queries[q] for q in query_ids], qrels,
                          directory, split)


def read_training_pairs(directory, split="train"):
    """(query text, document text) training rows of one split of a BEIR folder: one row per
    qrel with score > 0, in the qrels file's order, document text as the evaluation builds
    it (`title + " " + text`, stripped).

    Unlike the evaluation (which ignores qrels naming an unknown query or document, as
    BEIR's does), training refuses them: an InputError names the qrels file, the first
    such line and how many rows name unknown ids (a training pair needs both texts). A
    query or document whose text is empty is refused too, naming the qrels line."""
    check_folder(directory, split)
    corpus = read_corpus(data_file(directory, "corpus.jsonl"))
    queries = read_queries(data_file(directory, "queries.jsonl"))
    documents = dict(zip(corpus.ids, corpus.texts))
    path = qrels_path(directory, split)
    rows, seen, unknown, not_relevant = [], set(), [], 0
    for number, query, doc, score in qrel_rows(path):
        if (query, doc) in seen:
            raise InputError(f"query {query!r} and document {doc!r} are judged twice",
                             path=path, line=number)
        seen.add((query, doc))
        if query not in queries or doc not in documents:
            what = (f"query {query!r} is not in queries.jsonl" if query not in queries
                    else f"document {doc!r} is not in corpus.jsonl")
            unknown.append((number, what))
            continue
        if score <= 0:
            not_relevant += 1
            continue
        query_text, doc_text = queries[query].strip(), documents[doc]
        if not query_text or not doc_text:
            side = f"query {query!r}" if not query_text else f"document {doc!r}"
            raise InputError(f"{side} has an empty text (a training pair needs both)",
                             path=path, line=number)
        rows.append((queries[query], doc_text))
    if unknown:
        number, what = unknown[0]
        raise InputError(f"{what} ({len(unknown)} of {len(seen)} qrels name an unknown query "
                         f"or document; training needs the texts of every judged pair: "
                         f"wrong folder, or fix the qrels)", path=path, line=number)
    logging.info("read %d (query, document) training pairs from %s (%d qrels with score "
                 "<= 0 skipped)", len(rows), path, not_relevant)
    if not rows:
        raise InputError("no qrel with score > 0 (nothing to train on)", path=path)
    return rows
