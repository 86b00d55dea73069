"""An OpenAI-compatible HTTP server on the engine: /v1/chat/completions and /v1/completions (with SSE streaming),
/v1/models, /health and Prometheus /metrics, on FastAPI + uvicorn.

    python -m lite.serve MODEL_DIR --host 127.0.0.1 --port 8000        # or: lite serve MODEL_DIR ...

MODEL_DIR is a Hugging Face checkpoint directory (config.json, safetensors, tokenizer files); its step graph is
converted on first use and cached there. One engine thread runs the continuous batch; HTTP handlers hand it requests
and receive text deltas through per-request queues, so concurrent requests share every model step. A client that
disconnects has its request aborted and its KV-cache blocks freed."""
# No `from __future__ import annotations` here: FastAPI reads the handlers' annotations (Request) at definition.
import argparse
import asyncio
import json
import os
import threading
import time
import uuid
from typing import Any, Callable

from .llm.block_manager import OutOfBlocks
from .llm.text_engine import TextEngine
from .llm.sampling import SamplingParams
from .llm.scheduler import RequestStatus


class EngineThread:
    """Owns the TextEngine; steps it while any request is queued or running."""

    def __init__(self, engine: TextEngine):
        self.engine = engine
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.sinks: dict[str, Callable[[str | None, Any], None]] = {}
        self.stopping = False
        self.counters = {"requests_total": 0, "requests_failed_total": 0, "generated_tokens_total": 0,
                         "prompt_tokens_total": 0}
        self.thread = threading.Thread(target=self._run, name="lite-engine", daemon=True)
        self.thread.start()

    def submit(self, prompt, params: SamplingParams, sink: Callable[[str | None, Any], None],
               choice: int = 0, embeddings=None) -> str:
        """Queues one sequence (`choice` of the prompt's n; `embeddings`: rows replacing a token-id prompt's
        placeholders, a speech model's audio); `sink(delta, None)` gets its text as it comes, `sink(None, output)` its
        end."""
        with self.lock:
            rid = self.engine.add(prompt, params, choice, embeddings=embeddings)
            self.sinks[rid] = sink
            self.counters["requests_total"] += 1
            self.counters["prompt_tokens_total"] += len(self.engine.engine.scheduler.requests[rid].prompt_ids)
        self.wake.set()
        return rid

    def abort(self, rid: str) -> None:
        with self.lock:
            self.engine.engine.abort(rid)
            self.sinks.pop(rid, None)

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        while not self.stopping:
            self.wake.wait(timeout=0.5)
            with self.lock:
                if not self.engine.engine.scheduler.has_work():
                    self.wake.clear()
                    continue
                try:
                    deltas = self.engine.advance()
                except Exception as e:   # a failing step fails its requests, not the server
                    for rid, sink in list(self.sinks.items()):
                        self.engine.engine.abort(rid)
                        sink(None, e)
                    self.sinks.clear()
                    self.counters["requests_failed_total"] += 1
                    continue
                for rid, delta in deltas.items():
                    if delta and rid in self.sinks:
                        self.sinks[rid](delta, None)
                for rid in list(self.sinks):
                    r = self.engine.engine.scheduler.requests[rid]
                    if r.status in (RequestStatus.FINISHED, RequestStatus.ABORTED):
                        out = self.engine.output(rid)
                        self.counters["generated_tokens_total"] += len(out.token_ids)
                        self.sinks.pop(rid)(None, out)

    def metrics(self) -> str:
        with self.lock:
            s = self.engine.engine.status()
            sched = self.engine.engine.scheduler
            gauges = {"running_requests": len(sched.running), "waiting_requests": len(sched.waiting),
                      "kv_cache_free_blocks": s.num_free_blocks, "kv_cache_total_blocks": s.num_total_blocks,
                      "kv_cache_cached_blocks": s.num_cached_blocks}
            counters = dict(self.counters)
        lines = []
        for name, value in counters.items():
            lines += [f"# TYPE lite_{name} counter", f"lite_{name} {value}"]
        for name, value in gauges.items():
            lines += [f"# TYPE lite_{name} gauge", f"lite_{name} {value}"]
        return "\n".join(lines) + "\n"


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.kind = status, kind


