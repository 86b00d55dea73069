"""Model protection (issue 35): converter_lite --encryptKey writes the .ms file AES-GCM encrypted (in chunks, each
sealed with its index and the header), the runtime builds it with dec_key without writing the plaintext anywhere, and
a wrong key, a changed byte, swapped or dropped chunks and a truncated file are refused with a clear error."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("cryptography")

import converter  # noqa: E402
import lite  # noqa: E402
from lite import encryption  # noqa: E402
from model_zoo.tiny import small_cnn  # noqa: E402
from parity import convert, load  # noqa: E402

KEY = "00112233445566778899aabbccddeeff"
BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("enc")
    plain = convert(small_cnn(), str(d), name="plain")
    sealed = convert(small_cnn(), str(d), name="sealed", encrypt_key=KEY)
    return plain, sealed


def test_encrypted_model_runs_with_its_key(models):
    plain, sealed = models
    raw = open(sealed, "rb").read()
    assert raw.startswith(b"MSLENC01")
    assert open(plain, "rb").read()[:8] not in raw   # no plaintext header inside
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    want = load(plain).predict([x])[0].get_data_to_numpy()
    m = lite.Model()
    m.build_from_file(sealed, dec_key=KEY)
    np.testing.assert_array_equal(m.predict([x])[0].get_data_to_numpy(), want)
    m2 = lite.Model()
    m2.build_from_file(sealed, dec_key=bytes.fromhex(KEY))   # raw bytes too
    runner = lite.ModelParallelRunner()
    runner.build_from_file(sealed, dec_key=KEY)
    np.testing.assert_array_equal(runner.predict([x])[0].get_data_to_numpy(), want)
    from_buffer = lite.Model()
    from_buffer.build_from_buffer(raw, dec_key=KEY)
    np.testing.assert_array_equal(from_buffer.predict([x])[0].get_data_to_numpy(), want)


def test_refusals(models, tmp_path):
    plain, sealed = models
    with pytest.raises(ValueError, match=r"encrypted \(AES-GCM\).*dec_key"):
        lite.Model().build_from_file(sealed)
    with pytest.raises(ValueError, match="key is wrong or the file was changed"):
        lite.Model().build_from_file(sealed, dec_key="ff" * 16)
    with pytest.raises(ValueError, match="16, 24 or 32"):
        lite.Model().build_from_file(sealed, dec_key="abcd")
    with pytest.raises(ValueError, match="not encrypted"):
        lite.Model().build_from_file(plain, dec_key=KEY)
    with pytest.raises(ValueError, match="dec_mode"):
        lite.Model().build_from_file(sealed, dec_key=KEY, dec_mode="AES-CBC")
    raw = bytearray(open(sealed, "rb").read())
    for what, data in (("flipped", raw[:100] + bytes([raw[100] ^ 1]) + raw[101:]),
                       ("truncated", raw[:-5]),
                       ("appended", raw + b"x"),
                       ("header", raw[:12] + bytes([raw[12] ^ 4]) + raw[13:])):
        bad = tmp_path / f"{what}.ms"
        bad.write_bytes(bytes(data))
        with pytest.raises(ValueError, match="changed|truncated|invalid|wrong"):
            lite.Model().build_from_file(str(bad), dec_key=KEY)


def test_chunks_are_bound_to_their_place():
    """Several chunks: swapping two, or dropping the last, fails the tags (each chunk's nonce and associated data
    carry its index and whether it is last)."""
    key = bytes(range(16))
    data = os.urandom(3 * 1000 + 17)
    old = encryption.CHUNK_BYTES
    encryption.CHUNK_BYTES = 1000
    try:
        sealed = io.BytesIO()
        encryption.encrypt_stream(io.BytesIO(data), len(data), sealed, key)
    finally:
        encryption.CHUNK_BYTES = old
    blob = sealed.getvalue()
    out = io.BytesIO()
    assert encryption.decrypt_stream(io.BytesIO(blob), out, key) == len(data) and out.getvalue() == data
    h, c = encryption.HEADER.size, 1000 + encryption.TAG_BYTES
    swapped = blob[:h] + blob[h + c:h + 2 * c] + blob[h:h + c] + blob[h + 2 * c:]
    with pytest.raises(encryption.DecryptionError, match="chunk 0"):
        encryption.decrypt_stream(io.BytesIO(swapped), io.BytesIO(), key)
    with pytest.raises(encryption.DecryptionError, match="truncated"):
        encryption.decrypt_stream(io.BytesIO(blob[:h + 3 * c]), io.BytesIO(), key)


def test_converter_cli_encrypts(tmp_path):
    import onnx
    src = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(src))
    out = tmp_path / "cnn"
    p = subprocess.run([os.path.join(BIN, "converter_lite"), "--fmk=ONNX", f"--modelFile={src}",
                        f"--outputFile={out}", f"--encryptKey={KEY}"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert encryption.is_encrypted(str(out) + ".ms")
    assert sorted(os.listdir(tmp_path)) == ["cnn.ms", "cnn.onnx"]   # no plaintext copy left beside it
    p = subprocess.run([os.path.join(BIN, "converter_lite"), "--fmk=ONNX", f"--modelFile={src}",
                        f"--outputFile={tmp_path / 'bad'}", "--encryptKey=xyz"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "--encryptKey" in p.stderr and not (tmp_path / "bad.ms").exists()


def test_quantised_encrypted_conversion_reports_accuracy(tmp_path):
    """--fp16 with a key: the accuracy report reads the encrypted file with the key."""
    result = converter.Converter().convert("ONNX", _save(tmp_path), str(tmp_path / "half"), fp16=True,
                                           encrypt_key=KEY, input_shape="x:1,3,32,32")
    assert encryption.is_encrypted(result.output_file)
    assert result.quant_report["outputs"][0]["cosine"] > 0.999


def _save(tmp_path) -> str:
    import onnx
    path = str(tmp_path / "cnn.onnx")
    onnx.save(small_cnn(), path)
    return path
