"""`POST /v1/score`: per-node component scores and reasons, the extender's own scoring for
other schedulers (Volcano, KAI, Koordinator) to call."""
from __future__ import annotations

import logging

import orjson
from fastapi import Depends
from fastapi.responses import Response

from serving import metrics
from serving.deps import ERRORS, Context, get_context, problem, router as _router
from serving.schemas import ScoreRequest, ScoreResponse

log = logging.getLogger("foresight.serving")
router = _router(tags=["score"])


@router.post("/v1/score", response_model=ScoreResponse, responses=ERRORS)
def score(req: ScoreRequest, ctx: Context = Depends(get_context)) -> Response:
    """Per-node component scores and reasons for a pod: the extender's own scoring, for
    Volcano, KAI or Koordinator to call."""
    hook = ctx.hook
    if hook is None:
        metrics.FALLBACKS.labels("score").inc()
        return problem(503, "scoring unavailable: the API runs without cluster state "
                            "(start it with --snapshot or in a cluster)")
    from scheduler_hook.podspec import PodSpecError

    try:
        pod = hook.pod(req.pod)
    except (PodSpecError, ValueError, TypeError, KeyError, AttributeError) as exc:
        return problem(422, f"pod: {exc}")
    try:
        d = hook.scorer.decide(pod, list(req.nodes))
    except Exception as exc:  # noqa: BLE001 - same policy as the extender verbs: a scoring
        # bug degrades (here: 503 with the reason, logged), it never surfaces as a 500
        log.exception("score failed for %s", pod.key)
        metrics.FALLBACKS.labels("score").inc()
        return problem(503, f"scoring failed: {type(exc).__name__}: {str(exc)[:200]}")
    if d.fallback:
        metrics.FALLBACKS.labels("score").inc()
    last = ctx.explained[0]
    if last is not None and last[0] is d:
        body = last[1]
    else:
        # The scorer hands back the very same Decision while the pod, the nodes, the
        # cluster state and the models are unchanged (a pod asked about again); its
        # explanation (reasons for every node, ~2 ms for 16 nodes) is then the same bytes.
        out = d.explain()
        out["scoring"] = "fallback: allocation-based packing" if d.fallback else "model-based"
        body = orjson.dumps(out, option=orjson.OPT_SERIALIZE_NUMPY)
        ctx.explained[0] = (d, body)
    return Response(body, media_type="application/json")
