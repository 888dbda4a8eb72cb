"""The violations feed: one event for each thing the sandbox refused.

``table`` turns the resolved policy into the supervisor's table (what each
layer allows where); ``observer`` runs the supervisor next to the sandbox
and collects its records; ``feed`` explains them (rule, errno, fix), writes
the ``denied`` audit events and the end-of-run summary. The design, the
schema and what is not observed: docs/violations.md.

Import-light: nothing here is imported unless the run observes, and
``feed`` only when there is something to explain.
"""
