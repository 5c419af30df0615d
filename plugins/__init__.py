"""Example plugins to copy: a throttler, a retry strategy and a correlation function.

They sit at the repository root, beside ``hipq/``, and are not installed with hipq:
run hipq from the repository root (the current directory is on the import path)
and name them in YAML or over the API (``plugins`` is in ``api.plugin_modules`` by
default)::

    throttler: {plugin: "plugins.example_throttlers:SlowStart", options: {step: 5}}
    retry: {plugin: "plugins.example_retries:TransientOnly", options: {delay_seconds: 30}}
    correlation: {plugin: "plugins.example_correlations:invoice_key"}

Each is written against the public plugin API only (``hipq.plugins``) and is
tested in ``tests/unit/test_example_plugins.py``.
"""
