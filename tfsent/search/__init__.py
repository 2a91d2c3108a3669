"""Search: exact cosine top-k and hard-negative mining on it.

- `exact`: `top_k_cosine`, the k most similar candidates of each query, exact, in bounded
  memory (the retrieval evaluation's and the search index's search), `l2_normalize_rows`.
- `mining`: `mine_hard_negatives` ((anchor, positive) pairs -> negatives), `mine_beir` (a
  BEIR folder's (query, relevant document) rows), `MiningProblem`, the filters.
- `mined_files`: `mine_to_file`, the run of `python -m tfsent.mine` (files in, rows out).

`from tfsent.search import top_k_cosine` (the module this package replaced) still works.
"""

from tfsent.search.exact import l2_normalize_rows, top_k_cosine
from tfsent.search.mined_files import mine_to_file
from tfsent.search.mining import MiningProblem, mine_beir, mine_hard_negatives

__all__ = ["MiningProblem", "l2_normalize_rows", "mine_beir", "mine_hard_negatives",
           "mine_to_file", "top_k_cosine"]
