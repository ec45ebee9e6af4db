"""The document side of ClariMM retrieval: the text a ranker sees (title + text), snippets shown to the
re-ranker, and Mario's keyword IDs (§4.3.2): each document named by its top YAKE keywords."""

from __future__ import annotations

from collections.abc import Sequence


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def keyword_ids(texts: Sequence[str], n_keywords: int = 5, ngram: int = 2) -> list[str]:
    """One keyword ID per document: its top YAKE keywords, lower-cased, joined by ' | ', unique in the collection.

    A keyword whose words (plural 's' ignored) are all covered by keywords already taken is skipped, so
    'teddy bear | teddy bears | bear' becomes 'teddy bear | <next new keyword>'. Two documents with the
    same keywords get ' #2', ' #3' ... appended in collection order: an ID always names exactly one document.
    """
    import yake

    extractor = yake.KeywordExtractor(lan="en", n=ngram, top=4 * n_keywords, dedup_lim=0.7)
    out, used = [], {}
    for text in texts:
        kws: list[str] = []
        covered: set[str] = set()
        for kw, _score in extractor.extract_keywords(text or ""):
            words = kw.lower().split()
            stems = {_stem(w) for w in words}
            if not words or stems <= covered:
                continue
            covered |= stems
            kws.append(" ".join(words))
            if len(kws) == n_keywords:
                break
        base = " | ".join(kws) or "untitled"
        used[base] = used.get(base, 0) + 1
        out.append(base if used[base] == 1 else f"{base} #{used[base]}")
    return out


def snippet(text: str, max_chars: int) -> str:
    """The first max_chars characters of a document, cut at a word boundary ('' when max_chars is 0)."""
    if max_chars <= 0:
        return ""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars].rsplit(" ", 1)[0]
    return cut + " ..."


def document_text(title: str | None, text: str) -> str:
    """What the rankers index and embed: "<title>. <text>", or the text alone."""
    return f"{title}. {text}" if title else text
