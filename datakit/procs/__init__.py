"""Process plumbing shared by the loader and conversion: pipes, a worker's tie to its parent, failures.

Both ``datakit.DataLoader``'s workers and conversion's reader processes are
plain processes talking over private pipes, so they share one implementation
of each piece:

* ``channel``: sending on a pipe with a liveness check while waiting for room,
  and receiving into one buffer.
* ``lifeline``: a worker's tie to its parent (dies with it, notices it gone).
* ``failure``: ``WorkerFailure``, the one type in which an exception crosses a
  process (or thread) boundary as a value.

It imports nothing else from datakit (and not torch), so the loader, which
imports nothing else from datakit either, and conversion, which never imports
torch, can both use it.
"""

__all__: list[str] = []
