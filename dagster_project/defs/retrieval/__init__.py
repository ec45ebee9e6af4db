"""Group `retrieval`: single-turn clarification QA -> multi-turn sessions -> inferred queries -> BM25 + re-rankers
