"""Example plugins and targets to copy or use: name them in YAML as
``hipq.contrib.<module>:<attr>`` (e.g. ``hipq.contrib.retries:StepBackoff``). They
live under the ``hipq`` namespace so that a user's own ``plugins`` package never
collides with them."""
