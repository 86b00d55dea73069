"""An OpenAI-compatible server for speech models that are not language models on the LLM engine: GET /health,
GET /v1/models, and POST /v1/audio/speech for Qwen3-TTS (JSON; a WAV or raw PCM back) or POST /v1/audio/transcriptions
for speech recognition (Whisper, FireRedASR-AED, WeNet: a multipart form with `file`, a PCM WAV; `model`, `language`
(Whisper: an ISO code or a name; the others have no language setting and take it as a hint they do not need),
`response_format` json / text / verbose_json). Requests run one at a time on the model (its graphs are not shared
between threads), off the event loop. `python -m lite.serve DIR` chooses it by the
directory's model_type; Qwen3-ASR, a language model, is served by lite.serve's app on its engine."""
# (no `from __future__ import annotations`: FastAPI reads the endpoints' Request annotation at run time)

import asyncio
import json
import threading
import time

SPEECH_MODEL_TYPES = ("whisper", "fireredasr_aed", "wenet_u2", "qwen3_tts", "cosyvoice2", "cosyvoice3")


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
    if model_type == "qwen3_tts":
        from .qwen3_tts import Qwen3TTS
        return Qwen3TTS.from_pretrained(model_dir, weight_format, threads)
    if model_type in ("cosyvoice2", "cosyvoice3"):
        from .cosyvoice import CosyVoice
        return CosyVoice.from_pretrained(model_dir, weight_format, threads)
    raise ValueError(f"model_type {model_type!r} is not a speech model this server runs "
                     f"({', '.join(SPEECH_MODEL_TYPES)})")


def _transcribe(asr, data: bytes, language: str | None) -> str:
    from .whisper import Whisper
    if isinstance(asr, Whisper):
        return asr.transcribe([data], language=language)[0]
    return asr.transcribe([data])[0]


def create_speech_app(model, model_name: str):
    """`model`: a speech-recognition pipeline (Whisper, FireRedASR, WeNet: /v1/audio/transcriptions) or a
    speech-synthesis one (Qwen3TTS: /v1/audio/speech)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse, Response
    asr = model

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

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        """OpenAI's speech API: JSON {"model", "input" (the text), "voice" (a CustomVoice speaker; a model without
        preset speakers, VoiceDesign, ignores it: OpenAI's clients always send one), "instructions"
        (VoiceDesign's voice description or a style), "response_format" (wav or pcm: 16-bit mono at 24 kHz),
        "language" (ours: default auto), "seed" (ours), "reference_audio" (ours: the voice to clone, a base64 WAV:
        Qwen3-TTS Base, CosyVoice), "reference_text" (ours, CosyVoice: the reference recording's transcript, for
        zero-shot cloning)}."""
        if not hasattr(model, "speak"):
            return error(400, "this model does not speak (a speech-recognition model)")
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return error(400, f"the request body is not valid JSON: {e}")
        if not isinstance(body, dict) or not isinstance(body.get("input"), str) or not body["input"].strip():
            return error(400, "the request needs 'input': the text to speak")
        if body.get("model") not in (None, "", model_name):
            return error(404, f"the model '{body.get('model')}' does not exist; this server has '{model_name}'",
                         "not_found_error")
        fmt = body.get("response_format") or "wav"
        if fmt not in ("wav", "pcm"):
            return error(400, f"response_format must be wav or pcm, not {fmt!r}")
        if float(body.get("speed", 1.0)) != 1.0:
            return error(400, "speed other than 1.0 is not supported")

        reference = None
        if body.get("reference_audio"):
            import base64
            import binascii
            try:
                reference = base64.b64decode(body["reference_audio"], validate=True)
            except (binascii.Error, TypeError) as e:
                return error(400, f"reference_audio is not base64: {e}")

        reference_text = body.get("reference_text")
        if reference_text is not None and not isinstance(reference_text, str):
            return error(400, "reference_text must be a string")

        def run():
            with lock:
                return model.speak(body["input"], language=body.get("language") or "auto", reference_audio=reference,
                                   reference_text=reference_text or None,
                                   speaker=(body.get("voice") or None) if model.speakers else None,
                                   instruct=body.get("instructions") or None,
                                   seed=body.get("seed"))
        try:
            wave, rate = await asyncio.get_running_loop().run_in_executor(None, run)
        except (ValueError, NotImplementedError) as e:
            return error(400, str(e))
        from .audio import wav_bytes
        data = wav_bytes(wave, rate)
        if fmt == "pcm":
            return Response(data[44:], media_type="audio/pcm")
        return Response(data, media_type="audio/wav")

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request):
        if hasattr(model, "speak"):
            return error(400, "this model does not transcribe audio (a speech-synthesis model)")
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
