"""One exception class per errc: each subclasses jitembed.Error and its builtin, carries the C++ message,
.errc and .code; a thrown jitembed::error and a failed result<T> both arrive as that class."""
import concurrent.futures
import pickle

import pytest

import jitembed

# docs/python.md's table: errc -> (class name, builtin base)
TABLE = {
    "invalid_argument": ("InvalidArgumentError", ValueError),
    "buffer_too_small": ("BufferTooSmallError", ValueError),
    "truncated": ("TruncatedError", ValueError),
    "bad_magic": ("BadMagicError", ValueError),
    "unsupported_version": ("UnsupportedVersionError", ValueError),
    "checksum_mismatch": ("ChecksumMismatchError", ValueError),
    "corrupt_data": ("CorruptDataError", ValueError),
    "limit_exceeded": ("LimitExceededError", ValueError),
    "shape_overflow": ("ShapeOverflowError", ValueError),
    "unsupported_format": ("UnsupportedFormatError", ValueError),
    "unsupported_codec": ("UnsupportedCodecError", ValueError),
    "decode_failed": ("DecodeFailedError", ValueError),
    "encode_failed": ("EncodeFailedError", RuntimeError),
    "invalid_utf8": ("InvalidUtf8Error", UnicodeError),
    "dtype_mismatch": ("DtypeMismatchError", TypeError),
    "io_error": ("IoError", OSError),
    "not_found": ("NotFoundError", KeyError),
    "internal": ("InternalError", RuntimeError),
    "comm_failed": ("CommFailedError", ConnectionError),
    "timeout": ("TimeoutError", TimeoutError),
    "unavailable": ("UnavailableError", ConnectionError),
    "cancelled": ("CancelledError", concurrent.futures.CancelledError),
    "resource_exhausted": ("ResourceExhaustedError", MemoryError),
}


def test_every_errc_has_its_class():
    assert set(jitembed.ERROR_CLASSES) == set(TABLE)
    codes = set()
    for errc, (name, builtin) in TABLE.items():
        cls = getattr(jitembed, name)
        assert cls is jitembed.error_class(errc) is jitembed.ERROR_CLASSES[errc]
        assert issubclass(cls, jitembed.Error) and issubclass(cls, builtin)
        assert cls.errc == errc
        codes.add(cls.code)
        with pytest.raises(cls) as info:
            jitembed._jitembed._raise(errc, f"the {errc} message")
        e = info.value
        assert isinstance(e, builtin) and isinstance(e, jitembed.Error)
        assert e.message == f"the {errc} message" and str(e) == f"{errc}: the {errc} message"
        assert e.errc == errc and e.code == cls.code
        again = pickle.loads(pickle.dumps(e))  # crosses process boundaries (Ray, multiprocessing)
        assert type(again) is cls and again.message == e.message
    assert codes == set(range(1, 24))
    assert jitembed.is_retryable("timeout") and not jitembed.is_retryable("invalid_argument")
    with pytest.raises(jitembed.NotFoundError):
        jitembed.error_class("no_such_errc")


def test_library_failures_map_to_their_class(tmp_path):
    b = jitembed.RecordBuilder()
    with pytest.raises(jitembed.InvalidArgumentError):
        b.add_text("", "an empty field name")
    b.add_text("caption", "x")
    with pytest.raises(ValueError):
        b.add_text("caption", "a duplicate name")
    rec = jitembed.RecordView.parse(b.finish())
    with pytest.raises(KeyError) as info:
        rec["missing"]
    assert info.value.errc == "not_found" and "missing" in info.value.message
    bad = bytearray(b.finish())
    bad[-1] ^= 1  # inside the last payload's padding
    with pytest.raises(jitembed.CorruptDataError):
        jitembed.RecordView.parse(bytes(bad)).verify()
    bad = bytearray(b.finish())
    bad[0] ^= 1
    with pytest.raises(jitembed.BadMagicError):
        jitembed.RecordView.parse(bytes(bad))
    with pytest.raises(jitembed.IoError):
        jitembed.ShardWriter.create(str(tmp_path / "no" / "such" / "dir.jems"))
