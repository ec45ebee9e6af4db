"""params.yaml `intents`, `retrieval` and `double_turn`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from dagster_project.config.base import Strict


class EditExample(Strict):
    """One worked example in the edit prompt (paper Fig. 3 shows a positive and a negative one): the tagged query,
    its intent, the rewrite, the intents the rewrite could mean (name -> why) and why it is (not) a good edit."""

    query: str
    intent: str
    modified_query: str
    potential_intents: dict[str, str]
    why: str


class IntentsConfig(Strict):
    """Intent classification with clarification (seed: "Scaling Intent Understanding"). Demo sizes; paper sizes
    in params.yaml comments."""

    dataset: str = "data/intents/utterances.csv"       # text, intent, optional split (CSV / JSONL / JSON / Parquet)
    catalog: str = "data/intents/catalog.jsonl"        # name, description, examples
    few_shot: str | None = "data/intents/few_shot.jsonl"  # demo dialogues for the assistant prompt ({"messages": [...]})
    ambiguous_dataset: str | None = "data/intents/ambiguous.jsonl"  # optional ambiguous queries you already have
    ood_label: str = "out_of_domain"                   # rows with this intent are out-of-domain test utterances
    test_fraction: float = Field(0.3, ge=0.0, lt=1.0)  # only for rows without a split
    seed: int = 0
    examples_per_intent: int = Field(2, ge=0)          # catalogue examples shown in prompts
    generation_temperature: float = Field(0.7, ge=0.0, le=2.0)
    n_edit_train: int = Field(3, ge=0)                 # edit method: source utterances per split
    n_edit_test: int = Field(2, ge=0)
    n_pair_train: int = Field(1, ge=0)                 # intent-pair method: pairs per split (2 queries each)
    n_pair_test: int = Field(1, ge=0)                  # (when sampled; with every pair: the train:test ratio)
    pair_sample_above: int = Field(100, ge=0)          # every intent pair when the catalogue has at most this many
    edit_positive: EditExample = EditExample(
        query="Please cancel the order I placed this morning", intent="cancel_order",
        modified_query="I need to do something about the order I placed this morning",
        potential_intents={"cancel_order": "they may want to stop it",
                           "track_order": "they may want to know where it is",
                           "change_delivery_address": "they may want it sent elsewhere"},
        why="the rewrite no longer says what should happen to the order, so several intents honestly fit")
    edit_negative: EditExample = EditExample(
        query="I can't log into my account", intent="account_access",
        modified_query="I can't log into my account on my phone",
        potential_intents={"account_access": "it is about logging in"},
        why="the added detail changes nothing: it is still plainly about logging in, so only one intent fits")
    n_unambiguous_train: int = Field(4, ge=0)          # single-turn conversations from tagged utterances
    max_turns: int = Field(3, gt=0)                    # assistant turns per conversation
    structured_output: bool = True                     # assistant replies as JSON (false: the paper's plain text)
    assistant_max_tokens: int = Field(96, gt=0)
    user_temperature: float = Field(0.7, ge=0.0, le=2.0)
    judge_unambiguous: bool = False                    # false: unambiguous queries carry enough information by construction
    alpha: float = Field(0.5, ge=0.0, le=1.0)          # SDRS weight on A
    keep_percentile: float = Field(85.0, gt=0.0, le=100.0)
    require_correct: bool = True                       # never train on a conversation whose final intent is wrong
    sweep_percentiles: list[float] = Field(default_factory=lambda: [100.0, 90.0, 85.0, 80.0, 75.0, 65.0])
    sweep_train: bool = False                          # training/intents_tuned also trains one model per sweep percentile
    n_label_dropout: int = Field(2, ge=0)              # label-dropout OOD examples ADDED to training (paper: 200)
    n_test_unambiguous: int = Field(3, ge=0)
    n_test_ood: int = Field(2, ge=0)                   # user-provided out-of-domain utterances
    n_test_dropout: int = Field(2, ge=0)               # label-dropout OOD made from unambiguous test utterances
    subjects: list[str] | None = None                  # subject models evaluated here; null = every untrained one


class RetrievalConfig(Strict):
    """Multi-turn (multimodal) clarification for search (seed: ClariMM / Mario). Demo sizes; paper sizes in
    params.yaml comments."""

    qa_path: str = "data/retrieval/clarification_qa.tsv"   # ClariQ/Melon shape: TSV (as-is), CSV, JSONL or Parquet
    documents_path: str = "data/retrieval/documents.jsonl"  # JSONL doc_id, text, optional title (or CSV/TSV/Parquet)
    qrels_path: str = "data/retrieval/qrels.txt"           # TREC qrels: qid 0 doc_id rel (qid = facet id)
    turn_lengths: list[int] = Field(default_factory=lambda: [2, 3, 4])
    per_length: int = Field(3, gt=0)                       # sessions sampled per length (paper: 10,000)
    seed: int = 0
    similar_check: bool = True                             # Appendix A prompt A: drop sessions with repeated QA
    reveal_cut: bool = True                                # Appendix A prompt B: cut at the facet-revealing turn
    rewrite_answers: bool = True                           # Algorithm 1: conceal -> hint -> reveal rewrites
    refine_temperature: float = Field(0.7, ge=0.0, le=2.0)
    first_stage_k: int = Field(100, gt=0)                  # BM25 depth (paper: 100)
    rerank_depth: int = Field(10, gt=0)                    # BM25 candidates every re-ranker re-orders (one depth)
    failed_rerank: Literal["first_stage", "drop_query"] = "first_stage"  # a failed ranking: keep BM25's, flagged,
    #                                                        or remove the query from EVERY ranker's scores
    training_negatives: int = Field(7, ge=1)               # BM25 negatives per re-ranker training example
    facet_split: list[float] = Field(default_factory=lambda: [0.8, 0.1, 0.1])  # train/val/test share of facets
    keywords_per_doc: int = Field(5, gt=0)                 # YAKE keywords per keyword ID (paper: 5)
    keyword_ngram: int = Field(2, ge=1, le=3)
    snippet_chars: int = Field(120, ge=0)                  # document text shown next to each ID
    rankers: list[Literal["bm25", "bm25_history", "dense_rerank", "generative_rerank"]] = Field(
        default_factory=lambda: ["bm25", "bm25_history", "dense_rerank", "generative_rerank"])
    inputs: list[Literal["multi_turn", "single_turn"]] = Field(
        default_factory=lambda: ["multi_turn", "single_turn"])
    reranker_vision: bool = False                          # true only if the reranker model accepts images
    ks: list[int] = Field(default_factory=lambda: [1, 3, 5])

    @model_validator(mode="after")
    def _sane(self) -> RetrievalConfig:
        if not self.turn_lengths or any(n < 2 for n in self.turn_lengths):
            raise ValueError("retrieval.turn_lengths: lengths must be >= 2 (a session has at least two turns)")
        if len(set(self.turn_lengths)) != len(self.turn_lengths):
            raise ValueError("retrieval.turn_lengths: lengths must be distinct")
        if self.rerank_depth > self.first_stage_k:
            raise ValueError("retrieval.rerank_depth must be <= retrieval.first_stage_k")
        if len(self.facet_split) != 3 or any(x < 0 for x in self.facet_split) or abs(sum(self.facet_split) - 1) > 1e-9:
            raise ValueError("retrieval.facet_split: three non-negative shares (train, val, test) that sum to 1")
        if not self.rankers or not self.inputs or not self.ks or any(k < 1 for k in self.ks):
            raise ValueError("retrieval: rankers, inputs and ks (>= 1) must not be empty")
        return self


class DoubleTurnInput(Strict):
    """One open-domain QA file whose questions carry several acceptable answers (io/formats: ambigqa, nq_open,
    qa_generic, clarify_jsonl: the double-turn paper's released *.clarify.jsonl)."""

    path: str
    format: Literal["ambigqa", "nq_open", "generic", "clarify_jsonl"]
    split: Literal["train", "eval", "both"] = Field(
        "both", description="train: SFT data + preference labelling; eval: answer_set_eval; both: split by eval_fraction")
    answers_are_aliases: bool = Field(False, description="nq_open: a record's answers are aliases of ONE answer")


class DoubleTurnConfig(Strict):
    """Double-turn preferences (Zhang, Knox & Choi): sizes, sampling and evaluation knobs."""

    inputs: list[DoubleTurnInput] = Field(default_factory=lambda: [
        DoubleTurnInput(path="data/double_turn/demo_ambigqa.json", format="ambigqa"),
        DoubleTurnInput(path="data/double_turn/demo_nq_open.jsonl", format="nq_open")])
    eval_fraction: float = Field(0.5, gt=0.0, lt=1.0, description="share of `split: both` queries held out for "
                                 "evaluation (seeded hash of the query id; the rest is training)")
    max_queries: int | None = Field(4, gt=0, description="per use (train / eval), half ambiguous; null = all")
    sft_fraction: float | None = Field(0.5, gt=0.0, lt=1.0, description="share of the selected training queries "
                                       "for SFT data, the rest for DPO candidates and pairs (disjoint, as in the "
                                       "paper; seeded hash of the id); null: both stages use every training query")
    seed: int = 0
    rounds: int = Field(1, gt=0, description="Y_model sampling rounds; paper: 10")
    n_shots: int = Field(3, ge=0, description="few-shot exemplars per answerer prompt; paper: 5")
    sample_temperature: float = Field(1.0, ge=0.0, le=2.0, description="paper: T=1.0")
    y_model_filter: Literal["query", "answers"] = Field(
        "query", description="query: drop a query whose Y_model matches no gold answer (paper); "
                             "answers: also keep only the model answers that match a gold answer")
    sft_min_answers: int = Field(2, ge=1, description="feasible answers needed to make a clarifying SFT example")
    sft_answer_sets: list[Literal["human", "model"]] = Field(
        ["human", "model"], min_length=1, description="feasible sets that make SFT data (paper: both; Table 2 ablation)")
    n_clarify_sampled: int = Field(1, ge=0, description="sampled clarifying questions besides the greedy one; paper: 5")
    clarify_temperature: float = Field(1.0, ge=0.0, le=2.0)
    n_direct_samples: int = Field(3, gt=0, description="Direct-Ans sampled; paper: 20, top-k kept")
    subjects: list[str] | None = Field(None, description="subject models to evaluate; null = all llm.subjects")
    final_answerer: Literal["answerer", "subject"] = Field(
        "answerer", description="who answers after the clarifying turn (paper: a separate Turn-4 model)")
    random_repeats: int = Field(200, gt=0, description="draws of the random clarify-or-answer baseline")
    bootstrap_samples: int = Field(10_000, gt=0, description="paired bootstrap resamples for Table 1; paper: 10,000")
    significance_alpha: float = Field(0.01, gt=0.0, lt=1.0, description="paper: p < 0.01")
    answer_max_tokens: int = Field(32, gt=0)
    generator_max_tokens: int = Field(220, gt=0)
    subject_max_tokens: int = Field(48, gt=0)
    subject_output: Literal["free_text", "json"] = Field(
        "free_text", description="free_text: the paper's protocol; json: schema-enforced for weak models")

    @model_validator(mode="after")
    def _has_inputs(self) -> DoubleTurnConfig:
        if not self.inputs:
            raise ValueError("double_turn.inputs: list at least one QA file")
        return self
