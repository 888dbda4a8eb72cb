"""The subcommands of ``safebox`` that are groups of their own: ``safebox
policy ...`` (:mod:`~safebox.commands.policy`) and ``safebox mcp ...``
(:mod:`~safebox.commands.mcp`). ``safebox changes ...`` is the review
package's (safebox/review/cli.py), by the same pattern.

Why not in safebox/cli.py: that module is the entry point and ``safebox
exec``'s hot path (every start imports it), and the one place errors become
messages and exit statuses. The groups here are loaded only when the click
application is built (any command but a plain ``exec``), and each gets the
CLI's error mapping passed in (``add_commands(app, guarded)``) rather than
importing the CLI back: the import graph keeps no cycle, and only the CLI
maps errors to exit codes.
"""
