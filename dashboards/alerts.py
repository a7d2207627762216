"""The regressions list: one row per case that moved (or went wrong) at a confirmed culprit of a
finished job of any outcome, newest first. Pure: `culprit_alerts` turns loaded culprits into rows. When alerts from tracking land
(with a triage state), `dashboards.views.alerts_page` is the one seam to feed them through."""

from __future__ import annotations

from dataclasses import dataclass

from perfbisect.service.bisect.model import stored_step_moved


@dataclass(frozen=True)
class AlertRow:
    repository: str
    job_id: int
    kind: str  # "regression" | "improvement" | "wrong results"
    first_sha: str
    last_sha: str
    subject: str | None
    pr_number: int | None
    case: str | None
    rel: float | None
    ci: tuple[float, float] | None
    triage: str = "untriaged"  # tracking's alerts bring acknowledged / ignored / fixed
    commit_url: str | None = None
    pr_url: str | None = None

    @property
    def exact(self) -> bool:
        return self.first_sha == self.last_sha


def direction(rel: float, higher_is_better: bool = True) -> str:
    return "improvement" if (rel > 0) == higher_is_better else "regression"


def culprit_alerts(culprit, job, repo, meta, links) -> list[AlertRow]:
    """The rows of one culprit: a performance culprit gives one per case whose step passed the
    job's threshold, a correctness culprit a 'wrong results' row per case that failed accuracy. `meta` is the culprit
    commit's RevisionMeta (or None), `links` the repository's RepoLinks."""
    min_effect = job.spec.min_effect
    common = dict(repository=repo.name, job_id=job.id, first_sha=culprit.first_sha, last_sha=culprit.last_sha,
                  subject=meta.subject if meta else None, pr_number=meta.pr_number if meta else None,
                  commit_url=links.commit(culprit.last_sha),
                  pr_url=links.pull(meta.pr_number) if meta and meta.pr_number else None)
    if culprit.kind.value == "correctness":  # one row per case that failed accuracy
        return [AlertRow(kind="wrong results", case=case, rel=None, ci=None, **common)
                for case in sorted(culprit.effects or {None: None})]
    rows = []
    for case, effect in sorted((culprit.effects or {}).items()):
        if stored_step_moved(effect, min_effect):
            ci = effect["ci"]
            rows.append(AlertRow(kind=direction(float(effect["rel"]), effect.get("higher_is_better", True)),
                                 case=case, rel=float(effect["rel"]), ci=(float(ci[0]), float(ci[1])), **common))
    return rows
