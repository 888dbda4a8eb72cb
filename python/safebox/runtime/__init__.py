"""What changes while the command runs: a host no entry allows is put to
whoever runs the sandbox, and the network lists can be replaced.

* decisions.py: the questions and their answers (``Sandbox(on_request=)``,
  the public ``Decision`` and ``Request``), one worker per sandbox;
* terminal.py: ``safebox exec --ask``, the question on ``/dev/tty``;
* control_fd.py: ``safebox exec --control-fd N``, srt's live lists.

Empty on purpose: a start that asks nothing imports none of it.
"""
