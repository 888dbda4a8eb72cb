"""``safebox exec --review``: a run's writes held in overlayfs upper layers,
then listed, shown, applied or discarded (docs/review.md).

* :mod:`.mounts` -- the overlays' plan, made inside the sandbox by
  ``safebox-helper --review``;
* :mod:`.store` -- held runs in safebox's state dir;
* :mod:`.layer` -- what a layer holds, as changes, and their diffs;
* :mod:`.apply` -- putting changes on the host, file by file.
"""
