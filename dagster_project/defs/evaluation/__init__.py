"""Group `evaluation`: methods x subject models on every dialogue turn, LLM judge, metric tables and the report.
