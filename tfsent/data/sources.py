"""The source grammar of `train_data`, `eval_data` and retrieval tasks: one parser.

    beir:DIR[:SPLIT]    a BEIR folder (`tfsent.data.beir`). SPLIT is the text after the
                        last colon when that text holds no path separator and DIR:SPLIT
                        is not itself a folder, so DIR may hold colons
                        (beir:C:\\data\\scifact is the folder C:\\data\\scifact); the
                        default split is the caller's (train to train and mine on, dev
                        to select on, test to evaluate).
    tfds:NAME[:OPTION]  a TensorFlow Datasets dataset (`tfsent.data.readers`); OPTION is
                        the text field of sentences (default "text"); NLI readers
                        pass NAME:OPTION to tfds.load (a version).
    demo, demo_nli      the demo data in tfsent/data/demo (stsb and sickr name the
                        SentEval dev sets of eval_data: see `readers.read_dev_pairs`).
    PATH                a file (.txt, .tsv, .jsonl, ...) or a folder (SentEval SNLI).
    A,B,...             several training sources: a mixture (`parse_sources`,
                        `tfsent.data.mixture`).

`parse_source` names the kind of one source; the readers take the source string and
ask this module what it is.
"""

import os

from tfsent.errors import ConfigError

BEIR = "beir:"
TFDS = "tfds:"
DEMO_NAMES = ("demo", "demo_nli")
_SEPARATORS = ("/", "\\")


class Source:
    """One parsed source: `text` as given, `scheme` ("beir", "tfds", "demo" or "path"),
    `location` (the BEIR folder, the TFDS name, the demo name, the path), `split` (BEIR:
    the SPLIT given, else None) and `option` (TFDS: the text after NAME:, else None)."""

    def __init__(self, text, scheme, location, split=None, option=None):
        self.text, self.scheme, self.location = text, scheme, location
        self.split, self.option = split, option

    def __repr__(self):
        return (f"Source({self.text!r}: {self.scheme} {self.location!r}, split={self.split!r}, "
                f"option={self.option!r})")


def is_beir(text):
    """True for a `beir:DIR[:SPLIT]` source."""
    return isinstance(text, str) and text.startswith(BEIR)


def is_tfds(text):
    """True for a `tfds:NAME[:OPTION]` source."""
    return isinstance(text, str) and text.startswith(TFDS)


def parse_source(text):
    """The `Source` one source string names (see the module doc). ConfigError naming the
    source for anything that names none: not a string, blank, `beir:` or `tfds:` with
    nothing after."""
    if not isinstance(text, str):
        raise ConfigError(f"a data source is a string, got {type(text).__name__} {text!r}")
    if not text.strip():
        raise ConfigError(f"data source {text!r} is empty")
    if is_beir(text):
        rest = text[len(BEIR):]
        directory, split = rest, None
        if ":" in rest:
            head, tail = rest.rsplit(":", 1)
            if tail and not any(s in tail for s in _SEPARATORS) and not os.path.isdir(rest):
                directory, split = head, tail
        if not directory:
            raise ConfigError(f"{text!r}: no folder given (expected beir:DIR[:SPLIT])")
        return Source(text, "beir", directory, split=split)
    if is_tfds(text):
        name, _, option = text[len(TFDS):].partition(":")
        if not name:
            raise ConfigError(f"{text!r}: no dataset name given (expected tfds:NAME)")
        return Source(text, "tfds", name, option=option or None)
    if text in DEMO_NAMES:
        return Source(text, "demo", text)
    return Source(text, "path", text)


def parse_beir(text, default_split="test", bare=False):
    """`beir:DIR[:SPLIT]` -> (DIR, SPLIT or `default_split`); `bare`: a name without the
    `beir:` prefix is read as DIR[:SPLIT] too (a command's --beir flag, a folder). A
    ConfigError for anything else."""
    if bare and isinstance(text, str) and not is_beir(text):
        text = BEIR + text
    source = parse_source(text)
    if source.scheme != "beir":
        raise ConfigError(f"{text!r} is not a retrieval source (expected beir:DIR[:SPLIT])")
    return source.location, source.split or default_split


def parse_sources(train_data):
    """The list of sources named by `train_data`: a string (one source, or several
    separated by commas) or a list/tuple of strings (a recipe). A blank or repeated
    source is a ConfigError naming the field."""
    if isinstance(train_data, str):
        sources = [s.strip() for s in train_data.split(",")]
    elif isinstance(train_data, (list, tuple)):
        sources = list(train_data)
        for s in sources:
            if not isinstance(s, str):
                raise ConfigError(f"train_data: every source must be a string, got "
                                  f"{type(s).__name__} {s!r}")
        sources = [s.strip() for s in sources]
    else:
        raise ConfigError(f"train_data must be a string or a list of strings, got "
                          f"{type(train_data).__name__} {train_data!r}")
    if not sources or not all(sources):
        raise ConfigError(f"train_data={train_data!r} names an empty source (sources are "
                          f"separated by single commas)")
    repeated = sorted({s for s in sources if sources.count(s) > 1})
    if repeated:
        raise ConfigError(f"train_data names {', '.join(repeated)} more than once (to "
                          f"weight a source up, use source_weights)")
    return sources
