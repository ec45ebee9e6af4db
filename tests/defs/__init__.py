"""Package marker: tests/core/test_<module>.py and tests/defs/test_<group>.py share basenames."""
