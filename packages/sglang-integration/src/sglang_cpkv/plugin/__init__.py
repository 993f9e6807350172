"""What runs inside SGLang: the plugin SGLang's ``load_plugins()`` loads in every process it starts
(launcher, engine, each scheduler), the hook table, the hooks and the shared-KV pool.

- ``entry``: the entry point (``load``, ``activate``); ``table``: the hook table, each hook with
  its target, signature, requirements and way out; ``_framework``, ``_applied``: register a hook,
  then check that it took; ``_registered``: which hooks this process registered.
- ``hooks/``: one module per hook; ``shared_kv/``: the pool and its per-forward plan.
- ``_releases``, ``_version_guard``: the SGLang releases the plugin accepts; ``_decisions``: the
  log of what the hooks decided; ``_warmup_m_list``: SGLang's warmup list for ``deepgemm_compat``.

Nothing here imports ``sglang_cpkv.serve`` (the command); ``tests/test_layers.py`` holds that.
Importing this package imports neither sglang nor torch.
"""
