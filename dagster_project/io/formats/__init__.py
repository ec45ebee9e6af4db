"""Dataset formats on top of io.records: each maps one public layout to the pipeline's rows."""
