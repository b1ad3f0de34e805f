"""The worker processes: started, fed, heard and stopped, and their answers put back in order.

* ``worker``: the worker process loop, its frozen config, seeding and ``get_worker_info``.
* ``messages``: the messages between the main process and the workers.
* ``batch_contract``: the Protocols of datasets that read whole batches into slots (and finish them).
* ``fetch``: indices to a collated batch (map-style or iterable), in a worker or in-process.
* ``pool``: starting, watching and stopping worker processes.
* ``ordering``: task accounting and reordering (pure, no I/O).
* ``fatal``: a worker's death and the descriptor limit, in torch's words.
"""

__all__: list[str] = []
