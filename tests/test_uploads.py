"""Uploaded checkpoints are size-limited and never land outside the runs folder.

The Predict page stores an upload with brnn_core.uploads.save_upload: under runs/.uploads, by
content hash, whatever name the browser sent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import REPO

from brnn_core.inference.uploads import ALLOWED_SUFFIXES, UploadError, save_upload

HOSTILE_NAMES = [
    "../../etc/x", "../../../../../../etc/passwd", "/etc/passwd", "/tmp/evil.pt", "..", ".", "", "/",
    "a/../../b.pt", "..\\..\\windows\\system32\\x.pt", "C:\\Windows\\evil.ckpt", "name\x00.pt", "x.pt\x00.sh",
    "ünïcødé 名前.pth", "a" * 5000 + ".pt", "$(touch pwned).pt", "`id`.pt", "; rm -rf ~ #.pt", "x.pt/../../y",
    "~/.bashrc", "file:///etc/passwd", " spaced .PT ", ".uploads", "../.uploads/../../z.ckpt", "\n\r\t.pt",
    "CON", "x.pt.exe", "%2e%2e%2fetc%2fpasswd",
]


def _outside_snapshot(root: Path, runs_dir: Path) -> set[Path]:
    return {p for p in root.rglob("*") if not p.is_relative_to(runs_dir)}


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=[repr(n[:30]) for n in HOSTILE_NAMES])
def test_hostile_names_stay_inside_runs_uploads(tmp_path, monkeypatch, name):
    runs_dir = tmp_path / "work" / "runs"
    runs_dir.mkdir(parents=True)
    monkeypatch.chdir(runs_dir)  # a name used as a relative path would escape from here
    before = _outside_snapshot(tmp_path, runs_dir)
    data = b"checkpoint bytes " + name.encode("utf-8", "surrogateescape")
    path = save_upload(runs_dir, data, name, max_bytes=1 << 20)
    assert path.parent == (runs_dir / ".uploads").resolve()
    assert path.resolve().is_relative_to(runs_dir.resolve())
    assert path.suffix in ALLOWED_SUFFIXES and len(path.name) <= 40 and path.name[:20].isalnum()
    assert path.read_bytes() == data
    assert _outside_snapshot(tmp_path, runs_dir) == before, "something was written outside the runs folder"
    assert [p.name for p in (runs_dir / ".uploads").iterdir()] == [path.name]  # no temp files left over
    assert not Path("/tmp/evil.pt").exists() or Path("/tmp/evil.pt").stat().st_size != len(data)


def test_over_the_limit_is_refused_with_a_clear_error(tmp_path):
    runs_dir = tmp_path / "runs"
    with pytest.raises(UploadError, match=r"'big\.pt' is 2\.0 MB; the limit is 1 MB"):
        save_upload(runs_dir, b"x" * (2 << 20), "big.pt", max_bytes=1 << 20)
    assert isinstance(UploadError("x"), ValueError)
    assert not (runs_dir / ".uploads").exists() or not list((runs_dir / ".uploads").iterdir())
    assert save_upload(runs_dir, b"x" * (1 << 20), "ok.pt", max_bytes=1 << 20).stat().st_size == 1 << 20
    with pytest.raises(UploadError, match="empty"):
        save_upload(runs_dir, b"", "empty.pt")


def test_same_bytes_same_file_other_bytes_other_file(tmp_path):
    a1 = save_upload(tmp_path, b"AAAA", "one.pt")
    a2 = save_upload(tmp_path, b"AAAA", "../two.pt")
    b = save_upload(tmp_path, b"BBBB", "one.pt")
    assert a1 == a2 and a1 != b
    assert save_upload(tmp_path, b"AAAA", "m.ckpt").suffix == ".ckpt"
    assert save_upload(tmp_path, b"AAAA", "m.sh").suffix == ".pt"


def test_a_symlinked_uploads_folder_pointing_outside_is_refused(tmp_path):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (runs_dir / ".uploads").symlink_to(outside)
    with pytest.raises(UploadError, match="outside the runs folder"):
        save_upload(runs_dir, b"data", "x.pt")
    assert not list(outside.iterdir())


def test_a_planted_symlink_at_the_target_name_is_replaced_not_followed(tmp_path):
    import hashlib

    runs_dir = tmp_path / "runs"
    (runs_dir / ".uploads").mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    data = b"payload"
    name = hashlib.sha256(data).hexdigest()[:20] + ".pt"
    (runs_dir / ".uploads" / name).symlink_to(victim)
    path = save_upload(runs_dir, data, "x.pt")
    assert not path.is_symlink() and path.read_bytes() == data
    assert victim.read_text() == "precious"


def test_the_predict_page_saves_uploads_only_through_save_upload():
    source = (REPO / "pages" / "predict.py").read_text()
    assert "from brnn_core.inference.uploads import" in source and "save_upload(runs_dir, upload.getvalue()" in source
    assert "write_bytes" not in source and "open(" not in source, "the page writes files itself"


def test_streamlit_refuses_oversized_uploads_before_the_page_sees_them():
    import tomllib

    cfg = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    source = (REPO / "pages" / "predict.py").read_text()
    limit = int(source.split("MAX_UPLOAD_MB = ")[1].split()[0])
    assert cfg["server"]["maxUploadSize"] <= limit, "the server accepts uploads the page then refuses"
    assert os.path.getsize(REPO / ".streamlit" / "config.toml") > 0
