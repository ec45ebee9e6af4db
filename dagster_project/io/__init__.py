"""Input and output files: the records layer, the quarantine, atomic writers, dataset formats."""
