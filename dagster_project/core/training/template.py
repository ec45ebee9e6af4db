"""The template a model was trained on, recorded in its training.json, so every evaluation asks it the way it learned
and reads its reply the way it learned to answer (issue 26: one rule for every trained model).

API (for every evaluation that serves a trained model):

    t = TrainedTemplate.from_record(meta["template"])   # or trained_template(model, subject) in core/clarifymt
    messages = t.render(history, **values)              # history: the dialogue so far, ending with the user
    decision = t.parse(reply, candidates=[...])         # llm.protocol.Decision(action, text)
    t.json_schema                                       # a JSON reply's schema for the request, None for free text

Record fields (training.json "template"): `name` (which export family), `system` (system prompt, a string.Template;
"" = no system message), `user` (the user-message template), `slot` (the placeholder the latest user message
fills), `reply_format` (the reply in words), `parser` (one of PARSERS). `render` wraps only the latest user
message; earlier turns go in as they are. `parse` returns action clarify / answer / invalid and the text: the
clarifying question, the answer, or for `intent_name` the intent (or "out of domain"; needs `candidates`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from string import Template
from typing import Any

from pydantic import BaseModel

from dagster_project.io.status import Status
from dagster_project.llm.chat import Message
from dagster_project.llm.prompts import ReplyFormat, load_prompt
from dagster_project.llm.protocol import Decision, parse_decision
from dagster_project.llm.task import parse_json_object, reply_schema
from dagster_project.llm.trained import TrainedModelMissing, missing_message, recorded_template, training_dir

_CLARILM_RE = re.compile(r"^[\s\"'*_`>#]*need\s+clarification\s*[:\-]?[\s*_`\"']*(yes|no)\b[\s.:;,*_`\"'-]*",
                         re.IGNORECASE)


def _clarilm(reply: str, **_: Any) -> Decision:
    """ClariLM's T(q): 'Need clarification: yes' + question, or 'Need clarification: no' + answer."""
    m = _CLARILM_RE.match(reply)
    if not m:
        return Decision("invalid", reply)
    return Decision("clarify" if m.group(1).lower() == "yes" else "answer", reply[m.end():].strip())


def _double_turn_json(reply: str, **_: Any) -> Decision:
    """The double-turn JSON reply: {"action", "text"} (Clarify-or-Direct), or {"clarifying_question"} / {"answer"}."""
    obj, _err, _repaired = parse_json_object(reply, lenient=True)
    if not isinstance(obj, dict):
        return Decision("invalid", reply)
    action, text = obj.get("action"), obj.get("text")
    if action in ("clarify", "answer") and isinstance(text, str) and text.strip():
        return Decision(action, text.strip())
    for key, act in (("clarifying_question", "clarify"), ("answer", "answer")):
        if isinstance(obj.get(key), str) and obj[key].strip():
            return Decision(act, obj[key].strip())
    return Decision("invalid", reply)


def _double_turn_text(reply: str, **_: Any) -> Decision:
    """The double-turn free text: 'Clarifying Question: ...' or the short answer (the paper's phi)."""
    from dagster_project.core.double_turn.evaluation import parse_turn2

    p = parse_turn2(reply)
    if p["status"] != Status.OK:
        return Decision("invalid", reply)
    return Decision(p["action"], p["clarifying_question"] or p["answer"])


def _intent_name(reply: str, candidates: Sequence[str] | None = None, **_: Any) -> Decision:
    """The intents assistant: an intent name or "out of domain" (answer), or one clarifying question (clarify)."""
    from dagster_project.core.intents.assistant import parse_assistant_reply

    if candidates is None:
        raise ValueError("parser intent_name needs the conversation's candidate intents (candidates=...)")
    r = parse_assistant_reply(reply, list(candidates))
    action = {"intent": "answer", "out_of_domain": "answer", "clarify": "clarify"}.get(r.action, "invalid")
    return Decision(action, r.text if action != "invalid" else reply)


def _facet_json(reply: str, **_: Any) -> Decision:
    """The FM-LOG facet miner's JSON {"facet", "clarifying_question"}: a clarifying question about the facet."""
    obj, _err, _repaired = parse_json_object(reply, lenient=True)
    if isinstance(obj, dict) and all(isinstance(obj.get(k), str) and obj[k].strip()
                                     for k in ("facet", "clarifying_question")):
        return Decision("clarify", obj["clarifying_question"].strip())
    return Decision("invalid", reply)


