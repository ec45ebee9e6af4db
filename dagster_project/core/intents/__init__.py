"""Intent classification with clarification (seed: "Scaling Intent Understanding", Nandi et al.).

One module per step: catalog (intent catalogue, name matching), utterances (tagged data, splits), ambiguous
(§2.1.1 edit + verification, intent pairs, provided queries), assistant (prompt and reply protocol), simulation
(§2.1.2 assistant / user conversations), scoring (§2.3, Appendices D/E: ARS, quality, SDRS), curation (Appendix A
top-percentile cut, §2.2.1 label dropout, Appendix C TRL rows), evaluation (Table 2 layout + OOD), metrics.

Pure Python: data in, data out. The one place that reaches an LLM is the `chat(role, requests)` callable the caller
passes in (an LLMSession in Dagster, a script in tests).
"""
