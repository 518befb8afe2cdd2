"""Where each test runs: the fast lane (`scripts/test.sh --quick` leaves out what is slow) and the order in which
xdist's workers take the long tests (longest first, so that no worker is left alone with a long test at the end)."""

from __future__ import annotations

# The tests `scripts/test.sh --quick` leaves out, besides those marked `slow` in their files: whole modules and
# single tests that took 5 s or more each (pytest --durations, two xdist workers on the 2-core VM), so that the
# fast lane stays within 2 minutes. A module name alone marks every test in it.
SLOW = {
    "test_report_browser.py",  # Chromium: 5-130 s a test
    "test_report_pages.py",  # the fixtures' report (95 s) and every page of it in Chromium
    "test_hostile_corpus.py",  # builds the hostile corpus (29 s) before its first test
    "test_ort_isolation.py",  # onnxruntime sessions in crashing, hanging processes: 11-37 s a test
    "test_models.py",  # builds the ONNX models (22 s)
    "test_ort.py",  # onnxruntime sessions; its model fixture takes 8 s
    "test_report.py::test_report_from_real_runs_via_cli",
    "test_report.py::test_the_gates_history_is_read_light_and_equal_to_the_records",
    "test_packed.py::test_every_fixture_run_packs_to_what_its_journal_stores",
    "test_packed.py::test_a_real_run_packs_itself_and_collect_reads_the_copy",
    "test_bench_fleet.py::test_the_fleet_marks_documented_nondeterminism_as_real_runs_do",
    "test_docs_commands.py::test_the_docs_commands_run_as_written",
    "test_hostrun.py::test_native_cpu_worker_measures_and_files_its_run",
    "test_overlays.py::test_run_no_docker_runs_each_stack_in_its_own_environment",
    "test_slurm_render.py::test_generated_hostile_values",
    "test_identity.py::test_native_run_on_two_slots_files_two_machines_of_the_node",
    "test_collect.py::test_real_cpu_sweep_collects_and_recollect_changes_nothing",
    "test_collect_concurrent.py::test_two_collects_into_one_new_store_at_once",
    "test_paired.py::test_two_gpu_backward_upgrade_in_full",
    "test_paired.py::test_two_gpu_aa_studies_fail_on_nothing_but_a_few_process_levels",
    "test_paired.py::test_upgrade_command_runs_an_aa_study_on_the_cpu",
    "test_report.py::test_the_upgrade_page_answers_what_cudnn_927_changed",
    "test_sweep_cpu.py::test_every_slice_says_where_its_time_went",
    # measured at 9-33 s each under a load of about 10 on the 2-core VM (2-6 s on a quiet one)
    "test_page_permalinks.py::test_hash_id_never_throws_on_a_generated_fragment",
    "test_upgrade_page.py::test_the_page_opens_with_the_verdict_and_folds_the_calibration",
    "test_paired.py::test_two_gpu_upgrade_is_confirmed_by_the_swap",
    "test_paired.py::test_aa_pairs_timed_in_two_processes_fail_on_at_most_one_kernel",
    "test_paired.py::test_h200_cudnn_upgrade_names_what_changed",
    "test_paired.py::test_cudnn8_on_the_h200_reproduces_the_fconv2d_report",
    "test_paired.py::test_two_gpu_aa_studies_in_two_processes_on_one_host",
    "test_paired.py::test_two_process_aa_pairs_of_the_evening_fail_on_nothing",
    "test_paired.py::test_two_gpus_of_one_host_are_two_machines_and_differ_on_one_kernel",
    "test_paired.py::test_split_placements_aa_studies_on_one_h200",
    "test_paired.py::test_studies_in_a_store_are_found_and_judged",
    "test_paired.py::test_aa_pairs_after_the_capped_batch_discard_fail_on_nothing",
    "test_paired.py::test_a_call_whose_processes_disagree_is_ambiguous_with_their_levels",
    "test_paired.py::test_h200_aa_study_finds_nothing_but_time_noise",
    "test_impact.py::test_a_layer_made_10_percent_slower_moves_the_impact_by_its_weighted_share",
    "test_records.py::test_distinct_accepted_identities_have_distinct_keys",
    "test_signals.py::test_a_report_whose_judge_is_killed_still_ends",
    "test_rollup.py::test_the_pages_show_the_net_line_and_the_groups",
    "test_sweep_cpu.py::test_repro_in_a_fresh_process_matches",
    "test_sweep_cpu.py::test_cpu_sweep_measures_torch_and_skips_cudnn_with_a_reason",
    "test_report.py::test_one_name_on_two_gpus_is_two_machines_on_every_page",
    "test_worker.py::test_isolated_torch_sweep_matches_in_process",
    "test_workload_impact.py::test_a_training_step_pools_a_gpus_forward_and_backward_studies",  # 12 s
    "test_sweep_signals.py",  # real sweeps with worker pools under real signals: 2-5 s a test
}


# scripts/test.sh hands whole modules to xdist's three workers (--dist loadfile: a module's fixtures, such as a Slurm
# cluster, a built wheel or the hostile corpus, are made once) in this order: the first three start the three workers
# and each next one goes to the worker that runs out first. The two cores stay busy only where no worker waits with
# nothing to compute (a per-test timeline and vmstat on the 2-core VM, docs/history.md): the first module builds the
# session's fixture report (tests/conftest.py) while the second and third need none of it; its readers come fourth
# and fifth, when it is nearly built; the Slurm cluster's two users (one cluster at a time, tests/slurm_cluster.py)
# sit far apart; the modules that mostly wait on signals and hung processes do not end the run. The modules not named
# follow in their own order (longest first within the list, pytest --durations).
FIRST_MODULES = [
    "test_report.py", "test_ort_isolation.py", "test_collect_plain_real.py", "test_report_pages.py",
    "test_report_browser.py", "test_fleet_night.py", "test_paired.py", "test_untrusted_inputs.py",
    "test_hostile_corpus.py", "test_asv_continuous.py", "test_ort.py", "test_packed.py", "test_models.py",
    "test_slurm_cluster.py", "test_packaging.py", "test_docker_integration.py", "test_kill_resume.py",
    "test_sweep_signals.py", "test_slurm_render.py", "test_sweep_cpu.py", "test_records.py", "test_bench_asv.py",
    "test_signals.py", "test_overlays.py", "test_docs_commands.py", "test_page_permalinks.py", "test_upgrade_page.py",
    "test_identity.py", "test_impact.py", "test_hostrun.py", "test_worker.py",
]
BUILDS_THE_FIXTURE_REPORT = "test_report.py::test_fixture_report_answers_the_seed_questions"


def _names(item) -> tuple[str, str]:
    file = item.path.name
    return file, f"{file}::{item.originalname}"


def is_slow(item) -> bool:
    file, name = _names(item)
    return file in SLOW or name in SLOW


_RANK = {name: i for i, name in enumerate(FIRST_MODULES)}


def start_rank(item) -> tuple[int, int]:
    """(the module's place in FIRST_MODULES, 0 for the test that builds the fixture report): a stable sort by it
    keeps each module's tests together."""
    file, name = _names(item)
    return _RANK.get(file, len(FIRST_MODULES)), int(name != BUILDS_THE_FIXTURE_REPORT)
