"""safebox: run an untrusted command inside bubblewrap + Landlock + seccomp.

Kept import-light on purpose: ``safebox exec`` starts on a hot path.
"""

__version__ = "0.1.0"
