"""An OpenAI-compatible server for speech-recognition models that are not language models on the LLM engine (Whisper,
FireRedASR-AED, WeNet): GET /health, GET /v1/models and POST /v1/audio/transcriptions (a multipart form with `file`,
a PCM WAV; `model`, `language` (Whisper: an ISO code or a name; the others have no language setting and take it as
a hint they do not need), `response_format` json / text / verbose_json). Requests run one at a time on the model
(its graphs are not shared between threads), off the event loop. `python -m lite.serve DIR` chooses it by the
directory's model_type; Qwen3-ASR, a language model, is served by lite.serve's app on its engine."""
# (no `from __future__ import annotations`: FastAPI reads the endpoints' Request annotation at run time)

import asyncio
import threading
import time

SPEECH_MODEL_TYPES = ("whisper", "fireredasr_aed", "wenet_u2")


async def read_transcription_form(request, model_name: str):
    """OpenAI's transcription form: {"file", "response_format", "language", "prompt"}, or (status, message, kind)
    of the refusal (not multipart, no file, another model, an unknown response_format)."""
    try:
        form = await request.form()
    except Exception as e:   # not multipart, or a broken body
        return 400, f"the request must be multipart/form-data with a 'file': {e}", "invalid_request_error"
    upload = form.get("file")
    if upload is None or not hasattr(upload, "read"):
        return 400, "the form has no 'file' (the audio to transcribe)", "invalid_request_error"
    if form.get("model") not in (None, "", model_name):
        return 404, f"the model '{form.get('model')}' does not exist; this server has '{model_name}'", \
            "not_found_error"
    fmt = form.get("response_format") or "json"
    if fmt not in ("json", "text", "verbose_json"):
        return 400, f"response_format must be json, text or verbose_json, not {fmt!r}", "invalid_request_error"
    return {"file": upload, "response_format": fmt, "language": form.get("language") or None,
            "prompt": form.get("prompt") or None}


def load_speech_model(model_dir: str, model_type: str, threads: int = 1, weight_format: str | None = None):
    if model_type == "whisper":
        from .whisper import Whisper
        return Whisper.from_pretrained(model_dir, weight_format, threads)
    if model_type == "fireredasr_aed":
        from .fireredasr import FireRedASR
        return FireRedASR.from_pretrained(model_dir, weight_format, threads)
    if model_type == "wenet_u2":
        from .wenet import WeNet
        return WeNet.from_pretrained(model_dir, weight_format, threads)
    raise ValueError(f"model_type {model_type!r} is not a speech model this server runs "
                     f"({', '.join(SPEECH_MODEL_TYPES)})")


def _transcribe(asr, data: bytes, language: str | None) -> str:
    from .whisper import Whisper
    if isinstance(asr, Whisper):
        return asr.transcribe([data], language=language)[0]
    return asr.transcribe([data])[0]


def create_speech_app(asr, model_name: str):
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse

    app = FastAPI(title="lite speech", docs_url=None, redoc_url=None)
    lock = threading.Lock()

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "lite",
                                            "created": int(time.time())}]}

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request):
        form = await read_transcription_form(request, model_name)
        if isinstance(form, tuple):   # (status, message, kind): a refused request
            return error(*form)
        upload, fmt, language = form["file"], form["response_format"], form["language"]
        data = await upload.read()

        def run() -> str:
            with lock:
                return _transcribe(asr, data, language)
        try:
            text = await asyncio.get_running_loop().run_in_executor(None, run)
        except (ValueError, FileNotFoundError) as e:
            return error(400, f"cannot transcribe '{getattr(upload, 'filename', 'the file')}': {e}")
        if fmt == "text":
            return PlainTextResponse(text)
        if fmt == "verbose_json":
            return {"task": "transcribe", "language": language, "text": text}
        return {"text": text}

    return app
