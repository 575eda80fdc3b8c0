"""Which markers a test gets, decided from what it uses (pure; tests/test_markers.py); applied at
collection by tests/conftest.py, so ``-m "not slow"`` and ``-m cluster`` select by them. The markers
are registered in pyproject.toml (``--strict-markers``: a misspelt one is an error):

* ``cluster``: the test needs a local cluster (three servers per wire and pytest process);
* ``browser``: it drives Debian's chromium through Playwright;
* ``slow``: a long run, left out of a developer's quick set (``./run test -m "not slow"``). Every
  cluster and browser test is slow too, and so is every test that runs worker processes or reads
  a dashboard's servers of its own.

A test gets them from the fixtures it uses (:data:`BY_FIXTURE`), from a ``pytestmark`` of its
module (a module of long runs: chaos, parity, replication), or, where neither can tell, from its
function's name in :data:`BY_NAME`.

``--wire 4`` or ``--wire 6`` (tests/conftest.py) runs one wire: :func:`on_other_wire` decides
which tests it leaves out.
"""

from __future__ import annotations

from typing import Iterable

#: A fixture, and the markers its use gives a test.
BY_FIXTURE: dict[str, tuple[str, ...]] = {
    "cluster4": ("cluster",),  # the session's cluster per wire (tests/conftest.py)
    "cluster6": ("cluster",),
    "cluster": ("cluster",),  # the test's wire's one (tests/reliability/conftest.py)
    "browser": ("browser",),  # tests/test_dashboard_browser.py's chromium
    "out": ("slow",),  # the folder of the test's worker processes (emq worker, one interpreter each)
    "spawn": ("slow",),  # worker processes on the test's server
    "own_servers": ("slow",),  # a dashboard module's two servers of its own, read over HTTP (support/dashboard.py)
}

#: Markers that make a test slow as well.
SLOW_TOO = frozenset({"cluster", "browser"})

