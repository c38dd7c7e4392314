"""``tfbatch api``: SageMaker's own API (control plane, Runtime, CloudWatch Logs) served locally.

Layer 15, above ``api`` (run_transform), the engines and ``serve``, below ``cli``. Modules:
``app`` (routes and wire protocols), ``protocol`` (botocore's models: validation, output
shapes, errors), ``sigv4`` (signature checks), ``state`` (SQLite), ``registry`` (operation
table: how a module adds operations), ``listing`` (paging), and one module per resource.
"""
