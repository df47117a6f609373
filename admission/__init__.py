"""The admission service: a load-aware, persistent job queue with a stall array.

DESIGN.md section 5; seeds 004_0d38fb078d201fa8.txt (the job queue: CPU limit, emergency
mode, load step, max queue size, start now), 002_f37a5e9ed1baf63b.txt (the stall array)
and 003_c7fb0752ef79ee33.txt (the queue as an SQL table). Modules: ``algorithm`` (the
decisions, pure), ``store`` (jobs, stalls, lanes in SQL), ``runner`` (processes),
``load`` (samples), ``service`` (the threads that tie them), ``api`` (REST), ``cli``
(``floodgate admission ...``), ``config``, ``metrics``.
"""
