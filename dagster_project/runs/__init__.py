"""The run machinery above defs/: group runs, parallel stages, run history and preflight."""
