"""What nimbus refuses in a submitted bundle's JSON before anything is written: documents
nested too deeply (they go back into ZooKeeper as JSON) are a clear 400, never a crash."""
from __future__ import annotations

import io
import tarfile

import pytest

from squall.daemons.nimbus.validate import MAX_JSON_DEPTH, SubmissionError, validate_submission
from support.bundles import make_bundle


def with_conf(bundle: bytes, conf: bytes) -> bytes:
    """``bundle`` with its conf.json replaced by ``conf``."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as src, tarfile.open(fileobj=out, mode="w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name == "conf.json":
                data, member.size = conf, len(conf)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def submit(data: bytes):
    return validate_submission("t", io.BytesIO(data), len(data), 1 << 20)


def test_nested_json_in_a_bundle_is_refused_with_a_400(tmp_path):
    good = make_bundle(tmp_path, "t")
    assert submit(good).name == "t"
    deep = b'{"x": ' + b"[" * (MAX_JSON_DEPTH - 1) + b"]" * (MAX_JSON_DEPTH - 1) + b"}"  # exactly the limit
    assert "x" in submit(with_conf(good, deep)).conf
    for conf, text in ((b'{"x": ' + b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH + b"}", "nested more than"),
                       (b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply")):
        with pytest.raises(SubmissionError) as info:
            submit(with_conf(good, conf))
        assert info.value.status == 400 and text in str(info.value)
