"""Codecs from Python: JPEG against Pillow, video encode / decode, zstd with shuffle and dictionaries, text."""
import io

import numpy as np
import pytest

import jitembed


def test_jpeg_round_trip_and_pillow(rgb_image, jpeg_bytes):
    info = jitembed.probe_jpeg(jpeg_bytes)
    assert (info["width"], info["height"], info["components"], info["subsampling"]) == (128, 96, 3, "420")
    img = jitembed.decode_jpeg(jpeg_bytes)
    assert img.shape == (96, 128, 3) and img.dtype == np.uint8 and img.flags.writeable
    assert np.abs(img.astype(int) - rgb_image.astype(int)).mean() < 3  # lossy, close at q90
    Image = pytest.importorskip("PIL.Image")
    ref = np.asarray(Image.open(io.BytesIO(jpeg_bytes)).convert("RGB"))
    # both are libjpeg-turbo with its default (islow) IDCT and fancy upsampling: the same pixels
    assert np.abs(img.astype(int) - ref.astype(int)).max() <= 1
    gray = jitembed.decode_jpeg(jpeg_bytes, format="gray")
    assert gray.shape == (96, 128, 1)
    small = jitembed.decode_jpeg(jpeg_bytes, width=64, height=48)
    assert small.shape == (48, 64, 3)
    crop = jitembed.decode_jpeg(jpeg_bytes, crop=(8, 4, 16, 10))
    assert crop.shape == (10, 16, 3)
    bgr = jitembed.decode_jpeg(jitembed.encode_jpeg(img[:, :, ::-1].copy(), input_format="bgr"))
    assert np.abs(bgr.astype(int) - img.astype(int)).mean() < 3


def test_jpeg_errors(jpeg_bytes):
    with pytest.raises(jitembed.Error) as info:
        jitembed.decode_jpeg(b"not a jpeg at all")
    assert isinstance(info.value, ValueError) and info.value.errc in ("bad_magic", "decode_failed", "truncated")
    with pytest.raises(jitembed.TruncatedError):
        jitembed.decode_jpeg(jpeg_bytes[: len(jpeg_bytes) // 2])
    lim = jitembed.DecodeLimits()
    lim.max_image_pixels = 100
    with pytest.raises(jitembed.LimitExceededError):
        jitembed.decode_jpeg(jpeg_bytes, limits=lim)
    with pytest.raises(jitembed.InvalidArgumentError):
        jitembed.decode_jpeg(jpeg_bytes, format="cmyk")
    with pytest.raises(TypeError):
        jitembed.decode_jpeg(12345)


def test_video_round_trip():
    t = np.arange(8)[:, None, None, None]
    y = np.arange(32)[None, :, None, None]
    x = np.arange(48)[None, None, :, None]
    frames = np.broadcast_to((t * 20 + x * 3 + y * 2) % 256, (8, 32, 48, 3)).astype(np.uint8).copy()
    clip = jitembed.encode_video(frames, fps=8.0, crf=18)
    info = jitembed.probe_video(clip)
    assert info["codec"] == "h264" and (info["width"], info["height"]) == (48, 32) and info["frame_count"] == 8
    out = jitembed.decode_video(clip, num_frames=0)
    assert out.shape == (8, 32, 48, 3)
    assert np.abs(out.astype(int) - frames.astype(int)).mean() < 8
    four = jitembed.decode_video(clip, num_frames=4, width=24, height=16)
    assert four.shape == (4, 16, 24, 3)
    with pytest.raises(jitembed.Error) as e:
        jitembed.decode_video(b"\x00" * 1000)
    assert isinstance(e.value, ValueError)


def test_zstd_shuffle_and_dictionary():
    data = np.linspace(0, 1, 4096, dtype=np.float32).tobytes()
    for shuffle in (0, 4):
        z = jitembed.zstd_compress(data, level=5, shuffle=shuffle)
        assert jitembed.zstd_decompress(z, shuffle=shuffle) == data
    assert len(jitembed.zstd_compress(data, shuffle=4)) < len(jitembed.zstd_compress(data))
    samples = [f'{{"id": {i}, "caption": "a photo of item {i} on a table", "w": {i % 7}}}'.encode() for i in range(400)]
    d = jitembed.ZstdDictionary.train(samples, capacity=4096)
    assert len(d) > 0 and d.id != 0
    z = jitembed.zstd_compress(samples[3], dictionary=d)
    assert jitembed.zstd_decompress(z, dictionary=d) == samples[3]
    assert len(z) < len(jitembed.zstd_compress(samples[3]))
    d2 = jitembed.ZstdDictionary.load(d.to_bytes())
    assert jitembed.zstd_decompress(z, dictionary=d2) == samples[3]
    with pytest.raises(jitembed.DecodeFailedError):
        jitembed.zstd_decompress(b"\x28\xb5\x2f\xfd garbage")
    lim = jitembed.DecodeLimits()
    lim.max_decoded_bytes = 100
    with pytest.raises(jitembed.LimitExceededError):
        jitembed.zstd_decompress(jitembed.zstd_compress(data), limits=lim)


def test_text_and_tokens():
    s = "Grüße, 世界 🌍 " * 20
    enc = jitembed.encode_text(s)
    assert jitembed.decode_text(enc) == s
    with pytest.raises(jitembed.InvalidUtf8Error) as e:
        jitembed.validate_utf8(b"\xff\xfe")
    assert isinstance(e.value, UnicodeError)
    jitembed.validate_utf8(s.encode())
    ids = np.array([1, 2, 3, 50000, 7], dtype=np.int32)
    np.testing.assert_array_equal(jitembed.decode_tokens(jitembed.encode_tokens(ids), "int32"), ids)
    with pytest.raises(jitembed.DtypeMismatchError) as e:
        jitembed.encode_tokens(np.zeros(3, dtype=np.float32))
    assert isinstance(e.value, TypeError)
