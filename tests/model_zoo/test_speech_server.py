"""lite.speech_server: /v1/audio/transcriptions for speech models off the LLM engine (a tiny Whisper with a language,
a tiny WeNet without), through the official openai client: the pipeline's text in json, text and verbose_json;
a broken upload, a wrong model name and a non-multipart body get 4xx answers."""
from __future__ import annotations

import wave

import numpy as np
import pytest


def write_wav(path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from lite.speech_server import load_speech_model
    from model_zoo.cli import main as model_zoo
    from tests.model_zoo.test_wenet import CAUSAL_LN, make_release
    from tests.model_zoo.test_whisper import make_whisper
    root = tmp_path_factory.mktemp("speech")
    make_whisper(root / "whisper")
    make_release(root / "wenet_release", CAUSAL_LN, 0)
    assert model_zoo(["convert", "WeNet", "--checkpoint", str(root / "wenet_release"), "--output",
                      str(root / "wenet")]) == 0
    return {"whisper": load_speech_model(str(root / "whisper"), "whisper"),
            "wenet": load_speech_model(str(root / "wenet"), "wenet_u2")}, root


@pytest.mark.parametrize("kind", ["whisper", "wenet"])
def test_speech_server_transcribes_with_the_openai_client(models, kind, tmp_path):
    openai = pytest.importorskip("openai")
    pytest.importorskip("multipart")
    import urllib.error
    import urllib.request

    from lite.speech_server import create_speech_app
    from lite.serve import start_in_thread
    from tests.model_zoo.test_whisper import speech
    asr = models[0][kind]
    path = tmp_path / "speech.wav"
    write_wav(path, speech(0.9, 11))
    language = "en" if kind == "whisper" else None
    want = asr.transcribe([str(path)], language=language)[0] if kind == "whisper" else asr.transcribe([str(path)])[0]
    url, srv, thread = start_in_thread(create_speech_app(asr, "tiny"))
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
        extra = {"language": language} if language else {}
        with open(path, "rb") as f:
            assert client.audio.transcriptions.create(model="tiny", file=f, **extra).text == want
        with open(path, "rb") as f:
            text = client.audio.transcriptions.create(model="tiny", file=f, response_format="text", **extra)
        assert text.strip() == want
        with open(path, "rb") as f:
            verbose = client.audio.transcriptions.create(model="tiny", file=f, response_format="verbose_json", **extra)
        assert verbose.text == want
        with pytest.raises(openai.BadRequestError, match="cannot transcribe"):
            client.audio.transcriptions.create(model="tiny", file=("broken.wav", b"RIFF....WAVEjunk"))
        with pytest.raises(openai.NotFoundError):
            with open(path, "rb") as f:
                client.audio.transcriptions.create(model="other", file=f)
        request = urllib.request.Request(f"{url}/v1/audio/transcriptions", data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(request, timeout=30)
        assert bad.value.code == 400
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
