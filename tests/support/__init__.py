"""What the tests share, one of each, in modules by purpose. A test module imports what it needs
from them (``from support.waiting import wait_until``); the fixtures every folder uses are in
tests/conftest.py.

* ``waiting`` -- ``wait_until`` (every wait polls a condition against a deadline), the server
  clock (``server_ms``, ``wait_server_past``), a replica linked or caught up;
* ``dataset`` -- what a node holds: ``dump``, ``digest``, ``unchanged`` (the dataset is the same
  after a block), ``refused`` (a plain command refused with a code, nothing written), the
  builders of an expected state (``K``, ``R``, ``Z``, ``H``);
* ``queues`` -- ``fresh_name``, ``take``, ``raw`` and ``raw_reply`` (a verb exactly as given), a
  queue with a job in every state and each verb's arguments on it, the asyncio client seen through
  blocking calls;
* ``processes`` -- the repository's paths and ``reap`` for a test's subprocess;
* ``workers`` -- timers that stay out of a test's way, commands sent, blocked waiters, worker
  processes (``WorkerProcess``) and what their handler (tests/worker_apps.py) wrote;
* ``cli`` -- ``emq`` run in-process;
* ``native`` -- trafikey's raw EMQ.* lines (``NativeQueue``) and blocked EMQ.BCLAIM calls;
* ``cluster`` -- queue names placed on chosen primaries, digests and waiters per node, slot moves;
* ``dashboard`` -- a node of its own per dashboard module, a queue with jobs in every state;
* ``upgrade`` -- the data directories earlier releases wrote (tests/upgrade/fixtures), loaded;
* ``markers`` -- which of ``slow``, ``cluster``, ``browser`` a test gets (pure).

A module here imports echomq and its siblings, never a test module.
"""