_YES_NO_RE = re.compile(r"^[\s\"'*_`]*(yes|no)\b", re.IGNORECASE)


def _yes_no(reply: str, **_: Any) -> Decision:
    """The yes/no relevance judgement of the generative re-ranker: answer "yes" or "no" (its first word)."""
    m = _YES_NO_RE.match(reply)
    return Decision("answer", m.group(1).lower()) if m else Decision("invalid", reply)


PARSERS: dict[str, Callable[..., Decision]] = {
    "clarifymt_protocol": lambda reply, **_: parse_decision(reply),
    "clarilm_need_clarification": _clarilm,
    "double_turn_json": _double_turn_json,
    "double_turn_text": _double_turn_text,
    "intent_name": _intent_name,
    "yes_no": _yes_no,
    "fm_log_facet": _facet_json,
}


def _json_reply(parser: str) -> type[BaseModel] | None:
    """The JSON reply a parser reads (None: free text): requests carry its schema, as the model's own paper's
    evaluation sends it, so a grammar-constrained backend keeps the reply in the format the model learned."""
    if parser == "double_turn_json":
        from dagster_project.core.double_turn.evaluation import Decision as ClarifyOrDirect

        return ClarifyOrDirect
    if parser == "fm_log_facet":
        from dagster_project.core.clarilm.facets import Facet

        return Facet
    return None


class TemplateError(ValueError):
    """A template record that cannot be used (a missing field, an unknown parser)."""


@dataclass(frozen=True)
class TrainedTemplate:
    """How a model was prompted in training and how its replies are read (module docstring: the fields)."""

    name: str
    system: str
    user: str
    slot: str
    reply_format: str
    parser: str

    def __post_init__(self) -> None:
        if self.parser not in PARSERS:
            raise TemplateError(f"template {self.name!r}: unknown parser {self.parser!r}; known: {sorted(PARSERS)}")
        if f"${self.slot}" not in self.user and f"${{{self.slot}}}" not in self.user:
            raise TemplateError(f"template {self.name!r}: user template has no ${self.slot} placeholder")

    @property
    def version(self) -> str:
        """name@sha256 prefix of the prompt parts: the prompt_version of the requests it renders."""
        digest = hashlib.sha256(f"{self.system}\x00{self.user}\x00{self.parser}".encode()).hexdigest()[:12]
        return f"trained:{self.name}@{digest}"

    @property
    def json_schema(self) -> dict[str, Any] | None:
        """The schema of a JSON reply format, sent with every request it renders; None for free text."""
        reply = _json_reply(self.parser)
        return reply_schema(reply) if reply is not None else None

    def values_needed(self) -> list[str]:
        """Placeholders besides `slot` that `render` must be given (the intents catalogue and examples)."""
        names = {m.group("named") or m.group("braced") for t in (self.system, self.user)
                 for m in Template.pattern.finditer(t) if m.group("named") or m.group("braced")}
        return sorted(names - {self.slot})

    def render(self, history: Sequence[Message], **values: Any) -> list[Message]:
        """System message (when the template has one), the earlier turns as they are, then the latest user
        message in the user template; a placeholder without a value raises KeyError naming it."""
        if not history or history[-1]["role"] != "user":
            raise ValueError("render needs a history that ends with a user message")
        *earlier, last = history
        out: list[Message] = []
        if self.system.strip():
            out.append({"role": "system", "content": Template(self.system).substitute(values).strip()})
        out += [dict(m) for m in earlier if m["role"] != "system"]  # type: ignore[misc]
        user = Template(self.user).substitute({**values, self.slot: last["content"]}).strip()
        return [*out, {"role": "user", "content": user}]

    def _user_match(self, content: str) -> re.Match[str] | None:
        parts = re.split(r"(\$\w+|\$\{\w+\})", self.user.strip())
        pattern = "".join(("(?P<slot>.*)" if p.strip("${}") == self.slot else ".*?") if p.startswith("$")
                          else re.escape(p) for p in parts)
        return re.fullmatch(pattern, content.strip(), re.DOTALL)

    def unwrap(self, content: str) -> str:
        """The user's own text inside a user message rendered by this template (the message itself when it does
        not match): what the held-out check compares with evaluation queries."""
        m = self._user_match(content)
        return m.group("slot").strip() if m else content

    def mismatch(self, prompt: Sequence[Message]) -> str | None:
        """Why a training prompt was not rendered by this template (its system prompt, when the template's needs
        no values, and its last user message are compared), or None: the record must be what the model saw."""
        users = [m["content"] for m in prompt if m["role"] == "user"]
        if not users:
            return "the prompt has no user message"
        if not self.values_needed():
            systems = [m["content"].strip() for m in prompt if m["role"] == "system"]
            want = [Template(self.system).substitute().strip()] if self.system.strip() else []
            if systems != want:
                return f"system prompt {systems[:1]!r:.80} is not the template's {want[:1]!r:.80}"
        if self._user_match(users[-1]) is None:
            return f"user message {users[-1]!r:.80} is not in the template's user part"
        return None

    def parse(self, reply: str | None, **context: Any) -> Decision:
        """The decision in a reply, read by this template's parser (never raises, except for a missing context)."""
        return PARSERS[self.parser]((reply or "").strip(), **context)

    def record(self) -> dict[str, str]:
        """The training.json entry."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: Mapping[str, Any] | None, where: str = "training.json") -> TrainedTemplate:
        """A template from its training.json entry; a missing or incomplete entry raises TemplateError naming
        `where` and the missing field."""
        if not isinstance(record, Mapping):
            raise TemplateError(f"{where} has no `template` field")
        missing = [f.name for f in fields(cls) if not isinstance(record.get(f.name), str)]
        if missing:
            raise TemplateError(f"{where}: `template` lacks field(s) {missing}")
        return cls(**{f.name: record[f.name] for f in fields(cls)})


def _from_prompt(name: str, prompt: str, slot: str, reply_format: str, parser: str,
                 fmt: ReplyFormat | None = None) -> TrainedTemplate:
    p = load_prompt(prompt, fmt)
    return TrainedTemplate(name, p.system, p.user, slot, reply_format, parser)


def clarifymt_template() -> TrainedTemplate:
    """ClarifyMT's plain evaluation prompt (evaluate_base): 'The answer is' / 'The clarifying question is'."""
    return _from_prompt("clarifymt", "evaluate_base", "message",
                        'starts with "The answer is" or "The clarifying question is"', "clarifymt_protocol", "text")


