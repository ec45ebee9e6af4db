"""Writes the small sample chat-log set shipped for the demo and the tests (run from the repo root).

    .venv/bin/python data/logs/build_sample.py

Every conversation below was written for this project. Four files, one per supported input shape:

- sharegpt_sample.json       ShareGPT JSON array: {id, conversations: [{from: human|gpt|system, value}]}
- wildchat_sample.jsonl.gz   WildChat-style gzip JSONL: {conversation_hash, timestamp, language, model,
                             conversation: [{role, content}]}, plus deliberately malformed lines
- openai_sample.jsonl        OpenAI chat JSONL: {id, created, messages: [{role, content}]}
- parquet_sample.parquet     Parquet with the WildChat fields
- sharegpt_refinements.json  ShareGPT JSON array: users who refine their own question after an answer (the
                             ClariLM paper's FM-LOG signal) and clarifying questions at the end of long
                             assistant turns (what logs.prefilter_max_chars drops)

Some conversations hold real clarification exchanges (the assistant asks, the user narrows the request),
some hold assistant questions that are not clarifications (offers, intent shifts), most hold none.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent

# ---------------------------------------------------------------- conversations: (user, assistant, user, ...)
CLARIFYING = [
    ["Can you recommend a good laptop?",
     "Happy to help. What will you mostly use it for, and what is your budget?",
     "Mostly video editing, and I can spend up to 1500 dollars.",
     "For video editing under 1500 dollars, look for 32 GB of RAM and a recent GPU; a 16-inch model with a "
     "good screen is a solid choice."],
    ["Book me a table for dinner tonight.",
     "Sure. Which city are you in, and how many people will be joining?",
     "Lisbon, for four people around 8pm.",
     "I cannot book directly, but for four at 8pm in Lisbon you could try a tasca in Alfama; call ahead."],
    ["How do I install Python?",
     "Which operating system are you using: Windows, macOS or Linux?",
     "I'm on Ubuntu 22.04.",
     "On Ubuntu 22.04 run `sudo apt update && sudo apt install python3 python3-pip`."],
    ["Write a poem about my dog.",
     "I'd love to. What is your dog's name, and would you like it funny or heartfelt?",
     "His name is Biscuit and I want something funny.",
     "Biscuit the bold, a thief of socks, guardian of the biscuit box..."],
    ["What's the weather like this weekend?",
     "Could you tell me which city you want the forecast for?",
     "Toronto, please.",
     "I cannot fetch live forecasts; check Environment Canada's site for Toronto."],
    ["Help me plan a trip.",
     "Where would you like to go, and how many days do you have?",
     "Japan for ten days in April.",
     "Ten days in April: Tokyo (4 days), Kyoto (3), Osaka (2), and a day trip to Nara."],
    ["Translate this sentence for me: 'the meeting is postponed'.",
     "Which language should I translate it into?",
     "Into German.",
     "Die Besprechung ist verschoben."],
    ["Give me a workout plan.",
     "Do you want to build strength, lose weight, or improve endurance? And how many days a week can you train?",
     "Build strength, three days a week, with dumbbells at home.",
     "Day A: goblet squats, presses, rows; Day B: lunges, floor press, deadlifts; alternate A/B/A."],
    ["Recommend a book to read.",
     "What genres do you usually enjoy, fiction or non-fiction?",
     "Science fiction, something not too long.",
     "Try 'The Left Hand of Darkness' by Ursula K. Le Guin, or Ted Chiang's short stories."],
    ["How much should I charge for my services?",
     "What kind of services do you offer, and in which country do you work?",
     "Freelance logo design in Spain.",
     "Freelance logo designers in Spain often charge 150 to 600 euros per logo depending on experience."],
    ["Fix my code, it doesn't work.",
     "Could you paste the code and the error message you see? Which language is it?",
     "Python: `print(len(5))` gives TypeError: object of type 'int' has no len().",
     "`len` needs a sequence; use `len(str(5))` if you want the number of digits."],
    ["I need a visa.",
     "Which country do you need the visa for, and what is your nationality?",
     "A tourist visa for Canada, I'm from India.",
     "Indian citizens need a Canadian visitor visa (TRV); apply online through IRCC with biometrics."],
]

NOT_CLARIFYING_QUESTIONS = [  # the assistant asks something, but the next user turn is no clarification
    ["Explain the different types of registers in ARM.",
     "ARM has general-purpose registers R0-R12, SP, LR and PC, plus CPSR. Would you like more detail on any of them?",
     "What is the MSR instruction used for?",
     "MSR moves a value from a general-purpose register into a status register."],
    ["What is the capital of Australia?",
     "Canberra. Is there anything else you want to know?",
     "Tell me a joke about penguins.",
     "Why don't penguins fly? They're not that kind of bird-brained."],
    ["Summarize the plot of Hamlet in two sentences.",
     "Prince Hamlet seeks revenge on his uncle, who murdered his father and married his mother. His hesitation "
     "leads to the deaths of nearly everyone around him. Do you want a longer version?",
     "No thanks. Who wrote Macbeth?",
     "William Shakespeare wrote Macbeth, around 1606."],
    ["Convert 100 Fahrenheit to Celsius.",
     "100 F is about 37.8 C. Do you need the formula too?",
     "Yes, show me the formula.",
     "C = (F - 32) x 5/9."],
]

NO_QUESTIONS = [
    ["What is the boiling point of water at sea level?", "100 degrees Celsius, or 212 Fahrenheit."],
    ["Who painted the Mona Lisa?", "Leonardo da Vinci, in the early 16th century."],
    ["List three prime numbers greater than 10.", "11, 13 and 17."],
    ["Explain what a hash map is in one paragraph.",
     "A hash map stores key-value pairs and uses a hash function to find a bucket for each key, giving "
     "average constant-time lookups."],
    ["How many continents are there?", "Seven: Africa, Antarctica, Asia, Australia, Europe, North America, "
     "South America."],
    ["Write a haiku about autumn rain.", "Cold rain on red leaves / the gutter hums a slow song / tea steam on "
     "the glass"],
    ["What does HTTP stand for?", "HyperText Transfer Protocol.",
     "And HTTPS?", "HTTP Secure: HTTP over TLS."],
    ["Give me a synonym for 'happy'.", "Cheerful."],
    ["How do I reverse a list in Python?", "Use `my_list.reverse()` in place, or `my_list[::-1]` for a copy."],
    ["What year did the Berlin Wall fall?", "1989."],
    ["Explain photosynthesis briefly.",
     "Plants use light energy to turn carbon dioxide and water into glucose and oxygen.",
     "Where does it happen in the cell?", "In the chloroplasts."],
    ["Name the largest planet in the solar system.", "Jupiter."],
    ["what about it", "Could you say more about what you mean?"],  # context-dependent first question
    ["Calculate 15% of 240.", "15% of 240 is 36."],
    ["What is the difference between weather and climate?",
     "Weather is short-term conditions; climate is the long-term average of weather in a region."],
    ["Sort these words alphabetically: pear, apple, mango.", "apple, mango, pear."],
]

NON_ENGLISH = [
    ["¿Cuál es la capital de Francia?", "La capital de Francia es París."],
    ["Wie spät ist es in Tokio, wenn es in Berlin Mittag ist?", "Dann ist es in Tokio 20 Uhr (Winterzeit)."],
]


REFINING_USERS = [  # the user narrows the request after the assistant answered (no clarifying question asked)
    ["Suggest a name for my bakery.",
     "How about 'Golden Crust', 'Rise and Shine' or 'The Flour Pot'?",
     "It should sound French and be a single short word.",
     "Try 'Levain', 'Brioche' or 'Fournil'."],
    ["Find me a recipe for soup.",
     "A classic tomato soup: soften an onion and garlic, add canned tomatoes and stock, simmer 20 minutes, blend.",
     "I need something vegan with lentils that is ready in 30 minutes.",
     "Red lentil soup: onion, carrot, cumin, red lentils and stock; simmer 20 minutes and finish with lemon."],
    ["What programming language should I learn?",
     "Python is a popular first language: readable, versatile and well supported.",
     "I mainly want to build apps for the iPhone.",
     "Then learn Swift with SwiftUI; Apple's free tutorials are a good start."],
    ["Tell me about the Roman Empire.",  # a follow-up on the answer, not a refinement
     "The Roman Empire began in 27 BC under Augustus and its western half fell in AD 476.",
     "Who came after Augustus?",
     "Tiberius, his stepson, from AD 14."],
]

LONG_CLARIFYING = [  # a clarifying question at the end of an assistant turn longer than 300 characters
    ["Help me choose a database for my project.",
     "There are many good options, and the right one depends on your workload. Relational databases such as "
     "PostgreSQL or MySQL are strong when your data has a clear structure and you need transactions; document "
     "stores like MongoDB suit flexible, nested records; key-value stores like Redis shine for caching. Before I "
     "recommend one: what kind of data will you store, and how many requests per second do you expect?",
     "User profiles and orders for a small web shop, about 50 requests per second.",
     "PostgreSQL fits well: relational data, transactions for orders, and 50 requests per second is light."],
    ["I want to start investing.",
     "Good idea to start early. Common routes are low-cost index funds, which spread risk across a whole market; "
     "bonds, which are steadier but grow more slowly; and individual shares, which need research and carry more "
     "risk. Many people also use a tax-advantaged account first. To point you in the right direction: what is "
     "your time horizon, and how much risk are you comfortable with?",
     "Twenty years, and I can accept moderate ups and downs.",
     "A mostly-equity global index fund with some bonds, bought monthly, suits a 20-year moderate-risk plan."],
]


def _sharegpt(cid: str, turns: list[str]) -> dict:
    return {"id": cid, "conversations": [{"from": "human" if i % 2 == 0 else "gpt", "value": t}
                                         for i, t in enumerate(turns)]}


def _wildchat(cid: str, turns: list[str], ts: str, language: str = "English") -> dict:
    return {"conversation_hash": cid, "timestamp": ts, "language": language, "model": "gpt-4o-mini",
            "conversation": [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
                             for i, t in enumerate(turns)]}


def _openai(cid: str, turns: list[str], created: int) -> dict:
    msgs = [{"role": "system", "content": "You are a helpful assistant."}]
    msgs += [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    return {"id": cid, "created": created, "messages": msgs}


DAY1, DAY2, DAY3 = "2024-05-01", "2024-05-02", "2024-05-03"
EPOCH_DAY2 = 1714651200  # 2024-05-02T12:00:00Z


def build() -> dict[str, int]:
    # ShareGPT array (no timestamps: log_date comes from logs.default_log_date)
    share = [_sharegpt(f"sg-{i:02d}", c) for i, c in enumerate(CLARIFYING[:4] + NOT_CLARIFYING_QUESTIONS[:2]
                                                                     + NO_QUESTIONS[:5])]
    (HERE / "sharegpt_sample.json").write_text(json.dumps(share, indent=1, ensure_ascii=False) + "\n")

    # WildChat gzip JSONL, three days, with malformed lines
    good = [_wildchat(f"wc-{i:02d}", c, f"{(DAY1, DAY2, DAY3)[i % 3]}T{9 + i % 8:02d}:15:00Z")
            for i, c in enumerate(CLARIFYING[4:8] + NOT_CLARIFYING_QUESTIONS[2:] + NO_QUESTIONS[5:11])]
    good += [_wildchat(f"wc-es-{i}", c, f"{DAY2}T10:00:00Z", "Spanish" if i == 0 else "German")
             for i, c in enumerate(NON_ENGLISH)]
    lines = [json.dumps(r, ensure_ascii=False).encode() for r in good]
    bad = [
        b'{"conversation_hash": "wc-broken", "conversation": [{"role": "user", "content": "hi"',   # invalid JSON
        json.dumps({"conversation_hash": "wc-norole", "timestamp": f"{DAY1}T08:00:00Z",
                    "conversation": [{"content": "hello?"}, {"role": "assistant", "content": "Hi."}]}).encode(),
        json.dumps({"conversation_hash": "wc-empty", "timestamp": f"{DAY1}T08:00:00Z",
                    "conversation": [{"role": "user", "content": "   "}, {"role": "assistant", "content": "?"}]}
                   ).encode(),
        json.dumps({"conversation_hash": "wc-type", "timestamp": f"{DAY1}T08:00:00Z",
                    "conversation": [{"role": "user", "content": 42}, {"role": "assistant", "content": "42"}]}
                   ).encode(),
        b'{"conversation_hash": "wc-latin1", "conversation": [{"role": "user", "content": "caf\xe9"}]}',  # not UTF-8
        json.dumps({"conversation_hash": "wc-huge", "timestamp": f"{DAY2}T08:00:00Z",
                    "conversation": [{"role": "user", "content": "Summarize: " + "lorem ipsum " * 2500},
                                     {"role": "assistant", "content": "It repeats lorem ipsum."}]}).encode(),
        lines[0],  # the same conversation_hash again
    ]
    with open(HERE / "wildchat_sample.jsonl.gz", "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:  # mtime=0: byte-identical rebuilds
        for line in lines[:6] + bad[:4] + lines[6:] + bad[4:]:
            f.write(line + b"\n")

    # OpenAI chat JSONL with a system message
    oa = [_openai(f"oa-{i:02d}", c, EPOCH_DAY2 + 3600 * i) for i, c in enumerate(CLARIFYING[8:] + NO_QUESTIONS[11:])]
    (HERE / "openai_sample.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in oa))

    # Parquet with the WildChat fields
    pq = [_wildchat(f"pq-{i:02d}", c, f"{DAY3}T1{i}:30:00Z")
          for i, c in enumerate([CLARIFYING[0][:2] + ["For gaming, around 1000 euros."] + CLARIFYING[0][3:],
                                 NO_QUESTIONS[0], NO_QUESTIONS[3]])]
    pl.DataFrame(pq).write_parquet(HERE / "parquet_sample.parquet")

    # ShareGPT array: user refinements and long assistant turns that end with a clarifying question
    more = [_sharegpt(f"sr-{i:02d}", c) for i, c in enumerate(REFINING_USERS + LONG_CLARIFYING)]
    (HERE / "sharegpt_refinements.json").write_text(json.dumps(more, indent=1, ensure_ascii=False) + "\n")
    return {"sharegpt": len(share) + len(more), "wildchat": len(good) + len(bad), "openai": len(oa),
            "parquet": len(pq)}


if __name__ == "__main__":
    print(build())
