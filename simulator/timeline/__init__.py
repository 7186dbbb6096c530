"""Replay over time with departures, queues and gangs: what prospective placement buys.

`workload` draws the jobs, `engine.run_timeline` replays them under one policy,
`forecast.ReservedSchedule` is the online demand forecast behind the reservation (`reserve`),
`metrics.summarize` and `plot.plot_timeline` report. `run.run_case` runs every policy on one
(profile, seed).
"""
