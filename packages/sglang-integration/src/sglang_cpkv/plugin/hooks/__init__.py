"""The plugin's hooks on SGLang, one module each; the table that registers them is ``plugin.table``.

A hook module imports neither the table nor the entry point: what it needs to know about the
plugin at run time (which hooks this process registered) it reads from ``plugin._registered``.
Importing this package does not import sglang: targets are resolved when the plugin registers.
"""