def clarilm_template(system_prompt: str) -> TrainedTemplate:
    """ClariLM's SFT / DPO / held-out rows: annotations.system_prompt, the bare question, 'Need clarification'."""
    return TrainedTemplate("clarilm", system_prompt, "$message", "message",
                           "'Need clarification: yes' + a clarifying question, or 'Need clarification: no' + the answer",
                           "clarilm_need_clarification")


def double_turn_template(output: str) -> TrainedTemplate:
    """The double-turn Clarify-or-Direct prompt (double_turn_subject_decide) in double_turn.subject_output."""
    if output == "json":
        return _from_prompt("double_turn", "double_turn_subject_decide", "question",
                            'JSON {"action": "clarify" | "answer", "text": ...}', "double_turn_json")
    return _from_prompt("double_turn", "double_turn_subject_decide", "question",
                        '"Clarifying Question: ..." or the short answer', "double_turn_text")


def intents_template() -> TrainedTemplate:
    """The intents assistant prompt (intents_assistant): an intent name, one clarifying question or
    "out of domain"; render needs `catalogue` and `examples` (core/intents/assistant.py renders both)."""
    return _from_prompt("intents", "intents_assistant", "query",
                        'an intent name from the list, one clarifying question, or "out of domain"', "intent_name",
                        "text")


def load_trained_template(model: str, subject: str | None = None) -> TrainedTemplate:
    """The template a `training/<name>` model was trained on; TrainedModelMissing (naming the subject, its folder's
    training.json and the missing field, and saying to retrain) when the folder has none or an incomplete one."""
    record = recorded_template(model, subject)
    where = str(training_dir(model) / "training.json")
    try:
        return TrainedTemplate.from_record(record, where)
    except TemplateError as err:
        raise TrainedModelMissing(missing_message(model, subject, f"{err}; retrain it")) from None
