"""What-if replay of a recorded history (issue 29): the timeline engine fed a real history.

`features.history_csv` / `features.history_ingest` read the history; `jobs.replay_input`
turns it into the timeline's `Nodes` and `Jobs`; `run.run_whatif` replays it under every
policy (and right-sizes); `metrics` summarizes per policy, `report` writes report.html and
`summary` the terminal summary.
"""
