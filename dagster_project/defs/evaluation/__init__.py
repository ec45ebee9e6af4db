"""Group `evaluation` (ClarifyMT-Bench §5): subject models x methods on every dialogue turn, judge, metrics, report."""
