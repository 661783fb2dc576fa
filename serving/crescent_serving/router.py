"""The router: asks crescent-conductor's /schedule where a request runs, then
drives prefill and decode on those workers.

Startup (Router.attach): `hello` every worker, refuse to start if any two
report different model shapes (ModelMismatch names the fields), register
every worker with the conductor (/register; prefill workers with their
KV-event PUB endpoint, role prefill; decode workers role decode).

Per request (Router.generate):
  1. POST /schedule {model, token_ids} -> prefill and decode instance ids
  2. prefill RPC on that worker -> first token + kv_transfer_params
  3. decode RPC -> the remaining tokens. A decode worker that dies or times
     out is marked dead and the decode goes to another decode worker (the
     KV is still in the store); KVMissing (KV evicted between prefill and
     decode) re-runs the prefill once.
"""
import json
import time
import urllib.request

from .model import ModelMismatch
from .rpc import RpcError, call


MAX_ANSWER = 16 << 20       # bytes of a conductor answer read


def _json_body(f):
    """The answer's JSON, read up to MAX_ANSWER bytes; a body that is not
    JSON (a proxy's HTML error page, a truncated answer) comes back as
    {"error": ...} instead of raising out of the request."""
    raw = f.read(MAX_ANSWER + 1)
    if len(raw) > MAX_ANSWER:
        return {"error": "answer larger than %d bytes" % MAX_ANSWER}
    try:
        return json.loads(raw or b"{}")
    except ValueError as e:
        return {"error": "answer is not JSON (%s): %r" % (e, raw[:200])}


def http_post(url, body, timeout=10.0):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as r:
            return r.status, _json_body(r)
    except urllib.error.HTTPError as e:
        return e.code, _json_body(e)


