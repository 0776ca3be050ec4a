"""A long NPC conversation through the core's conversation policy: per turn, the tokens reused
from the session's KV, the tokens prefilled, the reply's length, the messages dropped so far and
the finish reason; then totals.

    .venv/bin/python tests/bench/conversation_turns.py smollm2 256 24   # model, cap, max_tokens
"""

from __future__ import annotations

import sys

import geist
from geist import models

PERSONA = "You are Brom, the village blacksmith. Answer in one short sentence."
LINES = ["Can you fix my sword?", "How much will it cost?", "Do you have any shields?",
         "Where can I find iron ore?", "Who lives in the castle?", "Is the forest dangerous?",
         "What is your favourite tool?", "Have you seen a dragon?", "Can I sleep here tonight?",
         "Do you know the innkeeper?"]


def main() -> None:
    name, cap, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    turns = int(sys.argv[4]) if len(sys.argv) > 4 else 30
    eng = geist.Engine(n_threads=2)
    m = geist.Model.load(models.get(name), engine=eng)
    s = m.session(max_seq_len=cap)
    msgs = [{"role": "system", "content": PERSONA}]
    rows = []
    print("turn reused prefilled reply dropped finish")
    for t in range(turns):
        msgs.append({"role": "user", "content": LINES[t % len(LINES)]})
        r = s.chat(msgs, max_tokens=max_tokens, temperature=0.0).result()
        rows.append(r)
        print(t, r.n_reused, r.n_prompt, len(r.ids), r.n_dropped, r.finish_reason)
        msgs.append({"role": "assistant", "content": r.text})
    reasons = [r.finish_reason for r in rows]
    print("finish:", {k: reasons.count(k) for k in sorted(set(reasons))})
    print("prefilled", sum(r.n_prompt for r in rows), "reused", sum(r.n_reused for r in rows))


if __name__ == "__main__":
    main()