def sampling_from(body: dict, max_model_len: int) -> SamplingParams:
    def num(key, default, cast=float):
        value = body.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest(f"'{key}' must be a number")
        return cast(value)
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise BadRequest("'stop' must be a string or a list of strings")
    n = body.get("n", 1)
    n = 1 if n is None else n
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 16:
        raise BadRequest("'n' must be an integer from 1 to 16")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 16))
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest("'max_tokens' must be a positive integer")
    try:
        return SamplingParams(max_new_tokens=min(max_tokens, max_model_len), temperature=num("temperature", 1.0),
                              top_p=num("top_p", 1.0), top_k=num("top_k", 0, int), min_p=num("min_p", 0.0),
                              presence_penalty=num("presence_penalty", 0.0),
                              frequency_penalty=num("frequency_penalty", 0.0),
                              repetition_penalty=num("repetition_penalty", 1.0), stop=stop,
                              seed=None if body.get("seed") is None else num("seed", 0, int), n=n)
    except ValueError as e:
        raise BadRequest(str(e)) from None


def create_app(engine: TextEngine, model_name: str, max_model_len: int = 2048, asr=None):
    """`asr`: a speech model's pipeline (lite.qwen3_asr.Qwen3ASR on this engine): /v1/audio/transcriptions then
    transcribes uploads in the same continuous batch as the text requests."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

    worker = EngineThread(engine)
    app = FastAPI(title="lite", docs_url=None, redoc_url=None)
    app.state.worker = worker

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    @app.on_event("shutdown")
    def _stop() -> None:
        worker.stop()

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics():
        return PlainTextResponse(worker.metrics(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "lite",
                                            "created": int(time.time())}]}

    async def parse(request: Request) -> dict:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BadRequest(f"the request body is not valid JSON: {e}") from None
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        if body.get("model") not in (None, model_name):
            raise BadRequest(f"the model '{body.get('model')}' does not exist; this server has '{model_name}'", 404,
                             "not_found_error")
        return body

    async def run(prompt, body: dict, chat: bool):
        """Runs the request's n choices (one sequence each, in the shared batch) and answers or streams them."""
        params = sampling_from(body, max_model_len)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def sink_for(index: int) -> Callable[[str | None, Any], None]:
            return lambda delta, end: loop.call_soon_threadsafe(queue.put_nowait, (index, delta, end))
        rids: list[str] = []
        try:
            for i in range(params.n):
                rids.append(worker.submit(prompt, params, sink_for(i), i))
        except (OutOfBlocks, ValueError) as e:
            for rid in rids:
                worker.abort(rid)
            raise BadRequest(str(e)) from None
        created, oid = int(time.time()), ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        kind = "chat.completion" if chat else "text_completion"

        def usage(outs: list) -> dict:
            completion = sum(len(o.token_ids) for o in outs)
            return {"prompt_tokens": outs[0].prompt_tokens, "completion_tokens": completion,
                    "total_tokens": outs[0].prompt_tokens + completion}

        def choice(index: int, text: str | None, finish: str | None, stream: bool) -> dict:
            if chat and stream:
                return {"index": index, "delta": {} if text is None else {"role": "assistant", "content": text},
                        "finish_reason": finish}
            if chat:
                return {"index": index, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            return {"index": index, "text": text or "", "finish_reason": finish, "logprobs": None}

        ends: dict[int, Any] = {}
        if body.get("stream"):
            async def events():
                try:
                    while len(ends) < params.n:
                        index, delta, end = await queue.get()
                        if isinstance(end, Exception):
                            yield f"data: {json.dumps({'error': {'message': str(end), 'type': 'server_error'}})}\n\n"
                            return
                        if end is not None:
                            ends[index] = end
                            last = {"id": oid, "object": f"{kind}.chunk" if chat else kind, "created": created,
                                    "model": model_name, "choices": [choice(index, None, end.finish_reason, True)]}
                            yield f"data: {json.dumps(last)}\n\n"
                            continue
                        chunk = {"id": oid, "object": f"{kind}.chunk" if chat else kind, "created": created,
                                 "model": model_name, "choices": [choice(index, delta, None, True)]}
                        yield f"data: {json.dumps(chunk)}\n\n"
                    if (body.get("stream_options") or {}).get("include_usage"):
                        final = {"id": oid, "object": f"{kind}.chunk" if chat else kind, "created": created,
                                 "model": model_name, "choices": [], "usage": usage([ends[i] for i in sorted(ends)])}
                        yield f"data: {json.dumps(final)}\n\n"
                    yield "data: [DONE]\n\n"
                finally:   # the client went away (or we are done): free the blocks
                    for rid in rids:
                        worker.abort(rid)
            return StreamingResponse(events(), media_type="text/event-stream")

        try:
            while len(ends) < params.n:
                index, delta, end = await queue.get()
                if isinstance(end, Exception):
                    return error(500, f"generation failed: {end}", "server_error")
                if end is not None:
                    ends[index] = end
        except asyncio.CancelledError:
            for rid in rids:
                worker.abort(rid)
            raise
        outs = [ends[i] for i in range(params.n)]
        return {"id": oid, "object": kind, "created": created, "model": model_name,
                "choices": [choice(i, o.text, o.finish_reason, False) for i, o in enumerate(outs)],
                "usage": usage(outs)}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            body = await parse(request)
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(
                    isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
                raise BadRequest("'messages' must be a non-empty list of {role, content} objects")
            for m in messages:   # content as a list of parts, as the API allows: text, and image_url for VLMs
                if not isinstance(m.get("content"), list):
                    continue
                parts = [p for p in m["content"] if isinstance(p, dict)]
                if any(p.get("type") in ("image_url", "image") for p in parts):
                    if getattr(engine, "vision", None) is None:
                        raise BadRequest("this model reads no images: content parts must be text")
                    m["content"] = [p if p.get("type") != "text" else {"type": "text", "text": p.get("text", "")}
                                    for p in parts]
                else:
                    m["content"] = "".join(p.get("text", "") for p in parts)
            return await run(messages, body, True)
        except BadRequest as e:
            return error(e.status, str(e), e.kind)

    @app.post("/v1/completions")
    async def completions(request: Request):
        try:
            body = await parse(request)
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
                prompt = prompt[0]
            ok = isinstance(prompt, str) and prompt or (isinstance(prompt, list) and prompt and all(
                isinstance(t, int) and not isinstance(t, bool) for t in prompt))
            if not ok:
                raise BadRequest("'prompt' must be a non-empty string or a list of token ids")
            if isinstance(prompt, list) and any(t < 0 or t >= engine.tokenizer.tokenizer.get_vocab_size()
                                                for t in prompt):
                raise BadRequest("'prompt' holds a token id outside the vocabulary")
            return await run(prompt, body, False)
        except BadRequest as e:
            return error(e.status, str(e), e.kind)

    audio_lock = threading.Lock()   # the audio graph's Model is not shared between threads

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request):
        """OpenAI's transcription API: multipart form with `file` (a PCM WAV file), `model`, optional `language`
        (an ISO code or a name), `prompt` (context words) and `response_format` (json, text or verbose_json)."""
        if asr is None:
            return error(400, "this model does not transcribe audio (not a speech-recognition model)")
        from .speech_server import read_transcription_form
        form = await read_transcription_form(request, model_name)
        if isinstance(form, tuple):   # (status, message, kind): a refused request
            return error(*form)
        upload, fmt, language, context = form["file"], form["response_format"], form["language"], form["prompt"]
        data = await upload.read()
        loop = asyncio.get_running_loop()

        def prepare():
            with audio_lock:
                return asr.request(data, language, context)
        try:
            ids, embeddings = await loop.run_in_executor(None, prepare)
        except ValueError as e:
            return error(400, f"cannot transcribe '{getattr(upload, 'filename', 'the file')}': {e}")
        queue: asyncio.Queue = asyncio.Queue()
        params = SamplingParams(max_new_tokens=max_model_len, temperature=0)
        try:
            rid = worker.submit(ids, params, lambda delta, end: loop.call_soon_threadsafe(queue.put_nowait, end),
                                embeddings=embeddings)
        except (OutOfBlocks, ValueError) as e:
            return error(400, str(e))
        try:
            while True:
                end = await queue.get()
                if isinstance(end, Exception):
                    return error(500, f"transcription failed: {end}", "server_error")
                if end is not None:
                    break
        except asyncio.CancelledError:
            worker.abort(rid)
            raise
        from .qwen3_asr import parse_reply
        eos = set(engine.engine.eos_token_ids)
        result = parse_reply(engine.tokenizer.decode([t for t in end.token_ids if t not in eos]), language)
        if fmt == "text":
            return PlainTextResponse(result["text"])
        if fmt == "verbose_json":
            return {"task": "transcribe", "language": result["language"], "text": result["text"]}
        return {"text": result["text"]}

    return app


def start_in_thread(app, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0):
    """Serves `app` from a background thread (port 0: a free one): (base url, the uvicorn server, its thread); set
    `server.should_exit = True` and join the thread to stop it."""
    import socket

    import uvicorn
    if port == 0:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + timeout
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError(f"the server on {host}:{port} did not start")
        time.sleep(0.05)
    return f"http://{host}:{port}", server, thread


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--num-blocks", type=int, default=1024, help="KV-cache blocks (memory: layers x 2 x blocks x ...)")
    ap.add_argument("--block-size", type=int, default=None,
                    help="KV-cache block size (default: the converted directory's, else 16)")
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    ap.add_argument("--served-model-name", default=None)
    ap.add_argument("--weights", default=None, choices=["float32", "bfloat16", "float16", "int8", "int4"],
                    help="how a checkpoint is converted: its matrices as float32, halves, int8 or int4 codes (default: "
                         "what `python -m model_zoo convert` wrote into DIR, else float32)")
    ap.add_argument("--kv-cache-dtype", default="float32", choices=["float32", "bfloat16", "float16", "int8"])
    ap.add_argument("--dynamic-quant", default="auto", choices=["auto", "on", "off"],
                    help="int8/int4 products on activations quantised to int8 on the fly (auto: on for int8/int4)")
    ap.add_argument("--precision-mode", default=None, choices=["enforce_fp32", "preferred_bf16"],
                    help="products' arithmetic (default: preferred_bf16 for --weights bfloat16, and int8 / int4 under "
                         "dynamic quantisation, else enforce_fp32)")
    args = ap.parse_args(argv)
    import uvicorn

    options = dict(block_size=args.block_size, weight_format=args.weights, kv_cache_dtype=args.kv_cache_dtype,
                   dynamic_quant={"auto": None, "on": True, "off": False}[args.dynamic_quant],
                   precision_mode=args.precision_mode, num_blocks=args.num_blocks, threads=args.threads,
                   max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens)
    asr = None
    with open(os.path.join(args.model_dir, "config.json")) as f:
        model_type = json.load(f).get("model_type")
    name = args.served_model_name or os.path.basename(os.path.abspath(args.model_dir))
    from .speech_server import SPEECH_MODEL_TYPES, create_speech_app, load_speech_model
    if model_type in SPEECH_MODEL_TYPES:   # encoder-decoder / CTC speech models: the transcription endpoint alone
        speech = load_speech_model(args.model_dir, model_type, args.threads, args.weights)
        uvicorn.run(create_speech_app(speech, name), host=args.host, port=args.port, log_level="info")
        return 0
    if model_type == "qwen3_asr":   # a speech model: its text engine and the transcription endpoint
        from .qwen3_asr import Qwen3ASR
        asr = Qwen3ASR.from_pretrained(args.model_dir, **options)
        engine = asr.text_engine
    else:
        engine = TextEngine.from_pretrained(args.model_dir, **options)
    uvicorn.run(create_app(engine, name, asr=asr), host=args.host, port=args.port, log_level="info")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def cli(argv: list[str] | None = None) -> int:
    """`lite serve MODEL_DIR ...`: the console script's entry."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "serve":
        print("usage: lite serve MODEL_DIR [--host H] [--port P] [options]  (lite serve --help)")
        return 2
    return main(args[1:])
