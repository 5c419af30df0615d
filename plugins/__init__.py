"""Example plugins to copy: load them from YAML as ``plugins.<module>:<attr>``."""