#: Tests no fixture marks, by function name (every parameter set), with their markers: a cluster of
#: their own, or seconds of server timers, subprocesses and restarts (from --durations=0 runs of
#: the suite: each took about a second or more on this 2-core machine). Named here, not marked
#: where they stand, so the marks follow a test that moves between files; a new test may carry
#: ``@pytest.mark.slow`` itself. A name here must name a test (tests/test_markers.py).
BY_NAME: dict[str, tuple[str, ...]] = {
    # a LocalCluster of their own, or the session's found through request.getfixturevalue
    "test_a_waiter_rides_out_a_failover": ("cluster",),
    "test_on_a_cluster_every_queue_goes_to_its_slots_primary": ("cluster",),
    # seconds of timers: a promote, a rate window, idle blocks, a lease or a retention running out
    "test_a_promote_reads_the_schedules_head_and_runs_again_when_it_falls_due": ("slow",),
    "test_a_queue_found_empty_by_a_relay_is_waited_on_at_once": ("slow",),
    "test_a_busy_worker_recovers_an_orphaned_lease_as_it_expires": ("slow",),
    "test_a_worker_holds_lane_and_flow_starts_to_the_limit": ("slow",),
    "test_a_worker_waits_out_the_window_without_spinning": ("slow",),
    "test_flow_starts_count_against_the_limit_in_the_same_log": ("slow",),
    "test_an_idle_worker_blocks_and_sends_nothing_until_a_job_comes": ("slow",),
    "test_an_idle_worker_probes_with_one_claim_after_a_block_times_out": ("slow",),
    "test_pause_while_blocked_then_a_plain_resume": ("slow",),
    "test_a_worker_settles_its_completions_in_batches": ("slow",),
    "test_extend_many_splits_past_the_extends_pair_limit": ("slow",),
    "test_a_lane_job_that_dies_of_failures_tells_failed_then_dead_and_a_bad_switch_refuses": ("slow",),
    "test_a_raw_switch_over_the_maximum_keeps_the_maximum": ("slow",),
    "test_a_sigkilled_waiter_is_forgotten_and_settles_stop_telling": ("slow",),
    "test_lane_starts_count_against_the_limit_in_the_same_log": ("slow",),
    "test_a_full_window_holds_the_claims_and_answers_when_it_frees": ("slow",),
    "test_a_worker_drains_a_queue_with_ghosts_under_a_rate_limit": ("slow",),
    "test_an_idle_queue_is_swept_when_its_earliest_lease_expires_not_by_an_interval": ("slow",),
    "test_a_delay_in_a_flow_job_waits_in_flow_schedule_and_spends_no_budget": ("slow",),
    "test_heartbeats_keep_a_long_job_held_past_its_lease": ("slow",),
    "test_retention_expiry_gives_back_its_memory": ("slow",),
    "test_a_timed_out_call_is_connection_failed": ("slow",),
    # refusal matrices, every verb by every bad value, each refusal proven on the shared node's whole
    # DEBUG DIGEST (a digest grows with the node: about 0.2 s a refusal late in a session)
    "test_a_bad_job_id_is_refused_naming_it": ("slow",),
    "test_a_bad_number_is_refused_naming_it": ("slow",),
    # subprocesses: emq, worker and server processes, a replica, a plugin's own pytest run
    "test_a_good_node_passes_every_check_and_doctor_writes_nothing": ("slow",),
    "test_a_replica_sees_the_claims_that_happened_and_no_timeout": ("slow",),
    "test_dead_and_inspect_show_markup_and_escapes_as_text": ("slow",),
    "test_sweep_and_the_refusals_name_ids_escaped": ("slow",),
    "test_events_and_the_enqueue_echo_show_escapes_as_text": ("slow",),
    "test_a_newline_in_an_id_or_an_error_cannot_forge_a_worker_log_line": ("slow",),
    "test_worker_and_commands_see_one_queue": ("slow",),
    "test_the_plugin_gives_a_clean_branded_server_per_test_on_either_wire": ("slow",),
    "test_the_worker_and_its_supervisor_log_no_password": ("slow",),
    "test_a_sigkilled_emq_server_and_a_crashed_valkey_keep_what_the_aof_fsynced": ("slow",),
    "test_jobs_of_every_kind_survive_a_sigterm_and_a_restart_on_the_same_dir": ("slow",),
    "test_no_persist_keeps_the_directory_but_not_the_jobs_and_fsync_always_is_the_servers": ("slow",),
    "test_enqueue_count_holds_a_batch_not_every_job": ("slow",),
    "test_emq_parity_runs_the_instrument_and_reports_a_total": ("slow",),
    "test_tables_are_not_wrapped_when_stdout_is_a_pipe": ("slow",),
    "test_a_burst_worker_on_a_paused_queue_names_what_it_left": ("slow",),
    "test_server_runs_until_sigterm": ("slow",),
    "test_events_follow_in_a_subprocess": ("slow",),
    "test_events_follow_on_a_queue_whose_events_are_off_says_so_then_follows": ("slow",),
    "test_emq_dashboard_serves_until_sigterm_and_asks_for_its_token": ("slow",),
    "test_json_text_reads_as_json_loads_reads_it": ("slow",),
    "test_rediss_never_falls_back_to_plaintext": ("slow",),
    "test_emq_server_stops_on_sigint_and_sigterm_in_the_foreground_and_background": ("slow",),
    "test_emq_server_refuses_a_port_in_use_and_leaves_its_server_alone": ("slow",),
    "test_a_killed_emq_server_takes_its_valkey_with_it": ("slow",),
    "test_what_is_not_an_app_factory_is_refused_before_it_runs": ("slow",),
    "test_the_current_directory_does_not_shadow_the_standard_library": ("slow",),
    "test_a_process_a_handler_forks_ends_and_obeys_sigterm": ("slow",),
    "test_an_emq_worker_process_keeps_results_tracebacks_and_progress": ("slow",),
    "test_enqueue_and_run_are_one_trace_across_two_processes": ("slow",),
    "test_worker_burst_exits_once_its_queue_is_empty": ("slow",),
    "test_a_killed_server_is_connection_failed_on_both_clients_and_the_worker_rides_it_out": ("slow",),
    "test_processes_minting_in_the_same_milliseconds_never_mint_the_same_id": ("slow",),
}


def markers_for(fixtures: Iterable[str], name: str, marked: Iterable[str]) -> set[str]:
    """The markers to add to the test function ``name`` that uses ``fixtures`` and carries
    ``marked`` already (by hand, or its module's): those its fixtures and its name give it, and
    ``slow`` for a cluster or browser test."""
    have = set(marked)
    given = {marker for fixture in fixtures for marker in BY_FIXTURE.get(fixture, ())}
    given |= set(BY_NAME.get(name, ()))
    if (given | have) & SLOW_TOO:
        given.add("slow")
    return given - have


def on_other_wire(params: dict, wire: str | None) -> bool:
    """Whether ``--wire wire`` leaves out a test of these parameters: one parametrised by ``wire``
    (the fixture's 4 and 6, or a module's own) with the other wire. Tests of no wire run on either."""
    return wire is not None and "wire" in params and str(params["wire"]) in ("4", "6") and str(params["wire"]) != wire
