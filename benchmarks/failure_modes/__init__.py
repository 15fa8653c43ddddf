"""Failure-mode benchmark: every failure mode of the practical-failure-modes notes as a small real run, planted and
clean (``python benchmarks/failure_modes/run.py``; ``run.run_all()`` for other scripts)."""
