"""Benchmark cases of a job: suites validated without running them, suite files sent with a
request (stored by sha256), and named benchmark sets registered on a repository."""