class Router:
    def __init__(self, conductor_url, model_name, rpc_timeout_s=120.0):
        self.conductor = conductor_url.rstrip("/")
        self.model = model_name
        self.timeout = rpc_timeout_s
        self.workers = {}         # id -> hello + endpoint
        self.dead = set()
        self.shape = None
        self.last_report = None       # (status, answer) of the last /report

    def attach(self, endpoints):
        hellos = [(ep, call(ep, "hello", 30.0)) for ep in endpoints]
        ref_ep, ref = hellos[0]
        if self.workers:
            ref = next(iter(self.workers.values()))
            ref_ep = ref["endpoint"]
        for ep, h in hellos:
            if h["fp"] != ref["fp"]:
                diff = ["%s %r vs %r" % (k, ref["shape"][k], h["shape"].get(k))
                        for k in ref["shape"] if h["shape"].get(k) != ref["shape"][k]]
                raise ModelMismatch("worker %s (%s) and worker %s (%s) serve different models: %s"
                                    % (ref["id"], ref_ep, h["id"], ep, "; ".join(diff)))
        self.shape = ref["shape"]
        if ref["shape"]["name"] != self.model:
            raise ModelMismatch("workers serve %r, router configured for %r" % (ref["shape"]["name"], self.model))
        for ep, h in hellos:
            h["endpoint"] = ep
            self.workers[h["id"]] = h
            body = {"endpoint": h["events"] or ep, "type": "vLLM", "modelname": self.model,
                    "instance_id": h["id"], "block_size": h["shape"]["block_size"],
                    "role": h["role"], "medium": "cpu"}
            st, rep = http_post(self.conductor + "/register", body)
            if st != 200:
                raise RuntimeError("conductor /register %s: %s %s" % (h["id"], st, rep))
            if h["events"] and not call(ep, "wait_subscribed", 60.0, seconds=30.0):
                raise RuntimeError("conductor did not subscribe to %s's KV events (%s) within 30 s"
                                   % (h["id"], h["events"]))

    def _pick(self, role, preferred):
        if preferred in self.workers and preferred not in self.dead and \
                self.workers[preferred]["role"] == role:
            return preferred
        for wid, h in sorted(self.workers.items()):
            if h["role"] == role and wid not in self.dead:
                return wid
        raise RuntimeError("no live %s worker" % role)

    def schedule(self, tokens):
        st, rep = http_post(self.conductor + "/schedule", {"model": self.model, "token_ids": tokens})
        if st != 200:
            raise RuntimeError("conductor /schedule: %s %s" % (st, rep))
        try:
            return rep["prefill"]["instance_id"], rep["decode"]["instance_id"], rep
        except (KeyError, TypeError):
            raise RuntimeError("conductor /schedule: answer without prefill/decode instance_id: %.300r"
                               % (rep,)) from None

    def admit(self, tokens, max_new):
        """Refuses a request the model cannot hold (prompt + max_new >
        max_seq) or that cannot produce a token, before the conductor is
        asked and before any worker computes."""
        if not isinstance(tokens, (list, tuple)) or not tokens:
            raise ValueError("tokens: a non-empty list of ints is required")
        if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 1:
            raise ValueError("max_new: %.64r is not an int >= 1" % (max_new,))
        max_seq = (self.shape or {}).get("max_seq")
        if max_seq is not None and len(tokens) + max_new > max_seq:
            raise ValueError("tokens: %d prompt + %d new = %d exceed max_seq %d"
                             % (len(tokens), max_new, len(tokens) + max_new, max_seq))

    def generate(self, req_id, tokens, max_new, reuse=True, layer_wise=None, p2p=False):
        """p2p: Mooncake's P2P handoff — the decode worker reserves blocks, the
        prefill worker writes the KV into them through the Transfer Engine
        and notifies; otherwise the decode worker reads the store."""
        self.admit(tokens, max_new)
        if p2p:
            return self._generate_p2p(req_id, tokens, max_new, reuse, layer_wise)
        t0 = time.perf_counter()
        p_id, d_id, sched = self.schedule(tokens)
        t_sched = time.perf_counter() - t0
        for attempt in range(2):
            pre = self._prefill(req_id, tokens, reuse, layer_wise, p_id, max_new)
            p_id = pre["worker"]
            ttft = time.perf_counter() - t0
            try:
                dec = self._decode(req_id, tokens, pre, max_new, d_id)
                break
            except RpcError as e:
                if e.kind != "KVMissing" or attempt == 1:
                    raise
                reuse = False       # the pages vanished: compute and store them again
        return {"tokens": dec["tokens"], "logits": [pre["logits"]] + dec["logits"],
                "prefill": pre, "decode": dec, "ttft": ttft, "t_sched": t_sched,
                "prefill_worker": p_id, "decode_worker": dec["worker"],
                "e2e": time.perf_counter() - t0, "schedule": sched}

    def _generate_p2p(self, req_id, tokens, max_new, reuse, layer_wise):
        t0 = time.perf_counter()
        p_id, d_id, sched = self.schedule(tokens)
        t_sched = time.perf_counter() - t0
        # the reserved blocks live in one decode worker: no decode retry here
        d_id = self._pick("decode", d_id)
        d_ep = self.workers[d_id]["endpoint"]
        push = call(d_ep, "reserve", self.timeout, req_id=req_id, n_tokens=len(tokens), max_new=max_new)
        p_id, pre = self._call_role("prefill", p_id, "prefill", req_id=req_id, tokens=tokens,
                                    reuse=reuse, layer_wise=layer_wise, push=push, max_new=max_new)
        self._idle(p_id, pre, len(tokens))
        ttft = time.perf_counter() - t0
        dec = call(d_ep, "decode", self.timeout, req_id=req_id, tokens=tokens,
                   first_token=pre["first_token"], params=pre["kv_transfer_params"], max_new=max_new)
        return {"tokens": dec["tokens"], "logits": [pre["logits"]] + dec["logits"],
                "prefill": pre, "decode": dec, "ttft": ttft, "t_sched": t_sched,
                "prefill_worker": p_id, "decode_worker": d_id,
                "e2e": time.perf_counter() - t0, "schedule": sched}

    def _lost(self, wid):
        """A worker died or hangs: never pick it again, drop it from the index."""
        self.dead.add(wid)
        http_post(self.conductor + "/unregister", {"instance_id": wid})

    def _call_role(self, role, wid, method, **args):
        """Calls method on worker wid (or another live one of role); a worker
        that is gone or silent is marked lost and the next one is tried.
        Returns (worker id, answer)."""
        last = None
        for _ in range(len(self.workers)):
            wid = self._pick(role, wid)
            try:
                return wid, call(self.workers[wid]["endpoint"], method, self.timeout, **args)
            except RpcError as e:
                if e.kind not in ("RpcTimeout", "WorkerGone"):
                    raise
                last = e
                self._lost(wid)
        raise last

    def _prefill(self, req_id, tokens, reuse, layer_wise, p_id, max_new):
        wid, pre = self._call_role("prefill", p_id, "prefill", req_id=req_id, tokens=tokens,
                                   reuse=reuse, layer_wise=layer_wise, max_new=max_new)
        pre["worker"] = wid
        self._idle(wid, pre, len(tokens))
        return pre

    def _idle(self, wid, pre, n_tokens):
        """The router runs one request at a time per worker: once a prefill
        answered, its queue is empty (/load resets the conductor's estimate),
        and its measured compute time teaches the conductor's predictor
        (/report), so /schedule's estimates follow this CPU model."""
        http_post(self.conductor + "/load", {"instance_id": wid, "prefill_queue_ms": 0})
        reused = pre["kv_transfer_params"]["hit_tokens"] if pre.get("kv_transfer_params") else 0
        st, rep = http_post(self.conductor + "/report", {"instance_id": wid, "prefill": [
            {"input_tokens": n_tokens, "reused_tokens": reused, "stages": 1,
             "seconds": pre["t_compute"]}]})
        self.last_report = (st, rep)

    def _decode(self, req_id, tokens, pre, max_new, d_id):
        wid, dec = self._call_role("decode", d_id, "decode", req_id=req_id, tokens=tokens,
                                   first_token=pre["first_token"],
                                   params=pre["kv_transfer_params"], max_new=max_new)
        dec["worker"] = wid
        return dec
