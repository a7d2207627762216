"""The pure bisection engine: verdicts, planner, effect sizes, change points, simulator.

No database, git, Celery or CUDA inside; see docs/architecture.md, contract C2.
"""

from perfbisect.service.bisect.model import (
    BisectConfig,
    CaseEffect,
    CorrectnessFinding,
    CulpritReport,
    Observation,
    PairBlock,
    Plan,
    RevisionState,
    TrialRequest,
    Verdict,
)
from perfbisect.service.bisect.planner import plan_next
from perfbisect.service.bisect.verdict import Comparison, RankTest, SignificanceTest, WelchTest, assess, compare

__all__ = [
    "BisectConfig", "CaseEffect", "Comparison", "CorrectnessFinding", "CulpritReport", "Observation",
    "PairBlock", "Plan", "RankTest", "RevisionState", "SignificanceTest", "TrialRequest", "Verdict", "WelchTest",
    "assess", "compare", "plan_next",
]
