"""Double-turn preferences (Zhang, Knox & Choi): label clarify-or-answer responses by simulating each user's next turn.

Paper terms used throughout:
- query x with k users u_1..u_k, user i expecting answer y_i (one interpretation = one alias list);
- feasible answer sets Y_human (annotations) and Y_model (few-shot answerer samples, §4 SFT data);
- clarifying question q, the user's clarifying answer a_i = psi(x, q, y_i) (may abstain; a reply that
  contains y_i leaks it and counts as an abstain), the answer after clarification y_hat_i = M(x, q, a_i);
- double-turn score(q) = mean_i EM(y_hat_i, y_i); a direct answer y_hat is scored against every y_i;
  ties between a clarifying question and a direct answer go to the direct answer (§3.1);
- phi(r): a response is a clarifying question when it starts with "Clarifying Question:" (§2.2);
- answer-set F1 between R and {y_1..y_k}, the own-user rule for clarify systems, average turns,
  Direct-Answer accuracy and the random baseline at the same DA% (Tables 1 and 4).

One module per step: qa (query sets), answers (Y_model, answers after clarification), sft (clarify SFT
data), candidates, simulation (psi), preferences (double-turn / single-turn labels, pairs), exports (TRL
datasets), evaluation + answer_set (Tables 1 and 4), metrics. No Dagster, no I/O; the model only through
a `chat` callable.
"""
