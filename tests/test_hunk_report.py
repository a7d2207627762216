"""The 'why' lines of hunk evidence (issue 43), on literal evidence: a named hunk with its share
and cost, hunks that only work together, a range's combined diff, no hunk named and why, and no
evidence of this kind at all."""

from __future__ import annotations

from perfbisect.service.hunks.report import why_lines
from perfbisect.service.hunks.schemas import CaseHunksRead, CulpritHunksRead, HunkEvidence, HunkRead, ShareRead

CASE = "gemm M=512,N=512,K=512,dtype=bf16"


def evidence(*cases: CaseHunksRead, commits: int = 1, skipped: str | None = None) -> HunkEvidence:
    culprit = CulpritHunksRead(label="#930", first_sha="a" * 40, last_sha="b" * 40, commits=commits, searched_hunks=9,
                               skipped=skipped, cases=list(cases), trials=40)
    return HunkEvidence(job_id=1, sha="b" * 40, available=True, localization_job_id=2, status="succeeded",
                        culprit=culprit)


HUNK = HunkRead(index=3, path="minikern/gemm.py", lines="minikern/gemm.py:36-42",
                text=" CONFIGS = {\n-    torch.bfloat16: GemmConfig(128, 256, 64,\n+    torch.bfloat16: GemmConfig(128, 256, 32,")


def test_a_named_hunk_with_its_share_and_cost():
    found = CaseHunksRead(case=CASE, status="found", hunks=[HUNK], share=ShareRead(share=0.97, ci=(0.8, 1.15)),
                          rounds=5, bound=6)
    lines = why_lines(evidence(found))
    assert lines[0] == (f"hunk on {CASE}: minikern/gemm.py:36-42, 97% of the step (80% to 115%) "
                        "[5 rounds (bound 6), 9 hunks searched, 40 trials]")
    assert lines[1:] == ["     CONFIGS = {", "    -    torch.bfloat16: GemmConfig(128, 256, 64,",
                         "    +    torch.bfloat16: GemmConfig(128, 256, 32,"]


def test_a_group_over_a_ranges_combined_diff():
    group = CaseHunksRead(case=CASE, status="group", hunks=[HUNK, HUNK.model_copy(update={"lines": "minikern/a.py:3"})],
                          rounds=4, bound=6)
    line = why_lines(evidence(group, commits=3))[0]
    assert line.startswith(f"hunks that only work together on {CASE}: minikern/gemm.py:36-42, minikern/a.py:3 [")
    assert line.endswith("over the combined diff of 3 commits, 40 trials]")


def test_no_hunk_named_says_why_and_no_evidence_says_because():
    none = CaseHunksRead(case=CASE, status="none", reason="the kept hunks together do not reproduce the step: it lies "
                         "in what was set aside", rounds=1, bound=6)
    assert why_lines(evidence(none))[0].startswith(f"hunk on {CASE}: none named, because the kept hunks together")
    skipped = evidence(skipped="the step is the control's own")
    assert why_lines(skipped) == ["hunk: no evidence of this kind, because the step is the control's own"]
    absent = HunkEvidence(job_id=1, sha="b" * 40, available=False, reason="no hunk localization ran for this bisect")
    assert why_lines(absent) == ["hunk: no evidence of this kind, because no hunk localization ran for this bisect"]
