"""``cpkv-serve``, the command: what runs in the user's shell before SGLang starts.

- ``cli``: the console script (``main``); ``_flags``: cpkv's own flags and their translation;
  ``_preflight``, ``_machine``, ``_model_check``, ``_sglang_argv``, ``_sglang_options``: every
  input checked before SGLang is imported; ``_dry_run``, ``_report``, ``_report_plugin``,
  ``_report_shared_kv``: the ``--dry-run`` resolution and its report.

It may import the plugin (``sglang_cpkv.plugin``: the dry run activates it and reports what it
decided); the plugin never imports it.
"""
